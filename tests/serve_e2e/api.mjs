// The OpenAI API surface through the official `openai` client: completions and chat, streamed
// and not, n > 1, stop strings, logprobs, seeds, usage, echo, prompt lists and token-id prompts,
// /v1/models. Streamed and non-streamed answers to the same greedy request must agree exactly.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, collectStream, PROMPTS } from './lib.mjs';

let server;
let client;
let model;

before(async () => {
  server = await startServer();
  client = server.client();
  model = server.model;
});
after(async () => { await server?.stop(); });

const greedy = (prompt, extra = {}) => client.completions.create({ model, prompt, max_tokens: 24, temperature: 0, ...extra });

function checkUsage(usage, { completion } = {}) {
  assert.ok(usage, 'usage present');
  assert.ok(Number.isInteger(usage.prompt_tokens) && usage.prompt_tokens > 0, `prompt_tokens ${usage.prompt_tokens}`);
  assert.ok(Number.isInteger(usage.completion_tokens) && usage.completion_tokens > 0, `completion_tokens ${usage.completion_tokens}`);
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);
  if (completion !== undefined) assert.equal(usage.completion_tokens, completion);
}

test('GET /v1/models lists the served model', async () => {
  assert.equal(model, 'demo-target');
  const page = await client.models.list();
  const ids = page.data.map((m) => m.id);
  assert.deepEqual(ids, ['demo-target']);
  assert.equal(page.data[0].object, 'model');
  const one = await client.models.retrieve('demo-target').catch((e) => e);
  if (!(one instanceof Error)) assert.equal(one.id, 'demo-target');
});

test('completion: non-streamed shape, usage, and the streamed text is the same', async () => {
  const r = await greedy(PROMPTS[0], { max_tokens: 20, ignore_eos: true });
  assert.equal(r.object, 'text_completion');
  assert.match(r.id, /\S/);
  assert.ok(Number.isInteger(r.created));
  assert.equal(r.model, model);
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].index, 0);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.ok(r.choices[0].text.length > 0);
  checkUsage(r.usage, { completion: 20 });

  const s = await collectStream(await greedy(PROMPTS[0], { max_tokens: 20, ignore_eos: true, stream: true, stream_options: { include_usage: true } }));
  assert.equal(s.byIndex.size, 1);
  assert.equal(s.byIndex.get(0).text, r.choices[0].text);
  assert.equal(s.byIndex.get(0).finish_reason, 'length');
  assert.equal(s.usageChunks, 1, 'exactly one usage chunk');
  assert.deepEqual(s.usage, r.usage);
});

test('completion stream without include_usage carries no usage', async () => {
  const s = await collectStream(await greedy(PROMPTS[1], { max_tokens: 8, stream: true }));
  assert.equal(s.usageChunks, 0);
  assert.ok(s.byIndex.get(0).finish_reason);
});

test('chat: non-streamed message, streamed role delta then content, same text, usage chunk', async () => {
  const messages = [
    { role: 'system', content: 'You are a character in a novel.' },
    { role: 'user', content: 'Who is Mr. Darcy?' },
  ];
  const r = await client.chat.completions.create({ model, messages, max_tokens: 24, temperature: 0 });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.model, model);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  checkUsage(r.usage);

  const stream = await client.chat.completions.create({ model, messages, max_tokens: 24, temperature: 0, stream: true, stream_options: { include_usage: true } });
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  assert.ok(chunks.every((c) => c.object === 'chat.completion.chunk'));
  assert.equal(chunks[0].choices[0].delta.role, 'assistant', 'first delta carries the role');
  const usageChunks = chunks.filter((c) => c.usage);
  assert.equal(usageChunks.length, 1);
  assert.deepEqual(usageChunks[0].choices, []);
  assert.equal(chunks[chunks.length - 1], usageChunks[0], 'the usage chunk is last');
  assert.deepEqual(usageChunks[0].usage, r.usage);
  const finals = chunks.filter((c) => c.choices[0]?.finish_reason);
  assert.equal(finals.length, 1, 'one chunk carries finish_reason');
  assert.equal(finals[0].choices[0].finish_reason, r.choices[0].finish_reason);
  const text = chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');
  assert.equal(text, r.choices[0].message.content);
});

