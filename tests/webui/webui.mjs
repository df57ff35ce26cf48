// The web page at / in headless chromium: it loads, a message streams back, the live view fills
// (slot grid cells, tokens/s above zero, steps on the roofline), the rendered prompt matches
// /tokenize; --no-webui gives 404; --api-key keeps the page, its files and the live view behind
// the key, and the page's login form exchanges the key for an HttpOnly session cookie. Screenshots go to WEBUI_OUT/webui.png (one
// request) and webui-busy.png (49 requests batched).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import path from 'node:path';
import puppeteer from 'puppeteer-core';

const peregrine = process.env.PEREGRINE_BIN;
const outDir = process.env.WEBUI_OUT;
if (!peregrine || !outDir) throw new Error('run through run_webui_test.sh');

const servers = [];
after(async () => { for (const s of servers) await s.stop(); });

// `peregrine serve --port 0` with the demo model; resolves with its URL once it says so.
async function startServer(extra = []) {
  const proc = spawn(peregrine, ['serve', '--port', '0', '-t', '1', ...extra], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '', stderr = '';
  proc.stderr.on('data', (d) => { stderr = (stderr + d).slice(-16384); });
  const exited = new Promise((resolve) => proc.on('exit', resolve));
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('server not ready; stderr:\n' + stderr)), 30000);
    proc.stdout.on('data', (d) => {
      stdout += d;
      const m = /serving \S+ on (http:\/\/\S+)/.exec(stdout);
      if (m) { clearTimeout(timer); resolve(m[1]); }
    });
    proc.on('exit', (code) => { clearTimeout(timer); reject(new Error(`server exited (${code}); stderr:\n${stderr}`)); });
  });
  const server = { url, stop: async () => { if (proc.exitCode === null) proc.kill('SIGKILL'); await exited; } };
  servers.push(server);
  return server;
}

async function launchBrowser() {
  const args = ['--headless=new', '--disable-gpu', '--disable-dev-shm-usage'];
  if (process.getuid && process.getuid() === 0) args.push('--no-sandbox');
  return puppeteer.launch({ executablePath: '/usr/bin/chromium', args, headless: true, timeout: 30000 });
}

// Types a message into the chat and waits until its reply is complete; returns what the page saw.
async function chatOnce(page, text) {
  await page.type('#input', text);
  await page.click('#send');
  await page.waitForFunction(() => document.querySelector('.msg.assistant .meta') !== null, { timeout: 20000 });
  return page.evaluate(() => ({
    reply: document.querySelector('.msg.assistant').firstChild.textContent,
    meta: document.querySelector('.msg.assistant .meta').textContent,
    deltas: window.peregrineChat.deltas,
    error: document.querySelector('.msg.error') !== null,
  }));
}

