#!/usr/bin/env bash
# Fuzzes one of peregrine's parsers with libFuzzer + ASan + UBSan: configures build-fuzz/ with
# clang++, builds the target, seeds a corpus, then runs the fuzzer for SECONDS (default 30).
# Exits non-zero if it finds a bug; the reproducer is left in build-fuzz/fuzz-artifacts/.
#   gguf:        the GGUF reader, seeded with small generated files (and the heads of the
#                ../shared tokenizer GGUFs if present)
#   safetensors: the safetensors header parser, seeded with small generated files
#   http:        the server's request parsing (HTTP/1.1 framing fed whole and in pieces, then the
#                OpenAI request fields), seeded with fuzz/http_seeds, with a dictionary
#   gbnf:        GBNF text compiled, then walked against a reference recognizer and token masks
#   json_schema: JSON Schema compiled to a grammar whose accepted documents must be JSON that
#                satisfies the schema
#   openai_body: a request body through everything the server does before the engine sees it
#                (parsers, tools, chat templates, tokenizers, constraints)
# Text targets (http, gbnf, json_schema, openai_body) first run every file of fuzz/TARGET_seeds once
# at full size (the regression inputs must pass quickly), then fuzz from them with fuzz/TARGET.dict.
#   usage: scripts/fuzz.sh [SECONDS] [gguf|safetensors|http|gbnf|json_schema|openai_body]   (default: gguf)
#   env:   PEREGRINE_FUZZ_BUILD_DIR (default build-fuzz), CLANGXX (default clang++)
set -euo pipefail
seconds=${1:-30}
target=${2:-gguf}
case $target in
  gguf|safetensors|http|gbnf|json_schema|openai_body) ;;
  *) echo "fuzz.sh: unknown target '$target' (gguf, safetensors, http, gbnf, json_schema or openai_body)" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
root=$PWD
build=${PEREGRINE_FUZZ_BUILD_DIR:-$root/build-fuzz}
clangxx=${CLANGXX:-clang++}

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$clangxx" -DCMAKE_BUILD_TYPE=Release \
  -DPEREGRINE_BUILD_TESTS=OFF -DPEREGRINE_BUILD_FUZZERS=ON >/dev/null

corpus=$build/fuzz-corpus/$target
artifacts=$build/fuzz-artifacts
mkdir -p "$corpus" "$artifacts"
common=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1)
# The ctest smoke runs set PEREGRINE_FUZZ_SMOKE_RUNS: a fixed seed and at most that many inputs,
# so a smoke run tries the same inputs on every machine (a finding it has not made here cannot turn
# CI red at random); campaigns without it draw a new seed each time.
if [[ -n ${PEREGRINE_FUZZ_SMOKE_RUNS:-} ]]; then
  common+=(-seed=1 -runs="$PEREGRINE_FUZZ_SMOKE_RUNS")
fi

# Text targets: binary, maximum input length.
declare -A text_targets=([http]="fuzz_http_request 4096" [gbnf]="fuzz_gbnf 8192" [json_schema]="fuzz_json_schema 8192"
                         [openai_body]="fuzz_openai_body 16384")
if [[ -n ${text_targets[$target]:-} ]]; then
  read -r binary max_len <<<"${text_targets[$target]}"
  cmake --build "$build" --target "$binary" -j2
  seeds=$root/fuzz/${target}_seeds
  # The seeds once each at full size (a corpus is cut to max_len): regression inputs included.
  if ! "$build/fuzz/$binary" -timeout=10 -rss_limit_mb=2048 "$seeds"/* >"$artifacts/$target-seeds.log" 2>&1; then
    cat "$artifacts/$target-seeds.log" >&2
    echo "fuzz.sh: a seed in fuzz/${target}_seeds fails (above)" >&2
    exit 1
  fi
  cp "$seeds"/* "$corpus/"
  "$build/fuzz/$binary" "$corpus" "${common[@]}" -dict="$root/fuzz/$target.dict" -max_len="$max_len" \
    -artifact_prefix="$artifacts/$target-"
  exit
fi

cmake --build "$build" --target "fuzz_$target" "make_${target}_seeds" -j2
"$build/fuzz/make_${target}_seeds" "$corpus"
if [[ $target == gguf ]]; then
  for f in "$root"/../shared/tokenizers/*.gguf; do
    # Only the head of a large vocabulary file is useful (and libFuzzer caps inputs at max_len).
    [ -f "$f" ] && head -c 16384 "$f" > "$corpus/shared-$(basename "$f")"
  done
fi
"$build/fuzz/fuzz_$target" "$corpus" "${common[@]}" -max_len=16384 -artifact_prefix="$artifacts/"
