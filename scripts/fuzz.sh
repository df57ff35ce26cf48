#!/usr/bin/env bash
# Fuzzes the GGUF reader: configures build-fuzz/ with clang++ (libFuzzer + ASan + UBSan), builds
# fuzz_gguf, seeds a corpus with small generated GGUF files (and ../shared tokenizer GGUFs if
# present), then runs the fuzzer for SECONDS (default 30). Exits non-zero if it finds a bug; the
# reproducer is left in build-fuzz/fuzz-artifacts/.
#   usage: scripts/fuzz.sh [SECONDS]
#   env:   PEREGRINE_FUZZ_BUILD_DIR (default build-fuzz), CLANGXX (default clang++)
set -euo pipefail
seconds=${1:-30}
cd "$(dirname "$0")/.."
root=$PWD
build=${PEREGRINE_FUZZ_BUILD_DIR:-$root/build-fuzz}
clangxx=${CLANGXX:-clang++}

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$clangxx" -DCMAKE_BUILD_TYPE=Release \
  -DPEREGRINE_BUILD_TESTS=OFF -DPEREGRINE_BUILD_FUZZERS=ON >/dev/null
cmake --build "$build" --target fuzz_gguf make_gguf_seeds -j2

corpus=$build/fuzz-corpus/gguf
artifacts=$build/fuzz-artifacts
mkdir -p "$corpus" "$artifacts"
"$build/fuzz/make_gguf_seeds" "$corpus"
for f in "$root"/../shared/tokenizers/*.gguf; do
  # Only the head of a large vocabulary file is useful (and libFuzzer caps inputs at max_len).
  [ -f "$f" ] && head -c 16384 "$f" > "$corpus/shared-$(basename "$f")"
done

"$build/fuzz/fuzz_gguf" "$corpus" -max_total_time="$seconds" -max_len=16384 -timeout=10 \
  -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts/"
