#!/usr/bin/env bash
# Installs the pinned node-llama-cpp (CPU build only) into the build tree if it is not there yet,
# then runs compare.mjs on one file set. Usage: run_oracle.sh PEREGRINE_BINARY SHARED_DIR WORK_DIR SET
# (SET: base, quant or window; the tests share WORK_DIR's node install, each its own files/ folder).
# SET perplexity runs perplexity.mjs instead, on the demo target and its Austen validation text
# (training/austen_text.py writes it from Debian's r-cran-janeaustenr, fetched with apt-get download).
set -euo pipefail
peregrine=$1 shared=$2 work=$3 set=${4:-base}
here=$(cd "$(dirname "$0")" && pwd)
command -v node >/dev/null || { echo "oracle: node is not installed (scripts/setup.sh installs it)"; exit 1; }
[[ -f $shared/models/stories260K/stories260K.bin ]] || { echo "oracle: missing $shared/models/stories260K"; exit 1; }
pkg=$work/node
mkdir -p "$pkg"
# The two sets may start together (ctest -j): one installs while the other waits on the lock.
(
  flock 9
  if [[ ! -f $pkg/node_modules/@node-llama-cpp/linux-x64/package.json ]]; then
    echo '{"name":"peregrine-oracle","private":true}' > "$pkg/package.json"
    # --omit=optional skips the CUDA/Vulkan/ARM builds; the CPU build is named explicitly.
    (cd "$pkg" && npm install --no-audit --no-fund --ignore-scripts --omit=optional \
        node-llama-cpp@3.21.1 @node-llama-cpp/linux-x64@3.21.1 >/dev/null)
  fi
) 9>"$pkg/.install.lock"
if [[ $set == perplexity ]]; then
  text=$work/austen-validation.txt
  if [[ ! -f $text ]]; then
    python3 "$here/../../training/austen_text.py" -o "$text.part" && mv "$text.part" "$text"
  fi
  cp "$here/perplexity.mjs" "$pkg/perplexity.mjs"
  exec node "$pkg/perplexity.mjs" "$peregrine" "$shared" "$work/files-$set" "$here/../../models/demo-target.gguf" "$text"
fi
cp "$here/compare.mjs" "$pkg/compare-$set.mjs"
exec node "$pkg/compare-$set.mjs" "$peregrine" "$shared" "$work/files-$set" "$set"
