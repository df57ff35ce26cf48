// Tool calls through `peregrine serve` and the official openai client: tool_choice "required" and
// a named function (the answer is held to the tools' schemas, every call's arguments validated by
// ajv), "auto" (the tiny demo model mostly writes text: the answer must be well-formed either way),
// "none", with 1 and 3 tools, streaming and not, parallel calls, a tool result sent back, and bad
// input answered with 400 in OpenAI's error shape. The demo model has no chat template, so these
// run the fallback format (ChatML with a tools system block, <tool_call> blocks); a second server
// with a Llama 3.1 style template (--chat-template) runs the Llama 3 JSON format. Tool definitions
// take hundreds of tokens and the demo model was trained on 256 positions: the test serves a copy
// of it whose context_length says 4096 (its text past 256 positions is poor, which a grammar-held
// answer does not mind, and "auto" answers are only checked for their form).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Ajv from 'ajv';
import { startServer } from './lib.mjs';

let server;
let client;
let model;
const ajv = new Ajv({ strict: true, allErrors: true });

const WEATHER = {
  type: 'function',
  function: {
    name: 'get_weather', description: 'The weather in a city now',
    parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 12 }, unit: { enum: ['celsius', 'fahrenheit'] } },
                  required: ['city', 'unit'], additionalProperties: false },
  },
};
const ADD = {
  type: 'function',
  function: {
    name: 'add', description: 'Adds two integers',
    parameters: { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'integer' } }, required: ['a', 'b'],
                  additionalProperties: false },
  },
};
const SEARCH = {
  type: 'function',
  function: {
    name: 'search_books', description: 'Finds novels',
    parameters: { type: 'object', properties: { author: { enum: ['Austen', 'Bronte'] }, year: { type: ['integer', 'null'] },
                                                tags: { type: 'array', items: { type: 'string', maxLength: 6 }, maxItems: 2 } },
                  required: ['author'], additionalProperties: false },
  },
};
const THREE = [WEATHER, ADD, SEARCH];
const USER = [{ role: 'user', content: 'What is the weather in Bath, and what is 2 + 3?' }];

let modelDir;
let modelFile;

// A copy of the demo model with llama.context_length (a GGUF uint32) set to `context`.
function demoWithContext(context) {
  const bytes = fs.readFileSync(path.join(process.env.PEREGRINE_MODELS, 'demo-target.gguf'));
  const key = Buffer.from('llama.context_length');
  const at = bytes.indexOf(key);
  assert.ok(at > 8 && bytes.readBigUInt64LE(at - 8) === BigInt(key.length), 'llama.context_length key in the demo GGUF');
  assert.equal(bytes.readUInt32LE(at + key.length), 4, 'llama.context_length is a uint32');
  bytes.writeUInt32LE(context, at + key.length + 4);
  modelDir = fs.mkdtempSync(path.join(os.tmpdir(), 'peregrine-tools-'));
  const file = path.join(modelDir, 'demo-4k.gguf');
  fs.writeFileSync(file, bytes);
  return file;
}

before(async () => {
  modelFile = demoWithContext(4096);
  server = await startServer([modelFile, '--max-seqs', '8']);
  client = server.client();
  model = server.model;
});
after(async () => {
  await server?.stop();
  if (modelDir) fs.rmSync(modelDir, { recursive: true, force: true });
});

// Every call is a function call of one of `tools` whose arguments (a JSON string) validate.
function checkCalls(calls, tools, { complete = calls.length } = {}) {
  assert.ok(Array.isArray(calls) && calls.length > 0, `tool_calls: ${JSON.stringify(calls)}`);
  calls.forEach((call, i) => {
    assert.match(call.id, /^call_[A-Za-z0-9]{24}$/);
    assert.equal(call.type, 'function');
    const tool = tools.find((t) => t.function.name === call.function.name);
    assert.ok(tool, `unknown function ${call.function.name}`);
    assert.equal(typeof call.function.arguments, 'string');
    if (i >= complete) return;
    const args = JSON.parse(call.function.arguments);
    const validate = ajv.compile(tool.function.parameters);
    assert.ok(validate(args), `${call.function.arguments}: ${JSON.stringify(validate.errors)}`);
  });
}

// A streamed chat answer put together as the openai docs describe: content, and tool calls by
// index (the first delta of each carries id, type and name with empty arguments).
async function collectToolStream(stream) {
  let content = '';
  let finish = null;
  const calls = [];
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      content += c.delta?.content ?? '';
      for (const d of c.delta?.tool_calls ?? []) {
        if (d.id !== undefined) {
          assert.equal(d.index, calls.length, 'a new call comes with the next index');
          assert.equal(d.type, 'function');
          assert.equal(d.function.arguments, '');
          calls.push({ id: d.id, type: d.type, function: { name: d.function.name, arguments: '' } });
        } else {
          assert.ok(calls[d.index], `arguments for an unannounced call ${d.index}`);
          assert.equal(d.function.name, undefined);
          calls[d.index].function.arguments += d.function.arguments;
        }
      }
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { content, calls, finish };
}

