#!/usr/bin/env bash
# The web page's browser test. Installs the pinned puppeteer-core into the build tree if it is
# not there yet, then runs the Node test file against Debian's chromium.
# Usage: run_webui_test.sh PEREGRINE_BINARY WORK_DIR (install | TEST_FILE.mjs)
# Fails (never skips) when node, npm, chromium or the binary is missing.
set -euo pipefail
peregrine=$(realpath -m "$1") work=$(realpath -m "$2") what=$3
here=$(cd "$(dirname "$0")" && pwd)
puppeteer_version=24.10.0
command -v node >/dev/null || { echo "webui: node is not installed (scripts/setup.sh installs it)"; exit 1; }
pkg=$work/node
installed() { [[ -f $pkg/node_modules/$1/package.json ]] && node -p "require('$pkg/node_modules/$1/package.json').version"; }
if [[ $what == install ]]; then
  if [[ $(installed puppeteer-core) != "$puppeteer_version" ]]; then
    command -v npm >/dev/null || { echo "webui: npm is not installed (scripts/setup.sh installs it)"; exit 1; }
    mkdir -p "$pkg"
    echo '{"name":"peregrine-webui-test","private":true,"type":"module"}' > "$pkg/package.json"
    (cd "$pkg" && npm install --no-audit --no-fund --ignore-scripts "puppeteer-core@$puppeteer_version" >/dev/null)
  fi
  echo "webui: puppeteer-core $(installed puppeteer-core) in $pkg"
  exit 0
fi
[[ -x $peregrine ]] || { echo "webui: $peregrine is not built"; exit 1; }
[[ -x /usr/bin/chromium ]] || { echo "webui: /usr/bin/chromium is missing (scripts/setup.sh installs it)"; exit 1; }
[[ -f $pkg/node_modules/puppeteer-core/package.json ]] || { echo "webui: puppeteer-core is not installed in $pkg (the webui_install test does that)"; exit 1; }
cp "$here"/*.mjs "$pkg/"
export PEREGRINE_BIN=$peregrine WEBUI_OUT=$work
exec node --test-reporter=spec "$pkg/$what"
