// Constrained decoding through `peregrine serve` and the official openai client: 200 random JSON
// schemas (seeded: nesting, enums, arrays, optional fields, alternatives, references) answered at
// temperature 1 by the demo model, every output parsed and validated by ajv (an independent
// validator); json_object; GBNF grammars for arithmetic and a small CSV format checked by a parser
// and a regular expression written here; streaming, n > 1, logprobs and stop strings; bad input
// answered with 400 in OpenAI's error shape; an output cut by max_tokens says "length".
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import Ajv from 'ajv';
import { startServer, collectStream, metric, PROMPTS } from './lib.mjs';

let server;
let client;
let model;
const ajv = new Ajv({ strict: true, allErrors: true });

before(async () => {
  server = await startServer(['--max-seqs', '16']);
  client = server.client();
  model = server.model;
});
after(async () => { await server?.stop(); });

// mulberry32: a small seeded generator, so every run sends the same schemas.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// Random schemas of the supported subset, every one bounded (strings have maxLength, arrays
// maxItems), with `bytes`: the longest text its grammar allows (compact JSON: at most one space
// between tokens; a string character is at most 6 bytes, as \uXXXX).
function generator(seed) {
  const r = rng(seed);
  const pick = (n) => Math.floor(r() * n);
  const defs = {};
  const defBytes = {};
  const key = (name) => JSON.stringify(name).length;
  function node(depth) {
    switch (pick(depth >= 2 ? 6 : 10)) {
      case 0: {
        const s = { type: 'string', maxLength: 1 + pick(4) };
        if (pick(2)) s.minLength = pick(2);
        return [s, 2 + 6 * s.maxLength];
      }
      case 1: return pick(2) ? [{ type: 'integer' }, 17] : [{ type: 'number' }, 38];
      case 2: return pick(2) ? [{ type: 'boolean' }, 5] : [{ type: 'null' }, 4];
      case 3: return [{ enum: ['red', 'gr\u00e9en', 7, null, true] }, 8];
      case 4: return pick(2) ? [{ const: 'fixed' }, 7] : [{ const: 42 }, 2];
      case 5: return [{ type: ['string', 'null'], maxLength: 3 }, 20];
      case 6: case 7: {
        const properties = {};
        const required = [];
        let bytes = 3;
        for (let i = 0, n = 1 + pick(3); i < n; ++i) {
          const name = `f${i}` + (pick(4) === 0 ? ' x"y' : '');
          const [s, b] = node(depth + 1);
          properties[name] = s;
          bytes += key(name) + 4 + b + 1;
          if (pick(2)) required.push(name);
        }
        const s = { type: 'object', properties, required };
        if (pick(2)) s.additionalProperties = false;
        return [s, bytes];
      }
      case 8: {
        const min = pick(2);
        const max = min + pick(3);
        const [items, b] = node(depth + 1);
        return [{ type: 'array', items, minItems: min, maxItems: max }, 3 + max * (b + 3)];
      }
      default: {
        if (pick(2)) {
          const name = `d${Object.keys(defs).length}`;
          defs[name] = null;  // taken before the body, which may add definitions of its own
          const [s, b] = node(depth + 1);
          defs[name] = s;
          defBytes[name] = b;
          return [{ $ref: `#/$defs/${name}` }, b];
        }
        const [items, b] = node(depth + 1);
        // Branches of different types, so oneOf's "exactly one" holds.
        const branches = [{ type: 'integer' }, { type: 'string', maxLength: 2 }, { type: 'array', items, maxItems: 2 }];
        return [{ [pick(2) ? 'oneOf' : 'anyOf']: branches }, Math.max(17, 14, 3 + 2 * (b + 3))];
      }
    }
  }
  const [schema, bytes] = node(0);
  if (Object.keys(defs).length > 0) schema.$defs = defs;
  return { schema, bytes };
}

// The first 200 seeds whose schemas fit the demo model's context (256 tokens, each at least a byte).
function schemas(count, maxBytes) {
  const out = [];
  for (let seed = 1; out.length < count; ++seed) {
    const g = generator(seed);
    if (g.bytes <= maxBytes) out.push({ seed, ...g });
  }
  return out;
}

async function pool(items, width, fn) {
  const results = new Array(items.length);
  let next = 0;
  await Promise.all(Array.from({ length: width }, async () => {
    while (next < items.length) {
      const i = next++;
      results[i] = await fn(items[i], i);
    }
  }));
  return results;
}

const responseFormat = (schema) => ({ type: 'json_schema', json_schema: { name: 'out', schema, strict: true } });