test('the page chats with the model and shows the engine at work', async () => {
  const server = await startServer();
  const browser = await launchBrowser();
  try {
    const page = await browser.newPage();
    await page.setViewport({ width: 1280, height: 860 });
    const failures = [];
    page.on('pageerror', (e) => failures.push(String(e)));
    // The page runs under a strict content security policy: nothing of it may be blocked.
    page.on('console', (m) => { if (/Content Security Policy/.test(m.text())) failures.push(m.text()); });
    const response = await page.goto(server.url + '/', { waitUntil: 'load' });
    assert.equal(response.status(), 200);
    assert.match(response.headers()['content-type'], /^text\/html/);
    assert.match(response.headers()['content-security-policy'], /frame-ancestors 'none'/);
    assert.equal(response.headers()['x-frame-options'], 'DENY');
    // The live view connects before any request: its grid is empty.
    await page.waitForFunction(() => window.peregrineLive && window.peregrineLive.frames > 0, { timeout: 10000 });
    assert.equal(await page.evaluate(() => window.peregrineLive.busyCells), 0);

    await page.click('#show-prompt');
    await page.$eval('#system', (el) => { el.value = 'You are Jane Austen.'; });
    await page.$eval('#max-tokens', (el) => { el.value = '120'; });
    const seen = await chatOnce(page, 'Tell me about Emma');
    assert.equal(seen.error, false, 'the reply is not an error');
    assert.ok(seen.reply.length > 20, `a reply arrived: ${JSON.stringify(seen.reply)}`);
    assert.ok(seen.deltas > 10, `the reply streamed in ${seen.deltas} deltas`);
    assert.match(seen.meta, /length|stop/);

    // The rendered prompt is what the chat template made of the conversation: /tokenize agrees.
    await page.waitForFunction(() => document.querySelector('#rendered-prompt').textContent.includes('Tell me about Emma'));
    const rendered = await page.$eval('#rendered-prompt', (el) => ({ text: el.textContent, tokens: Number(el.dataset.tokens) }));
    assert.ok(rendered.text.includes('You are Jane Austen.'));
    const tok = await (await fetch(server.url + '/tokenize', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({
        messages: [{ role: 'system', content: 'You are Jane Austen.' }, { role: 'user', content: 'Tell me about Emma' }],
        add_special_tokens: true,  // the BOS a generation's prompt starts with
      }),
    })).json();
    assert.equal(rendered.tokens, tok.count);

    // The live view saw the steps: slot cells, a token rate, steps placed under the roof.
    // Once a frame says the request finished, every step it ran has been drawn: one cell each.
    await page.waitForFunction(() => {
      const live = window.peregrineLive;
      return live.last.finished >= 1 && live.last.running === 0 && live.peakTokensPerS > 0;
    }, { timeout: 10000 });
    const live = await page.evaluate(() => ({
      cells: window.peregrineLive.busyCells,
      peak: window.peregrineLive.peakTokensPerS,
      roof: document.querySelector('#roof-text').textContent,
      steps: document.querySelector('#step-text').textContent,
      phases: [...new Set(window.peregrineLive.steps.flatMap((s) => s.slots.map((c) => c[2])))].sort(),
    }));
    const tokens = Number(/(\d+) tokens/.exec(seen.meta)[1]);
    assert.equal(live.cells, tokens, 'a prefill step and a decode step per further token, one slot each');
    assert.deepEqual(live.phases, ['d', 'p'], 'both a prefill chunk and decodes were drawn');
    assert.match(live.roof, /GB\/s read.*last step/);
    assert.match(live.steps, /^step \d+/);
    await page.screenshot({ path: path.join(outDir, 'webui.png') });

    // Stop: with the engine busy with other requests, the reply is cut as soon as it starts and
    // the server counts the request aborted (the stream's abort cancels it in the engine).
    const load = Array.from({ length: 48 }, () => fetch(server.url + '/v1/completions', {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ model: 'demo-target', prompt: 'It was', max_tokens: 240, ignore_eos: true }),
    }).then((r) => r.text()));
    const before = await page.evaluate(() => window.peregrineChat.deltas);
    await page.click('#clear');  // a new conversation, so 180 more tokens fit the context
    await page.$eval('#max-tokens', (el) => { el.value = '180'; });
    await page.type('#input', 'And then?');
    await page.click('#send');
    await page.waitForFunction((n) => window.peregrineChat.deltas > n, { timeout: 20000 }, before).catch(async (e) => {
      throw new Error(e.message + '; the page shows: ' + await page.$eval('#messages', (el) => el.innerText));  // a 400, say
    });
    await page.click('#stop');
    await page.waitForFunction(() => document.querySelector('.msg.assistant .meta') !== null, { timeout: 20000 });
    const stopped = await page.$eval('.msg.assistant .meta', (el) => el.textContent);
    assert.match(stopped, /^stopped/);
    assert.equal(await page.$eval('#stop', (el) => el.disabled), true);
    await Promise.all(load);
    await page.waitForFunction(() => window.peregrineLive.last.running === 0, { timeout: 10000 });
    await page.screenshot({ path: path.join(outDir, 'webui-busy.png') });  // 49 requests in the grid
    const metrics = await (await fetch(server.url + '/metrics')).text();
    assert.match(metrics, /finished_reason="abort"} 1\n/);
    assert.deepEqual(failures, []);
  } finally {
    await browser.close();
  }
});

test('the live view is bounded: the ninth viewer is refused', async () => {
  const server = await startServer();
  const head = await fetch(server.url + '/v1/engine/events', { method: 'HEAD' });  // the head alone
  assert.equal(head.status, 200);
  assert.match(head.headers.get('content-type'), /^text\/event-stream/);
  const controllers = [];
  try {
    for (let i = 0; i < 8; i++) {
      const c = new AbortController();
      controllers.push(c);
      const r = await fetch(server.url + '/v1/engine/events', { signal: c.signal });
      assert.equal(r.status, 200);
      assert.match(r.headers.get('content-type'), /^text\/event-stream/);
    }
    const r = await fetch(server.url + '/v1/engine/events');
    assert.equal(r.status, 429);
    assert.equal(r.headers.get('retry-after'), '1');
    assert.equal((await r.json()).error.code, 'too_many_viewers');
  } finally {
    for (const c of controllers) c.abort();
  }
});