test('chat: content as a list of text parts equals the plain string', async () => {
  const a = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Tell me about Emma.' }], max_tokens: 12, temperature: 0 });
  const b = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: [{ type: 'text', text: 'Tell me about ' }, { type: 'text', text: 'Emma.' }] }], max_tokens: 12, temperature: 0,
  });
  assert.equal(b.choices[0].message.content, a.choices[0].message.content);
  assert.equal(b.usage.prompt_tokens, a.usage.prompt_tokens);
});

test('n > 1 with a seed: choice i is the single request seeded seed+i; streamed per index alike', async () => {
  const params = { model, prompt: PROMPTS[2], max_tokens: 16, temperature: 1.0, seed: 1234 };
  const r = await client.completions.create({ ...params, n: 3 });
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
  for (let i = 0; i < 3; i += 1) {
    const single = await client.completions.create({ ...params, seed: 1234 + i });
    assert.equal(r.choices[i].text, single.choices[0].text, `choice ${i}`);
  }
  const texts = new Set(r.choices.map((c) => c.text));
  assert.ok(texts.size > 1, 'sampled choices differ');
  const s = await collectStream(await client.completions.create({ ...params, n: 3, stream: true, stream_options: { include_usage: true } }));
  assert.equal(s.byIndex.size, 3);
  for (let i = 0; i < 3; i += 1) assert.equal(s.byIndex.get(i).text, r.choices[i].text, `streamed choice ${i}`);
  assert.equal(s.usage.completion_tokens, r.usage.completion_tokens);
  assert.equal(s.usage.prompt_tokens, r.usage.prompt_tokens);

  const chat = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Hello' }], n: 2, max_tokens: 8, temperature: 1.0, seed: 5 });
  assert.deepEqual(chat.choices.map((c) => c.index), [0, 1]);
});

test('seed reproducibility at temperature > 0, and a different seed changes the text', async () => {
  const params = { model, prompt: PROMPTS[3], max_tokens: 24, temperature: 0.9, top_p: 0.95, seed: 7 };
  const a = await client.completions.create(params);
  const b = await client.completions.create(params);
  assert.equal(a.choices[0].text, b.choices[0].text);
  const others = await Promise.all([8, 9, 10].map((seed) => client.completions.create({ ...params, seed })));
  assert.ok(others.some((o) => o.choices[0].text !== a.choices[0].text), 'other seeds give other text');
  const chatParams = { model, messages: [{ role: 'user', content: 'Describe Pemberley.' }], max_tokens: 16, temperature: 1.0, seed: 99 };
  const c1 = await client.chat.completions.create(chatParams);
  const c2 = await client.chat.completions.create(chatParams);
  assert.equal(c1.choices[0].message.content, c2.choices[0].message.content);
});

// A stop string taken from the middle of a greedy text, whose first occurrence is after position 0.
function pickStop(full, len) {
  for (let k = Math.floor(full.length / 2); k + len <= full.length; k += 1) {
    const cand = full.slice(k, k + len);
    if (cand.trim().length === len && full.indexOf(cand) > 0) return cand;
  }
  assert.fail(`no usable stop string in ${JSON.stringify(full)}`);
}