test('required, one tool: a valid call, finish_reason tool_calls, content null', async () => {
  const r = await client.chat.completions.create({ model, messages: USER, tools: [WEATHER], tool_choice: 'required',
                                                   parallel_tool_calls: false, temperature: 1, seed: 3, max_tokens: 200 });
  const c = r.choices[0];
  assert.equal(c.finish_reason, 'tool_calls');
  assert.equal(c.message.content, null);
  assert.equal(c.message.role, 'assistant');
  assert.equal(c.message.tool_calls.length, 1);
  checkCalls(c.message.tool_calls, [WEATHER]);
});

test('required, three tools, several seeds: every answer is calls of them with valid arguments', async () => {
  for (let seed = 0; seed < 6; ++seed) {
    const r = await client.chat.completions.create({ model, messages: USER, tools: THREE, tool_choice: 'required',
                                                     parallel_tool_calls: false, temperature: 1, seed, max_tokens: 200 });
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'tool_calls', JSON.stringify(c));
    assert.equal(c.message.tool_calls.length, 1, 'parallel_tool_calls false: one call');
    checkCalls(c.message.tool_calls, THREE);
  }
});

test('parallel calls: one or more, each valid (the last may be cut by max_tokens)', async () => {
  let sawSeveral = false;
  for (let seed = 0; seed < 8; ++seed) {
    const r = await client.chat.completions.create({ model, messages: USER, tools: THREE, tool_choice: 'required',
                                                     parallel_tool_calls: true, temperature: 1, seed, max_tokens: 160 });
    const c = r.choices[0];
    assert.ok(['tool_calls', 'length'].includes(c.finish_reason), c.finish_reason);
    checkCalls(c.message.tool_calls, THREE, { complete: c.message.tool_calls.length - (c.finish_reason === 'length' ? 1 : 0) });
    if (c.message.tool_calls.length > 1) sawSeveral = true;
  }
  assert.ok(sawSeveral, 'at temperature 1 some answer makes more than one call');
});

test('a named function: only that function is called', async () => {
  for (const tool of THREE) {
    const r = await client.chat.completions.create({ model, messages: USER, tools: THREE, temperature: 1, seed: 5,
                                                     tool_choice: { type: 'function', function: { name: tool.function.name } },
                                                     parallel_tool_calls: false, max_tokens: 200 });
    const calls = r.choices[0].message.tool_calls;
    assert.ok(calls.every((c) => c.function.name === tool.function.name), JSON.stringify(calls));
    checkCalls(calls, [tool]);
    assert.equal(r.choices[0].finish_reason, 'tool_calls');
  }
});

test('streaming: deltas as OpenAI sends them, the same calls as without streaming', async () => {
  for (const [tools, choice] of [[[WEATHER], 'required'], [THREE, 'required'], [THREE, { type: 'function', function: { name: 'add' } }]]) {
    const body = { model, messages: USER, tools, tool_choice: choice, temperature: 1, seed: 11, max_tokens: 200,
                   parallel_tool_calls: false };
    const streamed = await collectToolStream(await client.chat.completions.create({ ...body, stream: true }));
    const whole = (await client.chat.completions.create(body)).choices[0];
    assert.equal(streamed.finish, 'tool_calls');
    assert.equal(streamed.content, '');
    checkCalls(streamed.calls, tools);
    assert.deepEqual(streamed.calls.map((c) => [c.function.name, c.function.arguments]),
                     whole.message.tool_calls.map((c) => [c.function.name, c.function.arguments]));
    // The openai client's own accumulation helper agrees.
    const runner = client.beta.chat.completions.stream({ ...body, stream: true });
    const final = await runner.finalChatCompletion();
    assert.deepEqual(final.choices[0].message.tool_calls.map((c) => c.function.arguments),
                     whole.message.tool_calls.map((c) => c.function.arguments));
  }
});

test('streaming parallel calls: indexes in order, every complete call valid', async () => {
  const s = await collectToolStream(await client.chat.completions.create({
    model, messages: USER, tools: THREE, tool_choice: 'required', temperature: 1, seed: 2, max_tokens: 200, stream: true }));
  checkCalls(s.calls, THREE, { complete: s.calls.length - (s.finish === 'length' ? 1 : 0) });
});