test('200 random schemas at temperature 1: every output parses and validates (ajv)', async () => {
  const cases = schemas(200, 200);
  let chat = 0;
  await pool(cases, 8, async ({ seed, schema, bytes }, i) => {
    const common = { model, max_tokens: bytes, temperature: 1, seed, response_format: responseFormat(schema) };
    let text;
    let finish;
    if (i % 4 === 3) {
      chat += 1;
      const r = await client.chat.completions.create({ ...common, messages: [{ role: 'user', content: PROMPTS[i % PROMPTS.length] }] });
      text = r.choices[0].message.content;
      finish = r.choices[0].finish_reason;
    } else {
      const r = await client.completions.create({ ...common, prompt: PROMPTS[i % PROMPTS.length] });
      text = r.choices[0].text;
      finish = r.choices[0].finish_reason;
    }
    const where = `seed ${seed}: schema ${JSON.stringify(schema)}\noutput ${JSON.stringify(text)}`;
    assert.equal(finish, 'stop', where);
    let value;
    assert.doesNotThrow(() => { value = JSON.parse(text); }, where);
    const validate = ajv.compile(schema);
    assert.ok(validate(value), `${where}\n${ajv.errorsText(validate.errors)}`);
  });
  assert.ok(chat >= 40);
  assert.ok(await metric(server.url, 'peregrine_grammar_masked_rows_total') > 0);
  assert.ok(await metric(server.url, 'peregrine_grammar_seconds_total') > 0);
});

test('json_schema: the same seed gives the same output; properties come in the order written', async () => {
  const schema = { type: 'object', properties: { zeta: { type: 'integer' }, alpha: { enum: ['a', 'b'] } },
                   required: ['zeta', 'alpha'], additionalProperties: false };
  const ask = () => client.completions.create({ model, prompt: PROMPTS[0], max_tokens: 60, temperature: 1, seed: 5,
                                                response_format: responseFormat(schema) });
  const [a, b] = await Promise.all([ask(), ask()]);
  assert.equal(a.choices[0].text, b.choices[0].text);
  const keys = Object.keys(JSON.parse(a.choices[0].text));
  assert.deepEqual(keys, ['zeta', 'alpha']);
});

test('json_object on chat: any JSON object', async () => {
  for (let seed = 0; seed < 4; ++seed) {
    const r = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Describe Mr. Darcy.' }],
                                                     max_tokens: 200, temperature: 0.7, seed, response_format: { type: 'json_object' } });
    const text = r.choices[0].message.content;
    assert.ok(text.startsWith('{'), text);
    if (r.choices[0].finish_reason === 'stop') {
      const v = JSON.parse(text);
      assert.equal(typeof v, 'object');
      assert.ok(v !== null && !Array.isArray(v));
    }
  }
});

test('streaming, n > 1 and logprobs: every choice validates and the logprob tokens spell it', async () => {
  const schema = { type: 'object', properties: { name: { type: 'string', maxLength: 6 }, n: { type: 'integer' },
                                                 tags: { type: 'array', items: { enum: ['x', 'y'] }, maxItems: 3 } },
                   required: ['name', 'n', 'tags'], additionalProperties: false };
  const validate = ajv.compile(schema);
  const s = await collectStream(await client.completions.create({
    model, prompt: PROMPTS[2], max_tokens: 150, temperature: 1, seed: 3, n: 3, logprobs: 2, stream: true,
    response_format: responseFormat(schema) }));
  assert.equal(s.byIndex.size, 3);
  for (const [index, c] of s.byIndex) {
    assert.equal(c.finish_reason, 'stop', `choice ${index}: ${c.text}`);
    assert.ok(validate(JSON.parse(c.text)), c.text);
    assert.equal(c.tokens.join(''), c.text);
  }
  const chat = await collectStream(await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'Who?' }], max_tokens: 150, temperature: 1, seed: 4, n: 2,
    logprobs: true, top_logprobs: 2, stream: true, response_format: responseFormat(schema) }));
  for (const [, c] of chat.byIndex) {
    assert.equal(c.finish_reason, 'stop');
    assert.ok(validate(JSON.parse(c.text)), c.text);
  }
});

test('a stop string inside constrained output ends it there', async () => {
  // A seed whose JSON object reaches a ':' within the limit (a key's), found without the stop
  // string; with it, the same sampling stops just before that ':'.
  const ask = (seed, stop) => client.completions.create({ model, prompt: PROMPTS[1], max_tokens: 100, temperature: 1,
                                                          seed, stop, response_format: { type: 'json_object' } });
  let tried = 0;
  for (let seed = 1; seed <= 12; ++seed) {
    const free = (await ask(seed, undefined)).choices[0].text;
    const at = free.indexOf(':');
    if (at < 0) continue;
    ++tried;
    const c = (await ask(seed, [':'])).choices[0];
    assert.equal(c.finish_reason, 'stop');
    assert.equal(c.text, free.slice(0, at));
    assert.ok(c.text.startsWith('{'), c.text);
    if (tried === 2) break;
  }
  assert.ok(tried > 0, 'no seed reached a colon');
});

// GBNF: arithmetic expressions (bounded depth, so every output ends) and a small CSV format.
const ARITHMETIC = String.raw`
root  ::= expr
expr  ::= term (op term){0,3}
term  ::= num | "(" num (op num){1,2} ")"
op    ::= " "? [-+*/] " "?
num   ::= [0-9]{1,3}
`;

