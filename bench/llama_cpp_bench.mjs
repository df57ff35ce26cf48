// Side-by-side reference: llama.cpp's own speed on the same GGUF file, on this machine, through
// node-llama-cpp's prebuilt CPU build (the same package the oracle test installs). Prints pp and tg
// tokens/s like `peregrine bench` (mean ± sd over repetitions), and JSON with --json.
// Usage: node llama_cpp_bench.mjs MODEL [--threads 2] [-p 512] [-n 128] [-r 3] [--json]
// Run from a folder whose node_modules holds node-llama-cpp (e.g. build/tests/oracle/node), or
// see scripts/llama_cpp_bench.sh, which sets that up.
import {getLlama} from "node-llama-cpp";

const args = process.argv.slice(2);
const opt = (names, dflt) => {
  const i = args.findIndex((a) => names.includes(a));
  return i >= 0 ? Number(args[i + 1]) : dflt;
};
const model_path = args[0];
const threads = opt(["-t", "--threads"], 2), n_prompt = opt(["-p"], 512), n_gen = opt(["-n"], 128);
const reps = opt(["-r"], 3), json = args.includes("--json");
if (!model_path) {
  console.error("usage: llama_cpp_bench.mjs MODEL [-t N] [-p N] [-n N] [-r N] [--json]");
  process.exit(2);
}

const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath: model_path});
const vocab = model.fileInfo.metadata.tokenizer?.ggml?.tokens?.length ?? 32000;
let seed = 12345;
const rand_tokens = (n) => Array.from({length: n}, () => (seed = (seed * 1103515245 + 12345) % 2147483648) % vocab);
const stats = (v) => {
  const mean = v.reduce((a, b) => a + b, 0) / v.length;
  const sd = Math.sqrt(v.reduce((a, b) => a + (b - mean) ** 2, 0) / Math.max(1, v.length - 1));
  return {mean, sd};
};
const out = {engine: "llama.cpp (node-llama-cpp)", model: model_path, threads};

if (n_prompt > 0) {
  const v = [];
  for (let r = 0; r < reps + 1; ++r) {
    const ctx = await model.createContext({contextSize: n_prompt + 16, batchSize: n_prompt, threads});
    const seq = ctx.getSequence();
    const tokens = rand_tokens(n_prompt);
    const t0 = performance.now();
    await seq.evaluateWithoutGeneratingNewTokens(tokens);
    const s = (performance.now() - t0) / 1000;
    if (r > 0) v.push(n_prompt / s);  // the first run warms up
    await ctx.dispose();
  }
  out.pp = {tokens: n_prompt, ...Object.fromEntries(Object.entries(stats(v)).map(([k, x]) => [`tps_${k}`, x]))};
}
if (n_gen > 0) {
  const v = [];
  for (let r = 0; r < reps + 1; ++r) {
    const ctx = await model.createContext({contextSize: n_gen + 16, batchSize: 16, threads});
    const seq = ctx.getSequence();
    let n = 0;
    const t0 = performance.now();
    for await (const _ of seq.evaluate([1], {temperature: 0})) {
      if (++n >= n_gen) break;
    }
    const s = (performance.now() - t0) / 1000;
    if (r > 0) v.push(n_gen / s);
    await ctx.dispose();
  }
  out.tg = {tokens: n_gen, ...Object.fromEntries(Object.entries(stats(v)).map(([k, x]) => [`tps_${k}`, x]))};
}
if (json) {
  console.log(JSON.stringify(out));
} else {
  for (const k of ["pp", "tg"]) {
    if (out[k]) console.log(`| llama.cpp ${k}${out[k].tokens} | ${out[k].tps_mean.toFixed(2)} ± ${out[k].tps_sd.toFixed(2)} tok/s |`);
  }
}
