// Shared helpers for the end-to-end tests: start `peregrine serve --port 0` as a child process,
// wait for its one "serving ... on http://HOST:PORT" line, talk to it with the official openai
// client or plain fetch, read its /metrics, and stop it. Every test file starts its own server.
import { spawn } from 'node:child_process';
import OpenAI from 'openai';

export const peregrine = process.env.PEREGRINE_BIN;
if (!peregrine) throw new Error('PEREGRINE_BIN is not set (run through run_serve_e2e.sh)');

const READY = /^peregrine: serving (\S+) on (http:\/\/\S+)$/m;

// Starts the server and resolves once it printed its address. The child's stderr is kept (last
// 64 KiB) so a failing test can show the server's side.
export async function startServer(extraArgs = [], { readyTimeoutMs = 30000 } = {}) {
  const args = ['serve', '--port', '0', '-t', '1', ...extraArgs];
  const proc = spawn(peregrine, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  proc.stderr.on('data', (d) => { stderr = (stderr + d).slice(-65536); });
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  const ready = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server not ready after ${readyTimeoutMs} ms; stderr:\n${stderr}`)), readyTimeoutMs);
    proc.stdout.on('data', (d) => {
      stdout += d;
      const m = READY.exec(stdout);
      if (m) { clearTimeout(timer); resolve({ model: m[1], url: m[2] }); }
    });
    proc.on('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`server exited before it was ready (code ${code}, signal ${signal}); stdout:\n${stdout}\nstderr:\n${stderr}`));
    });
  });
  const server = {
    proc,
    exited,
    model: ready.model,
    url: ready.url,
    port: Number(new URL(ready.url).port),
    stdout: () => stdout,
    stderr: () => stderr,
    client: (opts = {}) => new OpenAI({ baseURL: `${ready.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000, ...opts }),
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
      await exited;
    },
  };
  return server;
}

// The value of one unlabelled Prometheus sample, or undefined when absent.
export async function metric(url, name) {
  const text = await (await fetch(`${url}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(name + ' ') || l.startsWith(name + '{'));
  return line === undefined ? undefined : Number(line.trim().split(/\s+/).pop());
}

// Polls until `pred()` holds or the time is up; returns the last value of `get()`.
export async function waitFor(get, pred, timeoutMs = 5000) {
  const end = Date.now() + timeoutMs;
  let v = await get();
  while (!pred(v) && Date.now() < end) {
    await new Promise((r) => setTimeout(r, 50));
    v = await get();
  }
  return v;
}

// Reads a raw SSE response body (fetch) into its data payloads, noting whether it ended cleanly:
// every event complete, every payload valid JSON or [DONE], and [DONE] last.
export async function readSse(response) {
  const decoder = new TextDecoder();
  let buffer = '';
  const events = [];
  for await (const chunk of response.body) {
    buffer += decoder.decode(chunk, { stream: true });
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = event.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trimStart()).join('\n');
      if (data !== '') events.push(data);
    }
  }
  const leftover = buffer.trim();
  const parsed = [];
  let malformed = 0;
  for (const e of events) {
    if (e === '[DONE]') continue;
    try { parsed.push(JSON.parse(e)); } catch { malformed += 1; }
  }
  return { events, parsed, leftover, malformed, endsWithDone: events.length > 0 && events[events.length - 1] === '[DONE]' };
}

// Joins a completions or chat stream (openai client iterator) per choice index.
export async function collectStream(stream) {
  const byIndex = new Map();
  let usage = null;
  let role = null;
  let chunks = 0;
  let usageChunks = 0;
  for await (const chunk of stream) {
    chunks += 1;
    if (chunk.usage) { usage = chunk.usage; usageChunks += 1; }
    for (const c of chunk.choices ?? []) {
      const e = byIndex.get(c.index) ?? { text: '', finish_reason: null, deltas: 0, tokens: [] };
      const piece = c.text ?? c.delta?.content ?? '';
      if (c.delta?.role) role = role ?? c.delta.role;
      e.text += piece;
      if (piece) e.deltas += 1;
      if (c.finish_reason) e.finish_reason = c.finish_reason;
      if (c.logprobs?.tokens) e.tokens.push(...c.logprobs.tokens);
      if (c.logprobs?.content) e.tokens.push(...c.logprobs.content.map((t) => t.token));
      byIndex.set(c.index, e);
    }
  }
  return { byIndex, usage, role, chunks, usageChunks };
}

export const PROMPTS = [
  'It is a truth universally acknowledged',
  'Elizabeth',
  'Mr. Darcy said',
  'The ball at Netherfield',
  'Her mother was',
  'Jane and Bingley',
  'Emma Woodhouse, handsome, clever, and rich,',
  'Colonel Brandon',
];
