// Graceful shutdown under load: 16 streams are running when the server gets SIGTERM. New
// connections must be refused at once while the process drains; every stream must either finish
// normally or end with a final event (a finish_reason, then data: [DONE]) - no hung connection, no
// half-written response - and the process exits 0. With a long grace period the streams run to
// their end; with a short one they are cut, still properly terminated.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { startServer, PROMPTS } from './lib.mjs';

const STREAMS = 16;

function tcpRefused(port) {
  return new Promise((resolve) => {
    const s = net.connect({ host: '127.0.0.1', port });
    s.once('connect', () => { s.destroy(); resolve(false); });
    s.once('error', (e) => resolve(e.code === 'ECONNREFUSED'));
  });
}

// Starts one raw SSE stream; `first` resolves at its first event, `done` with the whole of it.
function openStream(server, i, maxTokens) {
  const chat = i % 2 === 1;
  const body = {
    model: server.model, max_tokens: maxTokens, temperature: i % 4 < 2 ? 0 : 0.8, seed: i, ignore_eos: true,
    stream: true, stream_options: { include_usage: true },
    ...(chat ? { messages: [{ role: 'user', content: PROMPTS[i % PROMPTS.length] }] } : { prompt: PROMPTS[i % PROMPTS.length] }),
  };
  let markFirst;
  const first = new Promise((r) => { markFirst = r; });
  const hung = new AbortController();
  const timer = setTimeout(() => hung.abort(new Error('hung')), 30000);  // a hung connection fails the test
  const done = (async () => {
    const res = await fetch(`${server.url}/v1/${chat ? 'chat/completions' : 'completions'}`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
      signal: hung.signal,
    });
    assert.equal(res.status, 200, `stream ${i}: HTTP ${res.status}`);
    const decoder = new TextDecoder();
    let buffer = '';
    const events = [];
    let error = null;
    try {
      for await (const chunk of res.body) {
        buffer += decoder.decode(chunk, { stream: true });
        let end;
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          const data = buffer.slice(0, end).split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trimStart()).join('\n');
          buffer = buffer.slice(end + 2);
          if (data) { events.push(data); markFirst(); }
        }
      }
    } catch (e) {
      error = `${hung.signal.aborted ? 'hung (no end after 30 s)' : 'connection broken'}: ${e.cause?.message ?? e.message}`;
    }
    clearTimeout(timer);
    markFirst();
    return { i, chat, events, leftover: buffer, error };
  })();
  done.catch(() => { clearTimeout(timer); markFirst(); });
  return { first, done };
}

// Checks one stream's framing; returns its finish reason and generated-token count.
function checkTerminated(s) {
  const where = `stream ${s.i} (${s.chat ? 'chat' : 'completion'})`;
  assert.equal(s.error, null, `${where}: ${s.error} after ${s.events.length} events, the last: ${s.events.slice(-1)[0]?.slice(0, 160)}`);
  assert.equal(s.leftover.trim(), '', `${where}: half-written event at the end: ${JSON.stringify(s.leftover.slice(0, 200))}`);
  assert.ok(s.events.length >= 2, `${where}: only ${s.events.length} events`);
  assert.equal(s.events[s.events.length - 1], '[DONE]', `${where}: does not end with data: [DONE]`);
  assert.equal(s.events.filter((e) => e === '[DONE]').length, 1, `${where}: [DONE] more than once`);
  const chunks = s.events.slice(0, -1).map((e, k) => {
    try { return JSON.parse(e); } catch { assert.fail(`${where}: event ${k} is not JSON: ${e.slice(0, 200)}`); }
  });
  const finals = chunks.filter((c) => c.choices?.[0]?.finish_reason);
  assert.equal(finals.length, 1, `${where}: ${finals.length} chunks carry a finish_reason`);
  const usage = chunks.filter((c) => c.usage).pop()?.usage;
  return { finish: finals[0].choices[0].finish_reason, completion: usage?.completion_tokens };
}

async function loadThenTerm(grace, maxTokens) {
  const server = await startServer(['--shutdown-grace', String(grace), '--max-seqs', '16']);
  try {
    const streams = Array.from({ length: STREAMS }, (_, i) => openStream(server, i, maxTokens));
    await Promise.all(streams.map((s) => s.first));
    const signalled = Date.now();
    server.proc.kill('SIGTERM');
    // The listener must close at once, while the in-flight streams still run.
    let refusedWhileAlive = false;
    while (Date.now() - signalled < 3000 && server.proc.exitCode === null) {
      if (await tcpRefused(server.port)) { refusedWhileAlive = server.proc.exitCode === null; break; }
      await new Promise((r) => setTimeout(r, 25));
    }
    const results = await Promise.all(streams.map((s) => s.done));
    let exitTimer;
    const exit = await Promise.race([server.exited, new Promise((r) => { exitTimer = setTimeout(() => r('timeout'), grace * 1000 + 15000); })]);
    clearTimeout(exitTimer);
    assert.notEqual(exit, 'timeout', 'the server did not exit after its grace period');
    assert.deepEqual(exit, { code: 0, signal: null }, `exit status; stderr:\n${server.stderr().slice(-2000)}`);
    assert.ok(await tcpRefused(server.port), 'connections refused after exit');
    return { results: results.map(checkTerminated), refusedWhileAlive, drainMs: Date.now() - signalled };
  } finally {
    await server.stop();
  }
}

test('SIGTERM with a long grace period: new connections refused, all 16 streams finish normally, exit 0', async () => {
  const { results, refusedWhileAlive, drainMs } = await loadThenTerm(60, 150);
  assert.ok(refusedWhileAlive, 'a new connection was accepted after SIGTERM while requests were draining');
  for (const [i, r] of results.entries()) {
    assert.equal(r.finish, 'length', `stream ${i} finish_reason`);
    assert.equal(r.completion, 150, `stream ${i} completion_tokens`);
  }
  console.log(`# drained in ${drainMs} ms`);
});

test('SIGTERM with a short grace period: cut streams still end with a final event and [DONE], exit 0', async () => {
  const { results, drainMs } = await loadThenTerm(0.1, 200);
  const cut = results.filter((r) => r.finish !== 'length' || r.completion !== 200).length;
  assert.ok(cut >= 1, 'no stream was cut by the grace period: the test did not exercise cancellation');
  for (const [i, r] of results.entries()) assert.ok(typeof r.finish === 'string', `stream ${i} finish_reason`);
  console.log(`# ${cut} of ${STREAMS} streams cut after the grace period (finish reasons: ${[...new Set(results.map((r) => r.finish))].join(', ')}); exited ${drainMs} ms after SIGTERM`);
});
