#!/usr/bin/env bash
# End-to-end test of the VS Code extension in real VS Code (code-server + headless Chromium).
# Installs whatever is missing, packages the .vsix, runs test/e2e/vscode.e2e.ts; exits non-zero on failure.
#
#   editors/vscode/scripts/e2e.sh            # from anywhere; the repo's .venv must hold gpuemu-ls
#   editors/vscode/scripts/e2e.sh deps       # only the Debian packages and node_modules (.ci/run, before pytest:
#                                            # the suite's browser tests drive this chromium)
#
# Environment:
#   GPUEMU_E2E_SERVER     gpuemu-ls to test (default: <repo>/.venv/bin/gpuemu-ls)
#   CODE_SERVER_DIR       where code-server is (or gets) installed (default: editors/vscode/.e2e/code-server)
#   GPUEMU_E2E_ARTIFACTS  screenshots, logs, results.json (default: editors/vscode/test-artifacts)
#   GPUEMU_E2E_NO_APT=1   never call apt-get (fail if chromium/ripgrep/libkrb5-dev are missing)
set -euo pipefail

EXT=$(cd "$(dirname "$0")/.." && pwd)
REPO=$(cd "$EXT/../.." && pwd)
export CODE_SERVER_DIR=${CODE_SERVER_DIR:-$EXT/.e2e/code-server}
export GPUEMU_E2E_SERVER=${GPUEMU_E2E_SERVER:-$REPO/.venv/bin/gpuemu-ls}
cd "$EXT"

t_start=$(date +%s)
declare -a timings=()
phase() { # phase NAME COMMAND...: run and record how long it took
  local name=$1 t0 status=0
  shift
  t0=$(date +%s)
  echo "== $name"
  "$@" || status=$?
  timings+=("$name: $(($(date +%s) - t0))s")
  return $status
}

apt_packages() {
  local missing=()
  command -v chromium >/dev/null 2>&1 || missing+=(chromium)
  command -v rg >/dev/null 2>&1 || missing+=(ripgrep)
  dpkg -s libkrb5-dev >/dev/null 2>&1 || missing+=(libkrb5-dev)
  if [ ${#missing[@]} -eq 0 ]; then echo "present: chromium ripgrep libkrb5-dev"; return; fi
  if [ "${GPUEMU_E2E_NO_APT:-}" = 1 ]; then echo "missing Debian packages: ${missing[*]}" >&2; exit 2; fi
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
}

npm_install() {
  if [ -x node_modules/.bin/vsce ] && [ -x node_modules/.bin/tsx ] && [ -d node_modules/playwright-core ]; then
    echo "node_modules present"
  else
    npm ci --no-audit --no-fund
  fi
}

code_server() {
  if [ -f "$CODE_SERVER_DIR/node_modules/code-server/out/node/entry.js" ]; then
    echo "code-server present in $CODE_SERVER_DIR"
  else
    mkdir -p "$EXT/.e2e"
    sh "$EXT/scripts/install-code-server.sh" "$CODE_SERVER_DIR" >"$EXT/.e2e/install.log" 2>&1 \
      || { tail -50 "$EXT/.e2e/install.log"; exit 2; }
    tail -1 "$EXT/.e2e/install.log"
  fi
}

if [ "${1:-}" = deps ]; then
  phase "Debian packages" apt_packages
  phase "npm ci" npm_install
  exit 0
fi

if [ ! -x "$GPUEMU_E2E_SERVER" ]; then
  echo "gpuemu-ls not found at $GPUEMU_E2E_SERVER (install the repo: python3 -m venv .venv && .venv/bin/pip install -e .)" >&2
  exit 2
fi

phase "Debian packages" apt_packages
phase "npm ci" npm_install
phase "code-server install" code_server
phase "package .vsix" npm run --silent package
rc=0
phase "e2e in code-server" node --import tsx test/e2e/vscode.e2e.ts || rc=$?

echo "== timings"
printf '  %s\n' "${timings[@]}"
echo "  total: $(($(date +%s) - t_start))s"
if [ $rc -ne 0 ]; then
  echo "e2e FAILED (rc $rc); see ${GPUEMU_E2E_ARTIFACTS:-$EXT/test-artifacts}" >&2
fi
exit $rc