// "auto": text or calls, each well-formed.
function checkAuto(message, finish, tools) {
  assert.equal(message.role, 'assistant');
  if (message.tool_calls) {
    assert.equal(finish === 'length' || finish === 'tool_calls', true, finish);
    checkCalls(message.tool_calls, tools, { complete: message.tool_calls.length - (finish === 'length' ? 1 : 0) });
  } else {
    assert.equal(typeof message.content, 'string');
    assert.ok(['stop', 'length'].includes(finish), finish);
  }
}

test('auto with 1 and 3 tools, streaming and not: a well-formed answer, text or calls', async () => {
  for (const tools of [[WEATHER], THREE]) {
    for (let seed = 0; seed < 3; ++seed) {
      const body = { model, messages: USER, tools, temperature: 1, seed, max_tokens: 48 };
      const r = await client.chat.completions.create(body);
      checkAuto(r.choices[0].message, r.choices[0].finish_reason, tools);
      const s = await collectToolStream(await client.chat.completions.create({ ...body, stream: true }));
      checkAuto({ role: 'assistant', content: s.content, tool_calls: s.calls.length ? s.calls : undefined }, s.finish, tools);
      // Same seed, same answer, streamed or not.
      if (!r.choices[0].message.tool_calls) assert.equal(s.content, r.choices[0].message.content);
    }
  }
});

test('auto renders the tools, none does not', async () => {
  const base = { model, messages: USER, max_tokens: 1, temperature: 0 };
  const plain = await client.chat.completions.create(base);
  const none = await client.chat.completions.create({ ...base, tools: THREE, tool_choice: 'none' });
  const auto = await client.chat.completions.create({ ...base, tools: THREE });
  assert.equal(none.usage.prompt_tokens, plain.usage.prompt_tokens);
  assert.ok(auto.usage.prompt_tokens > plain.usage.prompt_tokens + 50, `${auto.usage.prompt_tokens} vs ${plain.usage.prompt_tokens}`);
  assert.equal(none.choices[0].message.tool_calls, undefined);
});

test('a tool result sent back: the conversation continues', async () => {
  const first = await client.chat.completions.create({ model, messages: USER, tools: [WEATHER], tool_choice: 'required',
                                                       parallel_tool_calls: false, temperature: 1, seed: 4, max_tokens: 200 });
  const assistant = first.choices[0].message;
  const messages = [...USER, assistant,
                    { role: 'tool', tool_call_id: assistant.tool_calls[0].id, content: '{"temperature": 18, "sky": "clear"}' }];
  const before = await client.chat.completions.create({ model, messages: USER, tools: [WEATHER], max_tokens: 1, temperature: 0 });
  for (const stream of [false, true]) {
    const body = { model, messages, tools: [WEATHER], temperature: 1, seed: 4, max_tokens: 32 };
    if (stream) {
      const s = await collectToolStream(await client.chat.completions.create({ ...body, stream: true }));
      checkAuto({ role: 'assistant', content: s.content, tool_calls: s.calls.length ? s.calls : undefined }, s.finish, [WEATHER]);
    } else {
      const r = await client.chat.completions.create(body);
      checkAuto(r.choices[0].message, r.choices[0].finish_reason, [WEATHER]);
      // The call and the result are in the prompt.
      assert.ok(r.usage.prompt_tokens > before.usage.prompt_tokens + 20);
    }
  }
  // The same history with tool_choice none still renders (calls and results as text).
  const none = await client.chat.completions.create({ model, messages, tools: [WEATHER], tool_choice: 'none', max_tokens: 4 });
  assert.equal(typeof none.choices[0].message.content, 'string');
});

