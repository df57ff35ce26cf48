// peregrine's perplexity against llama.cpp's (node-llama-cpp's prebuilt CPU build) on the same
// GGUF files and text, with llama-perplexity's rules computed here from llama.cpp's per-position
// probabilities: the text's tokens (BOS first) in non-overlapping windows of CTX tokens, each
// window's first token replaced by BOS, the logits at positions [CTX/2, CTX - 1) scored against
// the token after each; perplexity = exp(mean NLL). node-llama-cpp does not run llama-perplexity
// itself, but controlledEvaluate returns, for any position of a batch, the softmax of the raw
// logits over the whole vocabulary (greedy options apply no temperature, top-k or penalty), which
// is what llama-perplexity scores.
//
// Files: the demo target (f32 as committed, and converted by `peregrine convert` to q8_0 and
// q4_0) over the first windows of its Austen validation text, and stories260K (converted from
// llama2.c to f32, q8_0, q4_0) over the same text. For each: the tokens must be identical and the
// perplexities within 0.5% of each other.
// Usage: node perplexity.mjs PEREGRINE SHARED_DIR WORK_DIR DEMO_GGUF TEXT
import {execFileSync} from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import {getLlama} from "node-llama-cpp";

const [peregrine, shared, work, demo, textFile] = process.argv.slice(2);
fs.mkdirSync(work, {recursive: true});
const run = (args) => execFileSync(peregrine, args, {encoding: "utf8", stdio: ["ignore", "pipe", "pipe"]});
const TOLERANCE = 0.005;

const files = [];
for (const type of ["f32", "q8_0", "q4_0"]) {
  let file = demo;
  if (type !== "f32") {
    file = path.join(work, `demo-target-${type}.gguf`);
    run(["convert", demo, "-o", file, "--type", type]);
  }
  files.push({name: `demo-target ${type}`, file, ctx: 256, windows: 12});
}
const stories = path.join(shared, "models/stories260K");
for (const type of ["f32", "q8_0", "q4_0"]) {
  const file = path.join(work, `stories260K-${type}.gguf`);
  run(["convert", path.join(stories, "stories260K.bin"), "--tokenizer", path.join(stories, "tok512.bin"),
       "-o", file, "--type", type]);
  files.push({name: `stories260K ${type}`, file, ctx: 512, windows: 6});
}

const text = fs.readFileSync(textFile, "utf8");
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
let failed = 0;
const results = [];
for (const {name, file, ctx, windows} of files) {
  const model = await llama.loadModel({modelPath: file});
  const context = await model.createContext({contextSize: ctx, batchSize: ctx, threads: 1});
  const seq = context.getSequence();
  const tokens = Array.from(model.tokenize(text, false));
  if (model.tokens.shouldPrependBosToken) tokens.unshift(model.tokens.bos);
  const ours = run(["tokenize", file, "-f", textFile]).trim().split(" ").map(Number);
  if (JSON.stringify(ours) !== JSON.stringify(tokens)) {
    console.log(`FAIL: ${name}: the tokenizations differ (llama.cpp ${tokens.length} tokens, peregrine ${ours.length})`);
    failed++;
    continue;
  }
  const ask = {generateNext: {probabilities: true, options: {temperature: 0}}};
  const first = Math.floor(ctx / 2);
  let nll = 0, count = 0;
  for (let w = 0; w < windows; ++w) {
    const win = tokens.slice(w * ctx, (w + 1) * ctx);
    win[0] = model.tokens.bos;
    await seq.clearHistory();
    const input = win.map((t, j) => (j >= first && j < ctx - 1 ? [t, ask] : t));
    const out = await seq.controlledEvaluate(input);
    for (let j = first; j < ctx - 1; ++j) {
      nll -= Math.log(out[j].next.probabilities.get(win[j + 1]));
      count++;
    }
  }
  const theirs = Math.exp(nll / count);
  const mine = JSON.parse(run(["perplexity", file, "-f", textFile, "--ctx", String(ctx), "--chunks", String(windows),
                               "--json"]));
  const rel = Math.abs(mine.perplexity - theirs) / theirs;
  const ok = mine.scored === count && rel <= TOLERANCE;
  if (!ok) failed++;
  results.push({name, llama_cpp: theirs, peregrine: mine.perplexity, relative_difference: rel, scored: count});
  console.log(`${ok ? "ok" : "FAIL"}: ${name}: llama.cpp ${theirs.toFixed(4)}, peregrine ${mine.perplexity.toFixed(4)} ` +
              `(${(100 * rel).toFixed(3)}%, ${count} positions; peregrine scored ${mine.scored})`);
  seq.dispose();
  await context.dispose();
  await model.dispose();
}
fs.writeFileSync(path.join(work, "perplexity-oracle.json"), JSON.stringify(results, null, 1));
console.log(failed ? `${failed} failed` : "all within 0.5%");
process.exit(failed ? 1 : 0);