test('stop strings: the text before the first stop string, not the string; finish_reason stop', async () => {
  const full = (await greedy(PROMPTS[0], { max_tokens: 40, ignore_eos: true })).choices[0].text;
  const stop = pickStop(full, 3);
  const expected = full.slice(0, full.indexOf(stop));
  const r = await greedy(PROMPTS[0], { max_tokens: 40, ignore_eos: true, stop });
  assert.equal(r.choices[0].text, expected);
  assert.equal(r.choices[0].finish_reason, 'stop');
  const listed = await greedy(PROMPTS[0], { max_tokens: 40, ignore_eos: true, stop: ['no such text here', stop] });
  assert.equal(listed.choices[0].text, expected);
  const s = await collectStream(await greedy(PROMPTS[0], { max_tokens: 40, ignore_eos: true, stop: [stop], stream: true }));
  assert.equal(s.byIndex.get(0).text, expected, 'streamed');
  assert.equal(s.byIndex.get(0).finish_reason, 'stop');

  const chat = { model, messages: [{ role: 'user', content: 'Speak of Bath.' }], max_tokens: 40, temperature: 0, ignore_eos: true };
  const chatFull = (await client.chat.completions.create(chat)).choices[0].message.content;
  const chatStop = pickStop(chatFull, 2);
  const c = await client.chat.completions.create({ ...chat, stop: chatStop });
  assert.equal(c.choices[0].message.content, chatFull.slice(0, chatFull.indexOf(chatStop)));
  assert.equal(c.choices[0].finish_reason, 'stop');
  const cs = await collectStream(await client.chat.completions.create({ ...chat, stop: [chatStop], stream: true }));
  assert.equal(cs.byIndex.get(0).text, c.choices[0].message.content, 'streamed chat');
});

test('completion logprobs: tokens join to the text, greedy picks the top alternative', async () => {
  const r = await greedy(PROMPTS[4], { max_tokens: 12, logprobs: 3, ignore_eos: true });
  const lp = r.choices[0].logprobs;
  assert.ok(lp, 'logprobs present');
  assert.equal(lp.tokens.length, 12);
  assert.equal(lp.token_logprobs.length, 12);
  assert.equal(lp.top_logprobs.length, 12);
  assert.equal(lp.text_offset.length, 12);
  assert.equal(lp.tokens.join(''), r.choices[0].text);
  for (let i = 0; i < 12; i += 1) {
    assert.ok(lp.token_logprobs[i] <= 0, `logprob ${lp.token_logprobs[i]}`);
    const alts = Object.values(lp.top_logprobs[i]);
    assert.ok(alts.length >= 1 && alts.length <= 3, `${alts.length} alternatives`);
    assert.ok(Math.abs(Math.max(...alts) - lp.token_logprobs[i]) < 1e-4, 'greedy token is the most likely');
  }
  for (let i = 1; i < 12; i += 1) assert.equal(lp.text_offset[i], lp.text_offset[i - 1] + lp.tokens[i - 1].length);
  const s = await collectStream(await greedy(PROMPTS[4], { max_tokens: 12, logprobs: 3, ignore_eos: true, stream: true }));
  assert.deepEqual(s.byIndex.get(0).tokens, lp.tokens, 'streamed tokens');
});

test('chat logprobs: content entries with token, logprob, bytes and top_logprobs', async () => {
  const params = { model, messages: [{ role: 'user', content: 'Who is Anne Elliot?' }], max_tokens: 10, temperature: 0, logprobs: true, top_logprobs: 2, ignore_eos: true };
  const r = await client.chat.completions.create(params);
  const content = r.choices[0].logprobs?.content;
  assert.ok(Array.isArray(content), 'logprobs.content is a list');
  assert.equal(content.length, 10);
  assert.equal(content.map((t) => t.token).join(''), r.choices[0].message.content);
  for (const t of content) {
    assert.ok(t.logprob <= 0);
    assert.ok(Array.isArray(t.bytes));
    assert.ok(t.top_logprobs.length >= 1 && t.top_logprobs.length <= 2);
    assert.ok(Math.abs(t.top_logprobs[0].logprob - t.logprob) < 1e-4, 'greedy token is the first alternative');
  }
  const s = await collectStream(await client.chat.completions.create({ ...params, stream: true }));
  assert.deepEqual(s.byIndex.get(0).tokens, content.map((t) => t.token));
  const none = await client.chat.completions.create({ ...params, logprobs: false, top_logprobs: undefined });
  assert.equal(none.choices[0].logprobs ?? null, null);
});

test('echo: the prompt comes back in front of the completion', async () => {
  const plain = await greedy(PROMPTS[5], { max_tokens: 10 });
  const echoed = await greedy(PROMPTS[5], { max_tokens: 10, echo: true });
  assert.equal(echoed.choices[0].text, PROMPTS[5] + plain.choices[0].text);
  assert.deepEqual(echoed.usage, plain.usage);
});

