#!/usr/bin/env bash
# End-to-end tests of `peregrine serve` with real clients. Installs the pinned official `openai`
# npm package (and ajv, the JSON Schema validator the structured-output test checks answers
# with) into the build tree if they are not there yet, then runs one Node test file.
# Usage: run_serve_e2e.sh PEREGRINE_BINARY WORK_DIR (install | TEST_FILE.mjs)
# Fails (never skips) when node, npm or the binary is missing.
set -euo pipefail
peregrine=$(realpath -m "$1") work=$(realpath -m "$2") what=$3
here=$(cd "$(dirname "$0")" && pwd)
openai_version=4.104.0
ajv_version=8.17.1
command -v node >/dev/null || { echo "serve_e2e: node is not installed (scripts/setup.sh installs it)"; exit 1; }
[[ -x $peregrine ]] || { echo "serve_e2e: $peregrine is not built"; exit 1; }
# The server under test runs the demo model embedded in the binary from this file.
[[ -f $here/../../models/demo-target.gguf ]] || { echo "serve_e2e: missing models/demo-target.gguf (the embedded demo model)"; exit 1; }
pkg=$work/node
installed() { [[ -f $pkg/node_modules/$1/package.json ]] && node -p "require('$pkg/node_modules/$1/package.json').version"; }
if [[ $what == install ]]; then
  if [[ $(installed openai) != "$openai_version" || $(installed ajv) != "$ajv_version" ]]; then
    command -v npm >/dev/null || { echo "serve_e2e: npm is not installed (scripts/setup.sh installs it)"; exit 1; }
    mkdir -p "$pkg"
    echo '{"name":"peregrine-serve-e2e","private":true,"type":"module"}' > "$pkg/package.json"
    (cd "$pkg" && npm install --no-audit --no-fund --ignore-scripts "openai@$openai_version" "ajv@$ajv_version" >/dev/null)
  fi
  echo "serve_e2e: openai $(installed openai), ajv $(installed ajv) in $pkg"
  exit 0
fi
[[ -f $pkg/node_modules/openai/package.json ]] || { echo "serve_e2e: openai is not installed in $pkg (the serve_e2e_install test does that)"; exit 1; }
# The scripts live next to node_modules so that `import 'openai'` resolves there.
cp "$here"/*.mjs "$pkg/"
export PEREGRINE_BIN=$peregrine
export PEREGRINE_MODELS=$here/../../models
exec node --test-reporter=spec "$pkg/$what"
