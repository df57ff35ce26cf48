// Writes the expected outputs for peregrine's Hugging Face tokenizer.json loader and chat
// templates, computed by the reference implementations: token ids by @huggingface/tokenizers
// (cross-checked against @lenml/tokenizers, the transformers.js fork; they must agree), chat
// prompts by @huggingface/jinja. Tokenizer files are the real ones the @lenml/tokenizer-* packages
// ship; a few variants of them exercise options those files do not use.
// Usage: node expected.mjs OUT_DIR   (writes OUT_DIR/<name>/{tokenizer.json,...} and OUT_DIR/<name>.cases.json)
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { Tokenizer } from "@huggingface/tokenizers";
import { TokenizerLoader } from "@lenml/tokenizers";
import { Template } from "@huggingface/jinja";

const require = createRequire(import.meta.url);
const out = process.argv[2];
fs.mkdirSync(out, { recursive: true });

const corpus = [
  "Hello world", "The quick brown fox jumps over the lazy dog.",
  "I'm sure they'll say it's John's; DON'T you think? We'VE seen it.",
  "In 2024, 1234567 people paid $3.50 each (about 12.5%) -- 3.14159e-10.",
  "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
  "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }  // dot\n",
  "<html><body class=\"x\">&amp; <br/></body></html>",
  "日本語のテキストを正しく分割できますか？", "中文分词测试：我们今天去公园散步。", "한국어 문장도 처리해야 합니다.",
  "😀👍🏽 family: 👨‍👩‍👧‍👦 flags: 🇯🇵🇫🇷 ✨🎉",
  "Ünïcödé façade naïve coöperate", "Ελληνικά Русский العربية עברית हिन्दी ไทย",
  "e\u0301 cafe\u0301 A\u030a \u212b fi ﬁ",  // decomposed accents (NFC composes them), a ligature
  "  leading spaces", "trailing spaces   ", "a\tb\t\tc", "line1\n\nline2\r\nline3\n\n\n",
  "    \n    indented\n\t\tx", " ", "\n", "", "   ", "ababababa aaaaaaaaaaaaaaaa", "repeated!!!!!!!!??????......",
  "Pneumonoultramicroscopicsilicovolcanoconiosis", "ÀÁÂÃÄÅÆÇÈÉÊËÌÍÎÏ àáâãäåæçèéêëìíîï",
  "mixed<s>tags</s> and <|im_start|> and <start_of_turn> and <|begin_of_text|>",
  "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in " +
    "want of a wife.\n\nHowever little known the feelings or views of such a man may be on his first entering " +
    "a neighbourhood, this truth is so well fixed in the minds of the surrounding families, that he is " +
    "considered as the rightful property of some one or other of their daughters.",
];

const chats = [
  { messages: [{ role: "user", content: "Hello!" }], add_generation_prompt: true },
  { messages: [{ role: "system", content: "You are terse." }, { role: "user", content: "Hi" },
               { role: "assistant", content: "Hello." }, { role: "user", content: "What is 2+2?" }],
    add_generation_prompt: true },
  { messages: [{ role: "user", content: "Line one\n  line two\t{{ not a tag }} {% nor this %}" },
               { role: "assistant", content: "Sure: ünïcödé 日本語 😀" }],
    add_generation_prompt: false },
  { messages: [{ role: "user", content: "Think first." },
               { role: "assistant", content: "<think>\nLet me see.\n</think>\n\nFour." },
               { role: "user", content: "Again?" }],
    add_generation_prompt: true },
];

// Tool calling, for templates that speak of tools (Qwen 3): tool definitions, an assistant turn
// that calls two tools (arguments as objects, as transformers passes them) and their results.
const weather = { type: "function", function: { name: "get_weather", description: "The weather in a city",
  parameters: { type: "object", properties: { city: { type: "string" }, unit: { enum: ["celsius", "fahrenheit"] } },
                required: ["city"] } } };
const add = { type: "function", function: { name: "add", description: "Adds two integers",
  parameters: { type: "object", properties: { b: { type: "integer" }, a: { type: "integer" } } } } };
