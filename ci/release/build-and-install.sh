#!/usr/bin/env bash
# Build the sdist, the wheel and the VS Code extension into OUT (default dist/), then install the wheel in
# a fresh virtual environment and smoke-test what a user gets: the commands, the package data, the gate on
# the bundled quickstart. The release workflow runs it before publishing; .ci/run runs it too.
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${1:-dist}"
py="${PYTHON:-python3}"
rm -rf "$out" && mkdir -p "$out"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$py" -m venv "$tmp/build-env"
"$tmp/build-env/bin/pip" install --quiet build
"$tmp/build-env/bin/python" -m build --outdir "$out" . >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }

(cd editors/vscode && { [ -d node_modules ] || npm ci --silent; } && npm run --silent package)
cp editors/vscode/gpuemu.vsix "$out/gpuemu-$(python3 -c 'import json; print(json.load(open("editors/vscode/package.json"))["version"])').vsix"

# a fresh environment with nothing but the built wheel (and its dependencies)
"$py" -m venv "$tmp/user-env"
"$tmp/user-env/bin/pip" install --quiet "$out"/gpuemu_ls-*.whl
"$tmp/user-env/bin/gpuemu" --version
"$tmp/user-env/bin/gpuemu-ls" --version
cp -r examples/quickstart "$tmp/quickstart"
rm -rf "$tmp/quickstart/.gpuemu"
(cd "$tmp" && "$tmp/user-env/bin/gpuemu-ls" --check quickstart --quick --no-progress)
# the sdist carries what the wheel is built from
tar -tzf "$out"/gpuemu_ls-*.tar.gz >"$tmp/sdist.txt"
grep -q "gpuemu_ls/engine/run/worker.py" "$tmp/sdist.txt"
ls -l "$out"
echo "build-and-install: ok"
