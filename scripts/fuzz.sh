#!/usr/bin/env bash
# Fuzzes a model-file reader: configures build-fuzz/ with clang++ (libFuzzer + ASan + UBSan),
# builds the target, seeds a corpus with small generated files (and, for GGUF, ../shared tokenizer
# GGUFs if present), then runs the fuzzer for SECONDS (default 30). Exits non-zero if it finds a
# bug; the reproducer is left in build-fuzz/fuzz-artifacts/.
#   usage: scripts/fuzz.sh [SECONDS] [gguf|safetensors]   (default target: gguf)
#   env:   PEREGRINE_FUZZ_BUILD_DIR (default build-fuzz), CLANGXX (default clang++)
set -euo pipefail
seconds=${1:-30}
target=${2:-gguf}
case $target in
  gguf|safetensors) ;;
  *) echo "fuzz.sh: unknown target '$target' (gguf or safetensors)" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
root=$PWD
build=${PEREGRINE_FUZZ_BUILD_DIR:-$root/build-fuzz}
clangxx=${CLANGXX:-clang++}

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$clangxx" -DCMAKE_BUILD_TYPE=Release \
  -DPEREGRINE_BUILD_TESTS=OFF -DPEREGRINE_BUILD_FUZZERS=ON >/dev/null
cmake --build "$build" --target "fuzz_$target" "make_${target}_seeds" -j2

corpus=$build/fuzz-corpus/$target
artifacts=$build/fuzz-artifacts
mkdir -p "$corpus" "$artifacts"
"$build/fuzz/make_${target}_seeds" "$corpus"
if [[ $target == gguf ]]; then
  for f in "$root"/../shared/tokenizers/*.gguf; do
    # Only the head of a large vocabulary file is useful (and libFuzzer caps inputs at max_len).
    [ -f "$f" ] && head -c 16384 "$f" > "$corpus/shared-$(basename "$f")"
  done
fi

"$build/fuzz/fuzz_$target" "$corpus" -max_total_time="$seconds" -max_len=16384 -timeout=10 \
  -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts/"
