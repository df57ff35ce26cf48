#!/usr/bin/env bash
# Installs the pinned node-llama-cpp (CPU build only) into the build tree if it is not there yet,
# then runs compare.mjs. Usage: run_oracle.sh PEREGRINE_BINARY SHARED_DIR WORK_DIR
set -euo pipefail
peregrine=$1 shared=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
command -v node >/dev/null || { echo "oracle: node is not installed (scripts/setup.sh installs it)"; exit 1; }
[[ -f $shared/models/stories260K/stories260K.bin ]] || { echo "oracle: missing $shared/models/stories260K"; exit 1; }
pkg=$work/node
if [[ ! -f $pkg/node_modules/@node-llama-cpp/linux-x64/package.json ]]; then
  mkdir -p "$pkg"
  echo '{"name":"peregrine-oracle","private":true}' > "$pkg/package.json"
  # --omit=optional skips the CUDA/Vulkan/ARM builds; the CPU build is named explicitly.
  (cd "$pkg" && npm install --no-audit --no-fund --ignore-scripts --omit=optional \
      node-llama-cpp@3.21.1 @node-llama-cpp/linux-x64@3.21.1 >/dev/null)
fi
cp "$here/compare.mjs" "$pkg/compare.mjs"
exec node "$pkg/compare.mjs" "$peregrine" "$shared" "$work/files"