test('--no-webui: no page, the API stays; /v1/chat/render renders tools as generation would', async () => {
  const server = await startServer(['--no-webui']);
  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
  // The tool definitions make the demo model's prompt longer than its 256-token context: render
  // refuses it exactly as generation does (the same prompt, counted the same).
  const chat = { model: 'demo-target', messages: [{ role: 'user', content: 'Rain in Bath?' }], tools };
  const post = (route, body) => fetch(server.url + route, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
  });
  const render = await post('/v1/chat/render', chat);
  const generate = await post('/v1/chat/completions', chat);
  assert.equal(render.status, 400);
  assert.deepEqual(await render.json(), await generate.json());
  const plain = await (await post('/v1/chat/render', { messages: chat.messages })).json();
  assert.ok(plain.prompt.includes('Rain in Bath?') && !plain.prompt.includes('get_weather'), plain.prompt);
  const bad = await post('/v1/chat/render', { messages: [] });
  assert.equal(bad.status, 400);
  // A JSON route refuses a body a cross-site form or simple request could send.
  const plainText = await fetch(server.url + '/v1/chat/render', { method: 'POST', body: JSON.stringify(chat) });
  assert.equal(plainText.status, 415);
  assert.equal((await fetch(server.url + '/')).status, 404);
  assert.equal((await fetch(server.url + '/webui/app.js')).status, 404);
  assert.equal((await fetch(server.url + '/v1/models')).status, 200);
});

test('--api-key: the page needs the key; its login form lets it in', async () => {
  const key = 'sk-test "key"; 1';
  const server = await startServer(['--api-key', key]);
  const bare = await fetch(server.url + '/');
  assert.equal(bare.status, 401);
  const loginHtml = await bare.text();
  assert.ok(loginHtml.includes('id="login"') && !loginHtml.includes('id="chat"'), 'the login form, not the page');
  assert.equal((await fetch(server.url + '/webui/chat.js')).status, 401);
  assert.equal((await fetch(server.url + '/v1/engine/events')).status, 401);
  // The raw key in a cookie opens nothing: the login exchanges the key for an HttpOnly session.
  const raw = 'peregrine_api_key=' + encodeURIComponent(key);
  assert.equal((await fetch(server.url + '/webui/chat.js', { headers: { Cookie: raw } })).status, 401);
  const wrong = await fetch(server.url + '/webui/login', { method: 'POST', headers: { Authorization: 'Bearer wrong' } });
  assert.equal(wrong.status, 401);
  const login = await fetch(server.url + '/webui/login', { method: 'POST', headers: { Authorization: 'Bearer ' + key } });
  assert.equal(login.status, 200);
  const setCookie = login.headers.get('set-cookie');
  assert.match(setCookie, /; HttpOnly/);
  assert.match(setCookie, /; SameSite=Strict/);
  assert.match(setCookie, /; Max-Age=\d+/);
  assert.ok(!setCookie.includes('sk-test'), 'the cookie holds a token, not the key');
  const session = setCookie.split(';')[0];
  assert.equal((await fetch(server.url + '/webui/chat.js', { headers: { Cookie: session } })).status, 200);
  // Without the page's own Origin the session does not open the API's POST routes.
  const post = await fetch(server.url + '/v1/chat/render', {
    method: 'POST', headers: { Cookie: session, 'Content-Type': 'application/json' },
    body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }] }),
  });
  assert.equal(post.status, 401);

  const browser = await launchBrowser();
  try {
    const page = await browser.newPage();
    const first = await page.goto(server.url + '/');
    assert.equal(first.status(), 401);
    assert.equal(await page.$('#chat'), null);
    await page.type('#key', key);
    await Promise.all([page.waitForNavigation(), page.click('button[type=submit]')]);
    await page.waitForSelector('#chat');
    assert.equal(await page.evaluate(() => document.cookie), '', 'no script can read the session');
    assert.equal(await page.evaluate(() => localStorage.length), 0, 'the page keeps no key');
    const seen = await chatOnce(page, 'Good morning');
    assert.equal(seen.error, false);
    assert.ok(seen.reply.length > 0);
    await page.waitForFunction(() => window.peregrineLive.frames > 0, { timeout: 10000 });
  } finally {
    await browser.close();
  }
});
