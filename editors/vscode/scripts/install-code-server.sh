#!/bin/sh
# Vendored from the project tools (tools/install-code-server.sh) so that CI needs nothing outside the repo.
# Offline-registry install of code-server 4.100.3 (Code 1.100.3) on Node 20, no GitHub downloads.
# Prereqs (Debian): apt-get install -y libkrb5-dev ripgrep   (build-essential/python3 already present)
set -eu
DIR=${1:-$PWD/code-server}
mkdir -p "$DIR" && cd "$DIR"
[ -f package.json ] || echo '{"name":"cs","private":true}' > package.json
npm install --ignore-scripts code-server@4.100.3
npm_config_yes=true npm rebuild argon2                 # node-pre-gyp: GitHub fails -> builds from source
cd node_modules/code-server/lib/vscode
npm install --omit=dev --ignore-scripts
mkdir -p node_modules/@vscode/ripgrep/bin
ln -sf "$(command -v rg)" node_modules/@vscode/ripgrep/bin/rg   # postinstall skips download if bin/ exists
npm_config_yes=true npm rebuild                        # node-pty runs `npx node-gyp`, needs yes=true
ln -sfn node_modules node_modules.asar
(cd bin/remote-cli && ln -sf code-linux.sh code-server)
(cd bin/helpers && ln -sf browser-linux.sh browser.sh)
cd extensions && npm install --omit=dev
echo "code-server installed: node $DIR/node_modules/code-server/out/node/entry.js"