test('bad input: 400 in OpenAI error shape naming the field', async () => {
  const chat = (extra) => ({ model, messages: USER, max_tokens: 4, ...extra });
  const cases = [
    [chat({ tools: [WEATHER], tool_choice: { type: 'function', function: { name: 'nope' } } }), 'tool_choice', "'nope'"],
    [chat({ tools: [WEATHER], tool_choice: 'sometimes' }), 'tool_choice', "'tool_choice' must be"],
    [chat({ tool_choice: 'required' }), 'tool_choice', "only allowed when 'tools'"],
    [chat({ tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'integer', minimum: 3 } } }] }),
      'tools[0].function.parameters', "unsupported keyword 'minimum'"],
    [chat({ tools: [{ type: 'function', function: { name: 'f', parameters: 'object' } }] }), 'tools[0].function.parameters', 'JSON schema'],
    [chat({ tools: [{ type: 'retrieval' }] }), 'tools[0].type', "'function'"],
    [chat({ tools: [{ type: 'function', function: { name: 'bad name!' } }] }), 'tools[0].function.name', 'a-z'],
    [chat({ tools: [WEATHER, WEATHER] }), 'tools[1].function.name', 'two tools'],
    [chat({ tools: WEATHER }), 'tools', 'list'],
    [chat({ tools: [WEATHER], response_format: { type: 'json_object' } }), 'response_format', "cannot be combined with 'tools'"],
    [chat({ messages: [...USER, { role: 'tool', content: 'x' }] }), 'messages[1].tool_call_id', 'required'],
    [chat({ messages: [...USER, { role: 'assistant', tool_calls: [{ type: 'function', function: { name: 'f' } }] }] }),
      'messages[1].tool_calls[0].function', 'arguments'],
    [chat({ messages: [{ role: 'user', content: 'x', tool_calls: [] }] }), 'messages[0].tool_calls', 'assistant'],
    [chat({ functions: [{ name: 'f' }] }), 'functions', 'not supported'],
  ];
  for (const [body, param, message] of cases) {
    const err = await client.chat.completions.create(body).catch((e) => e);
    assert.equal(err.status, 400, `${JSON.stringify(body)}: ${err}`);
    assert.equal(err.error?.type ?? err.type, 'invalid_request_error');
    assert.equal(err.param ?? err.error?.param, param, JSON.stringify(body));
    assert.ok(String(err.message).includes(message), `${err.message} should mention ${message}`);
  }
  const err = await client.completions.create({ model, prompt: 'x', tools: [WEATHER] }).catch((e) => e);
  assert.equal(err.status, 400);
  assert.equal(err.param ?? err.error?.param, 'tools');
  // Raw, to see the exact shape; and the server keeps serving.
  const res = await fetch(`${server.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify(chat({ tools: [WEATHER], tool_choice: { type: 'function', function: { name: 'x' } } })) });
  assert.equal(res.status, 400);
  assert.deepEqual(Object.keys((await res.json()).error).sort(), ['code', 'message', 'param', 'type']);
  const ok = await client.chat.completions.create({ model, messages: USER, max_tokens: 2 });
  assert.equal(typeof ok.choices[0].message.content, 'string');
});

// A Llama 3.1 style template (its tools prompt and call format): the Llama 3 JSON format.
const LLAMA31_TOOLS = `{{- bos_token }}{%- if not tools is defined %}{%- set tools = none %}{%- endif %}
{%- if tools is not none %}{{- '<|start_header_id|>user<|end_header_id|>\\n\\nGiven the following functions, please respond with a JSON for a function call with its proper arguments that best answers the given prompt.\\n\\nRespond in the format {"name": function name, "parameters": dictionary of argument name and its value}.Do not use variables.\\n\\n' }}{%- for t in tools %}{{- t | tojson(indent=4) }}{{- "\\n\\n" }}{%- endfor %}{{- '<|eot_id|>' }}{%- endif %}
{%- for message in messages %}{%- if 'tool_calls' in message %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n{"name": "' + message.tool_calls[0].function.name + '", "parameters": ' + message.tool_calls[0].function.arguments | tojson + '}<|eot_id|>' }}{%- elif message.role == 'tool' %}{{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' + message.content + '<|eot_id|>' }}{%- else %}{{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + message.content | trim + '<|eot_id|>' }}{%- endif %}{%- endfor %}
{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}`;

test('Llama 3 JSON format (template-native tools): forced calls, streaming, a result sent back', async () => {
  const file = path.join(modelDir, 'llama31.jinja');
  fs.writeFileSync(file, LLAMA31_TOOLS);
  const llama = await startServer([modelFile, '--chat-template', file]);
  try {
    const c = llama.client();
    const body = { model: llama.model, messages: USER, tools: THREE, tool_choice: 'required', temperature: 1, seed: 7,
                   max_tokens: 200 };
    const r = await c.chat.completions.create(body);
    assert.equal(r.choices[0].finish_reason, 'tool_calls');
    assert.equal(r.choices[0].message.tool_calls.length, 1, 'Llama 3 format: one call');
    checkCalls(r.choices[0].message.tool_calls, THREE);
    const s = await collectToolStream(await c.chat.completions.create({ ...body, stream: true }));
    assert.equal(s.finish, 'tool_calls');
    assert.deepEqual(s.calls.map((x) => x.function.arguments), r.choices[0].message.tool_calls.map((x) => x.function.arguments));
    const back = await c.chat.completions.create({ model: llama.model, tools: THREE, max_tokens: 8, messages: [
      ...USER, r.choices[0].message, { role: 'tool', tool_call_id: r.choices[0].message.tool_calls[0].id, content: '5' }] });
    checkAuto(back.choices[0].message, back.choices[0].finish_reason, THREE);
  } finally {
    await llama.stop();
  }
});
