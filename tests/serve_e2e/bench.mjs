// `peregrine bench-serve --url` against a live server: the JSON report has the offline shape plus
// goodput, its token counts add up (the same seeded workload offline generates exactly as many
// tokens; the server's own counter moved by as much), goodput follows the objectives, and a bad
// or unreachable URL is a clear error with exit status 1.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { startServer, metric, peregrine } from './lib.mjs';

let server;

before(async () => { server = await startServer(['--max-seqs', '8']); });
after(async () => { await server?.stop(); });

function bench(args) {
  return new Promise((resolve) => {
    execFile(peregrine, ['bench-serve', ...args], { timeout: 60000 }, (error, stdout, stderr) => {
      resolve({ code: error ? (error.code ?? -1) : 0, stdout, stderr });
    });
  });
}

const WORKLOAD = ['--requests', '16', '--input-len', '8:40', '--output-len', '4:24', '--seed', '5'];

function checkPercentiles(p, name) {
  for (const q of ['p50', 'p90', 'p99']) assert.ok(Number.isFinite(p?.[q]) && p[q] >= 0, `${name}.${q} = ${p?.[q]}`);
  assert.ok(p.p50 <= p.p90 && p.p90 <= p.p99, `${name} percentiles in order`);
}

test('bench-serve --url: offline JSON shape plus goodput, and the token counts add up', async () => {
  const before = await metric(server.url, 'peregrine_generation_tokens_total');
  const r = await bench(['--url', server.url, ...WORKLOAD, '--concurrency', '4', '--goodput', 'ttft_ms:60000,tpot_ms:60000', '--json']);
  assert.equal(r.code, 0, r.stderr);
  const j = JSON.parse(r.stdout);
  const c = j.continuous;
  assert.ok(c, 'continuous object');
  for (const key of ['output_tps', 'request_tps', 'duration_s']) assert.ok(c[key] > 0, `${key} = ${c[key]}`);
  for (const key of ['ttft_ms', 'tpot_ms', 'itl_ms']) checkPercentiles(c[key], key);
  assert.equal(c.errors, 0);
  assert.equal(c.completed, 16);
  assert.equal(j.requests, 16);
  assert.equal(j.concurrency, 4);
  assert.ok(Math.abs(c.output_tps - c.output_tokens / c.duration_s) < 1e-6 * c.output_tps);
  assert.equal(j.goodput.good_requests, 16);
  assert.equal(j.goodput.ttft_ms, 60000);
  assert.equal(j.goodput.tpot_ms, 60000);
  assert.ok(Math.abs(j.goodput.request_tps - c.request_tps) < 1e-9);

  // The same seeded workload offline (exact lengths: ignore_eos) generates the same token count.
  const offline = await bench([...WORKLOAD, '-t', '1', '--kv-cache-memory', '64MiB', '--json']);
  assert.equal(offline.code, 0, offline.stderr);
  const o = JSON.parse(offline.stdout);
  assert.equal(c.output_tokens, o.continuous.output_tokens, 'HTTP and offline output tokens');
  assert.ok(o.goodput, 'the offline report has goodput too');
  for (const key of ['output_tps', 'request_tps', 'ttft_ms', 'tpot_ms', 'itl_ms', 'output_tokens', 'errors']) {
    assert.ok(key in o.continuous, `offline continuous.${key}`);
  }
  const after = await metric(server.url, 'peregrine_generation_tokens_total');
  if (before !== undefined) assert.equal(after - before, c.output_tokens, 'server generation_tokens_total moved by output_tokens');
});

test('bench-serve --url: an impossible objective gives zero goodput; text prompts and Poisson arrivals work', async () => {
  const r = await bench(['--url', server.url, ...WORKLOAD, '--rate', '50', '--text-prompts', '--goodput', 'ttft_ms:0.001', '--json']);
  assert.equal(r.code, 0, r.stderr);
  const j = JSON.parse(r.stdout);
  assert.equal(j.continuous.completed, 16);
  assert.equal(j.goodput.good_requests, 0);
  assert.equal(j.goodput.request_tps, 0);
  assert.equal(j.goodput.tpot_ms, null);
  const table = await bench(['--url', server.url, '--requests', '4', '--input-len', '4:8', '--output-len', '2:4']);
  assert.equal(table.code, 0, table.stderr);
  assert.match(table.stdout, /output tokens\/s/);
});

test('bench-serve --url: unreachable server, bad URL, bad --goodput', async () => {
  const port = server.port;
  const down = await bench(['--url', 'http://127.0.0.1:1', '--requests', '2']);
  assert.equal(down.code, 1);
  assert.match(down.stderr, /cannot reach the server at http:\/\/127\.0\.0\.1:1/);
  for (const url of ['ftp://127.0.0.1:80', `127.0.0.1:${port}`, 'http://:80', 'http://127.0.0.1:99999', 'http://127.0.0.1:8a']) {
    const bad = await bench(['--url', url, '--requests', '2']);
    assert.equal(bad.code, 1, url);
    assert.match(bad.stderr, /--url/, url);
  }
  const slo = await bench(['--url', server.url, '--goodput', 'ttft:5']);
  assert.notEqual(slo.code, 0);
  assert.match(slo.stderr, /--goodput/);
  const wrongModel = await bench(['--url', server.url, '--requests', '2', '--input-len', '4:8', '--output-len', '2:4', '--model-name', 'nope']);
  assert.equal(wrongModel.code, 1);
  assert.match(wrongModel.stderr, /2 of 2 requests failed.*404/);
});

test('bench-serve --url --api-key: the key is sent; without it the 401 is reported', async () => {
  const guarded = await startServer(['--api-key', 'k3y']);
  try {
    const args = ['--url', guarded.url, '--requests', '3', '--input-len', '4:8', '--output-len', '2:4', '--json'];
    const ok = await bench([...args, '--api-key', 'k3y']);
    assert.equal(ok.code, 0, ok.stderr);
    assert.equal(JSON.parse(ok.stdout).continuous.completed, 3);
    const denied = await bench(args);
    assert.equal(denied.code, 1);
    assert.match(denied.stderr, /HTTP 401/);
  } finally {
    await guarded.stop();
  }
});