const toolChats = [
  { messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "Weather in Bath?" }],
    tools: [weather, add], add_generation_prompt: true },
  { messages: [{ role: "user", content: "Weather in Bath, and 2 + 3?" },
               { role: "assistant", content: "",
                 tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: { city: "Bath", unit: "celsius" } } },
                              { id: "call_2", type: "function", function: { name: "add", arguments: { b: 3, a: 2 } } }] },
               { role: "tool", tool_call_id: "call_1", content: "18 C, sunny" },
               { role: "tool", tool_call_id: "call_2", content: "5" }],
    tools: [weather, add], add_generation_prompt: true },
];

const specials = {
  llama3: ["<|begin_of_text|>Hi<|eot_id|>", "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"],
  qwen3: ["<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\nx</think>\n\nok<|im_end|>",
          "<tool_call>{\"a\": 1}</tool_call><|endoftext|>"],
  gemma3: ["<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n", "<bos><eos><pad> <mask>[multimodal]"],
  llama2: ["<s>[INST] hi [/INST] ok</s><s>[INST] again [/INST]", "<unk>x</s>"],
};

function write_dir(name, tokenizer_json, config) {
  const dir = path.join(out, name);
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, "tokenizer.json"), JSON.stringify(tokenizer_json));
  fs.writeFileSync(path.join(dir, "tokenizer_config.json"), JSON.stringify(config));
  return dir;
}

function cases(name, base, tj, tc, extra_texts, with_chat) {
  const dir = write_dir(name, tj, tc);
  const hf = new Tokenizer(tj, tc);
  const lenml = TokenizerLoader.fromPreTrained({ tokenizerJSON: tj, tokenizerConfig: tc });
  const encode = [];
  for (const text of [...corpus, ...(extra_texts || [])]) {
    for (const add_special of [true, false]) {
      const ids = hf.encode(text, { add_special_tokens: add_special }).ids;
      const other = lenml.encode(text, { add_special_tokens: add_special });
      if (JSON.stringify(ids) !== JSON.stringify(other)) {
        throw new Error(`${name}: the two references disagree on ${JSON.stringify(text)}: ${ids} vs ${other}`);
      }
      encode.push({ text, add_special, ids });
    }
  }
  const chat = [];
  if (with_chat && typeof tc.chat_template === "string") {
    const template = new Template(tc.chat_template);
    const str = (t) => (t == null ? "" : typeof t === "string" ? t : t.content);
    const withTools = tc.chat_template.includes("tools") ? toolChats : [];
    for (const c of [...chats, ...withTools]) {
      const ctx = { ...c, bos_token: str(tc.bos_token), eos_token: str(tc.eos_token) };
      let expected, error;
      try { expected = template.render(ctx); } catch (e) { error = String(e.message || e); }
      chat.push({ ...ctx, expected, error });
    }
  }
  fs.writeFileSync(path.join(out, name + ".cases.json"), JSON.stringify({ name, base, dir, encode, chat }));
  console.log(`${name}: ${encode.length} encode cases, ${chat.length} chat cases`);
}

const load = (name) => {
  const read = (f) => JSON.parse(fs.readFileSync(require.resolve(`@lenml/tokenizer-${name}/models/${f}`), "utf8"));
  return [read("tokenizer.json"), read("tokenizer_config.json")];
};

for (const name of ["llama3", "qwen3", "gemma3", "llama2"]) {
  const [tj, tc] = load(name);
  cases(name, name, tj, tc, specials[name], true);
}

// Variants of the Llama 2 file: Metaspace pre-tokenizer instead of the Prepend normalizer.
{
  const [tj, tc] = load("llama2");
  for (const scheme of ["always", "first"]) {
    const v = structuredClone(tj);
    v.normalizer = null;
    v.pre_tokenizer = { type: "Metaspace", replacement: "\u2581", add_prefix_space: true, prepend_scheme: scheme, split: false };
    cases(`llama2-metaspace-${scheme}`, "llama2", v, tc, specials.llama2, false);
  }
  // A model type peregrine does not implement: the expected outcome is a clear error.
  const u = structuredClone(tj);
  u.model = { type: "Unigram", unk_id: 0, vocab: [["<unk>", 0], ["a", -1]] };
  const dir = write_dir("unigram", u, tc);
  fs.writeFileSync(path.join(out, "unigram.cases.json"),
                   JSON.stringify({ name: "unigram", dir, expect_error: "tokenizer model type 'Unigram' is not supported" }));
}