test('a list of prompts gives one choice per prompt, each as if sent alone', async () => {
  const prompts = [PROMPTS[1], PROMPTS[6], PROMPTS[7]];
  const r = await greedy(prompts, { max_tokens: 10 });
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
  let prompt = 0;
  let completion = 0;
  for (let i = 0; i < prompts.length; i += 1) {
    const alone = await greedy(prompts[i], { max_tokens: 10 });
    assert.equal(r.choices[i].text, alone.choices[0].text, `prompt ${i}`);
    prompt += alone.usage.prompt_tokens;
    completion += alone.usage.completion_tokens;
  }
  assert.equal(r.usage.prompt_tokens, prompt);
  assert.equal(r.usage.completion_tokens, completion);
  const twice = await greedy(prompts.slice(0, 2), { max_tokens: 4, n: 2, temperature: 0.8, seed: 3 });
  assert.deepEqual(twice.choices.map((c) => c.index).sort(), [0, 1, 2, 3]);
});

test('token-id prompts (one list, and a list of lists) equal the text prompts', async () => {
  const tok = await (await fetch(`${server.url}/tokenize`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ model, prompt: PROMPTS[6] }),
  })).json();
  assert.ok(Array.isArray(tok.tokens) && tok.tokens.length > 1, JSON.stringify(tok));
  const detok = await (await fetch(`${server.url}/detokenize`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ model, tokens: tok.tokens }),
  })).json();
  assert.equal(detok.prompt.trim(), PROMPTS[6]);
  const byText = await greedy(PROMPTS[6], { max_tokens: 12 });
  const byIds = await greedy(tok.tokens, { max_tokens: 12 });
  assert.equal(byIds.choices[0].text, byText.choices[0].text);
  assert.equal(byIds.usage.prompt_tokens, tok.tokens.length);
  const tok2 = await (await fetch(`${server.url}/tokenize`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ model, prompt: PROMPTS[2] }),
  })).json();
  const lists = await greedy([tok.tokens, tok2.tokens], { max_tokens: 12 });
  assert.equal(lists.choices[0].text, byText.choices[0].text);
  assert.equal(lists.choices[1].text, (await greedy(PROMPTS[2], { max_tokens: 12 })).choices[0].text);
});

test('max_completion_tokens limits chat like max_tokens', async () => {
  const r = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Hi' }], max_completion_tokens: 5, temperature: 0, ignore_eos: true });
  assert.equal(r.usage.completion_tokens, 5);
  assert.equal(r.choices[0].finish_reason, 'length');
});

test('errors come back as OpenAI error objects through the client', async () => {
  const e = await client.completions.create({ model: 'no-such-model', prompt: 'x', max_tokens: 2 }).catch((x) => x);
  assert.ok(e instanceof Error, 'unknown model is an error');
  assert.equal(e.status, 404);
  assert.ok(e.error?.message, 'error.message present');
  const bad = await client.completions.create({ model, prompt: 'x', max_tokens: -3 }).catch((x) => x);
  assert.equal(bad.status, 400);
  assert.ok(bad.error?.message);
});

test('--api-key and --served-model-name through the client: right key works, wrong key is 401', async () => {
  const guarded = await startServer(['--api-key', 'sesame', '--served-model-name', 'austen']);
  try {
    assert.equal(guarded.model, 'austen');
    const good = guarded.client({ apiKey: 'sesame' });
    assert.deepEqual((await good.models.list()).data.map((m) => m.id), ['austen']);
    const r = await good.completions.create({ model: 'austen', prompt: PROMPTS[0], max_tokens: 4 });
    assert.equal(r.model, 'austen');
    const bad = await guarded.client({ apiKey: 'open-sesame' }).completions.create({ model: 'austen', prompt: 'x', max_tokens: 2 }).catch((e) => e);
    assert.equal(bad.status, 401);
    assert.ok(bad.error?.message, 'error object on 401');
  } finally {
    await guarded.stop();
  }
});
