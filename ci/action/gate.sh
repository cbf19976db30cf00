#!/usr/bin/env bash
# The GitHub Action's gate step (action.yml), runnable anywhere: it runs `gpuemu-ls --check` once, renders
# the results as JSON, JUnit, SARIF and a Markdown job summary, and records the gate's exit code as the
# step output `exit-code` instead of failing (the upload steps run first; the last step fails the job).
#
# Inputs (environment): GPUEMU_ACTION_PATH (workspace, default .), GPUEMU_ACTION_MODE (quick|thorough),
# GPUEMU_ACTION_SHARD (K/N|auto|empty), GPUEMU_ACTION_BASELINE, GPUEMU_ACTION_FAIL_ON_REGRESSION (true|false),
# GPUEMU_ACTION_OUT (folder for the reports), GPUEMU_ACTION_REPORT (html: gpuemu.html too, from the same JSON),
# GPUEMU_ACTION_REDACT (true: the HTML without absolute paths and host name), GPUEMU_ACTION_ATTEST (true: sign
# the JSON and HTML into gpuemu.intoto.jsonl with the PEM key in GPUEMU_SIGNING_KEY, or without one keylessly
# into gpuemu.sigstore.json where the job has an OIDC identity); GitHub's GITHUB_OUTPUT and GITHUB_STEP_SUMMARY
# when present.
set -uo pipefail

ws="${GPUEMU_ACTION_PATH:-.}"
out="${GPUEMU_ACTION_OUT:-gpuemu-reports}"
mode="${GPUEMU_ACTION_MODE:-quick}"
mkdir -p "$out"

case "$mode" in
  quick | thorough) ;;
  *) echo "gpuemu-ls action: mode must be quick or thorough, got '$mode'" >&2; exit 2 ;;
esac
report="${GPUEMU_ACTION_REPORT:-}"
case "$report" in
  "" | html) ;;
  *) echo "gpuemu-ls action: report must be html or empty, got '$report'" >&2; exit 2 ;;
esac
attest="${GPUEMU_ACTION_ATTEST:-false}"
case "$attest" in
  true) [[ -n "${GPUEMU_SIGNING_KEY:-}" || -n "${ACTIONS_ID_TOKEN_REQUEST_URL:-}" ]] || { echo "gpuemu-ls action: attest: true signs with the PEM private key in GPUEMU_SIGNING_KEY (set it from a secret in the step's env), or keyless with the job's OIDC identity (permissions: id-token: write)" >&2; exit 2; } ;;
  false) ;;
  *) echo "gpuemu-ls action: attest must be true or false, got '$attest'" >&2; exit 2 ;;
esac
args=(--check "$ws" "--$mode" --format json --output "$out/gpuemu.json" --no-progress)
[[ -n "${GPUEMU_ACTION_SHARD:-}" ]] && args+=(--shard "$GPUEMU_ACTION_SHARD")
[[ -n "${GPUEMU_ACTION_BASELINE:-}" ]] && args+=(--baseline "$GPUEMU_ACTION_BASELINE")
[[ "${GPUEMU_ACTION_FAIL_ON_REGRESSION:-false}" == "true" ]] && args+=(--fail-on-regression)

gpuemu-ls "${args[@]}"
code=$?

if [[ -s "$out/gpuemu.json" ]]; then
  for fmt in junit sarif markdown; do
    ext=$fmt; [[ $fmt == junit ]] && ext=junit.xml; [[ $fmt == markdown ]] && ext=md
    gpuemu report --input "$out/gpuemu.json" --format "$fmt" --output "$out/gpuemu.$ext" || code=$((code > 0 ? code : 1))
  done
  if [[ "$report" == html ]]; then
    redact=(); [[ "${GPUEMU_ACTION_REDACT:-false}" == "true" ]] && redact=(--redact)
    gpuemu report --input "$out/gpuemu.json" --format html ${redact[@]+"${redact[@]}"} --output "$out/gpuemu.html" || code=$((code > 0 ? code : 1))
  fi
  if [[ "$attest" == true ]]; then  # the key comes from the environment and is never written
    signed=("$out/gpuemu.json"); [[ -s "$out/gpuemu.html" ]] && signed+=("$out/gpuemu.html")
    keyless=(); [[ -z "${GPUEMU_SIGNING_KEY:-}" ]] && keyless=(--keyless)  # Sigstore: the job's OIDC identity
    gpuemu attest "${signed[@]}" ${keyless[@]+"${keyless[@]}"} || code=$((code > 0 ? code : 2))
  fi
  [[ -n "${GITHUB_STEP_SUMMARY:-}" ]] && cat "$out/gpuemu.md" >> "$GITHUB_STEP_SUMMARY"
else
  echo "gpuemu-ls action: the gate wrote no results (exit $code); see the log above" >&2
  [[ -n "${GITHUB_STEP_SUMMARY:-}" ]] && echo "### gpuemu-ls: no results (exit $code), see the job log" >> "$GITHUB_STEP_SUMMARY"
fi
[[ -n "${GITHUB_OUTPUT:-}" ]] && echo "exit-code=$code" >> "$GITHUB_OUTPUT"
echo "gpuemu-ls: exit $code; reports in $out"
exit 0