// A recursive-descent reading of the same language, written independently of the grammar text.
function isArithmetic(s) {
  let i = 0;
  const num = () => { const m = /^[0-9]{1,3}/.exec(s.slice(i)); if (!m) return false; i += m[0].length; return !/^[0-9]/.test(s.slice(i)); };
  const op = () => { const m = /^ ?[-+*/] ?/.exec(s.slice(i)); if (!m) return false; i += m[0].length; return true; };
  const term = () => {
    if (s[i] !== '(') return num();
    i += 1;
    if (!num()) return false;
    let k = 0;
    while (s[i] !== ')') { if (!op() || !num()) return false; k += 1; }
    i += 1;
    return k >= 1 && k <= 2;
  };
  if (!term()) return false;
  for (let k = 0; i < s.length; ++k) { if (k === 3 || !op() || !term()) return false; }
  return true;
}

const CSV = String.raw`
root   ::= line line{1,3}
line   ::= field ("," field){1,3} "\n"
field  ::= [a-z0-9]{1,5} | "\"" [a-z ,]{0,5} "\""
`;
const CSV_RE = /^((?:[a-z0-9]{1,5}|"[a-z ,]{0,5}")(?:,(?:[a-z0-9]{1,5}|"[a-z ,]{0,5}")){1,3}\n){2,4}$/;

test('GBNF: arithmetic expressions and CSV, through the grammar extension field', async () => {
  const results = await pool([...Array(24).keys()], 8, async (seed) => {
    const csv = seed % 2 === 1;
    const r = await client.completions.create({ model, prompt: PROMPTS[seed % PROMPTS.length], temperature: 1, seed,
                                                max_tokens: csv ? 160 : 60, grammar: csv ? CSV : ARITHMETIC });
    return { csv, text: r.choices[0].text, finish: r.choices[0].finish_reason };
  });
  for (const { csv, text, finish } of results) {
    assert.equal(finish, 'stop', text);
    assert.ok(csv ? CSV_RE.test(text) : isArithmetic(text), JSON.stringify(text));
  }
  assert.ok(isArithmetic('(1 +2)*30') && !isArithmetic('1+') && !isArithmetic('(1)'));
});

test('bad schemas and grammars: 400 in OpenAI error shape, naming the field and the problem', async () => {
  const cases = [
    [{ response_format: responseFormat({ type: 'integer', minimum: 3 }) }, 'response_format', "unsupported keyword 'minimum'"],
    [{ response_format: responseFormat({ type: 5 }) }, 'response_format', "'type' must be a string"],
    [{ response_format: responseFormat({ $ref: '#/$defs/nope' }) }, 'response_format', 'does not resolve'],
    [{ response_format: { type: 'json_schema' } }, 'response_format', 'json_schema'],
    [{ response_format: { type: 'yaml' } }, 'response_format', "'response_format.type'"],
    [{ grammar: 'root ::= "a" |\n  ( "b"' }, 'grammar', 'line 2, column'],
    [{ grammar: 'root ::= undefined-rule' }, 'grammar', "rule 'undefined-rule' is not defined"],
    [{ grammar: 'root ::= root "x"' }, 'grammar', 'left recursion'],
  ];
  for (const [extra, param, message] of cases) {
    for (const chat of [false, true]) {
      const body = chat ? { model, messages: [{ role: 'user', content: 'x' }], ...extra } : { model, prompt: 'x', ...extra };
      const err = await (chat ? client.chat.completions.create(body) : client.completions.create(body)).catch((e) => e);
      assert.equal(err.status, 400, `${JSON.stringify(extra)}: ${err}`);
      assert.equal(err.error?.type ?? err.type, 'invalid_request_error');
      assert.equal(err.param ?? err.error?.param, param);
      assert.ok(String(err.message).includes(message), `${err.message} should mention ${message}`);
    }
  }
  // Raw, to see the exact shape.
  const res = await fetch(`${server.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, prompt: 'x', grammar: 'root ::= [' }) });
  assert.equal(res.status, 400);
  const j = await res.json();
  assert.deepEqual(Object.keys(j.error).sort(), ['code', 'message', 'param', 'type']);
  assert.match(j.error.message, /^grammar: line 1, column 10: unterminated character class$/);
});

test('a schema that cannot be satisfied within max_tokens ends with length, and the text is a prefix', async () => {
  const schema = { type: 'object', properties: { long: { type: 'string', minLength: 50, maxLength: 60 } },
                   required: ['long'], additionalProperties: false };
  const r = await client.completions.create({ model, prompt: PROMPTS[3], max_tokens: 8, temperature: 1, seed: 1,
                                              response_format: responseFormat(schema) });
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.ok(r.choices[0].text.startsWith('{'), r.choices[0].text);
  assert.throws(() => JSON.parse(r.choices[0].text));
  // The server keeps serving.
  const ok = await client.completions.create({ model, prompt: 'x', max_tokens: 4, temperature: 0 });
  assert.ok(ok.choices[0].text.length >= 0);
});
