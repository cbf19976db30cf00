#!/usr/bin/env bash
# The bundled variant of the extension: a platform .vsix that carries gpuemu-ls's Python package and its
# dependencies in bundled/libs (as Microsoft's template for Python tools does), used when no interpreter has
# gpuemu-ls installed. The libraries are built for this machine's platform and CPython version (numpy and
# ml_dtypes are binary wheels), so the Python that runs them must be the same minor version.
#
#   bash scripts/build-bundled.sh           -> gpuemu-bundled-<platform>-<arch>.vsix
#   PYTHON=python3.12 bash scripts/...      -> built for that Python instead
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
REPO=$(cd ../.. && pwd)
rm -rf bundled
"$PY" -m pip install --quiet --disable-pip-version-check --no-compile --target bundled/libs "$REPO"
"$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])' > bundled/python-version
target="$(node -p 'process.platform')-$(node -p 'process.arch')"
[ -x node_modules/.bin/vsce ] || npm ci --silent
node_modules/.bin/vsce package --no-dependencies --skip-license --allow-missing-repository \
  --ignoreFile .vscodeignore.bundled --target "$target" -o "gpuemu-bundled-$target.vsix"
echo "built gpuemu-bundled-$target.vsix (bundled/libs for CPython $(cat bundled/python-version))"
