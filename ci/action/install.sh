#!/usr/bin/env bash
# The GitHub Action's install step (action.yml), runnable anywhere: gpuemu-ls from the action's own checkout
# with the extras asked for. GPUEMU_ACTION_EXTRAS is comma-separated, spaces ignored; empty installs no extra
# (never "PATH[]", which pip rejects as an invalid requirement). Arguments are passed on to pip.
#
# Inputs (environment): GITHUB_ACTION_PATH (the action's checkout), GPUEMU_ACTION_EXTRAS, GPUEMU_ACTION_REPORT
# (html adds the [report] extra: matplotlib for the HTML report's plots), GPUEMU_ACTION_ATTEST (true adds
# the [attest] extra: cryptography, to sign the reports).
set -euo pipefail

extras="$(printf '%s' "${GPUEMU_ACTION_EXTRAS:-}" | tr -d '[:space:]')"
while [[ "$extras" == ,* ]]; do extras="${extras#,}"; done
while [[ "$extras" == *, ]]; do extras="${extras%,}"; done
if [[ ! "$extras" =~ ^[A-Za-z0-9_,-]*$ ]]; then
  echo "gpuemu-ls action: extras must be comma-separated names (cuda, triton, torch, jax), got '$GPUEMU_ACTION_EXTRAS'" >&2
  exit 2
fi
[[ "${GPUEMU_ACTION_REPORT:-}" == html ]] && extras="${extras:+$extras,}report"
[[ "${GPUEMU_ACTION_ATTEST:-false}" == true ]] && extras="${extras:+$extras,}attest"
spec="${GITHUB_ACTION_PATH:?set GITHUB_ACTION_PATH to the checkout of the action}"
[[ -n "$extras" ]] && spec="${spec}[${extras}]"
python -m pip install --quiet "$@" "$spec"
