// The page's lab in headless chromium: every panel is opened and run, and what it shows is checked
// against the API's own numbers: 10.1 the browser's product agrees with the server's (and WebGPU's
// when the browser has an adapter; otherwise the panel says it is unavailable), 10.2 identical
// tokens and a no-cache curve that grows, 10.3 the chapter's 4 GiB / 1 GiB / 128 MiB, 10.4 decode
// left of prefill, 10.5 the finish order, 10.6 the text identical to plain decoding, 10.7 the
// tiled row within the stated tolerance of the full softmax, 8 the plan's layouts. One
// screenshot per panel goes to WEBUI_OUT/lab-<panel>.png, the whole lab to lab.png.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import path from 'node:path';
import puppeteer from 'puppeteer-core';

const peregrine = process.env.PEREGRINE_BIN;
const outDir = process.env.WEBUI_OUT;
if (!peregrine || !outDir) throw new Error('run through run_webui_test.sh');

let proc;
after(() => { if (proc && proc.exitCode === null) proc.kill('SIGKILL'); });

async function startServer() {
  proc = spawn(peregrine, ['serve', '--port', '0', '-t', '1'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '', stderr = '';
  proc.stderr.on('data', (d) => { stderr = (stderr + d).slice(-16384); });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('server not ready; stderr:\n' + stderr)), 30000);
    proc.stdout.on('data', (d) => {
      stdout += d;
      const m = /serving \S+ on (http:\/\/\S+)/.exec(stdout);
      if (m) { clearTimeout(timer); resolve(m[1]); }
    });
    proc.on('exit', (code) => { clearTimeout(timer); reject(new Error(`server exited (${code}); stderr:\n${stderr}`)); });
  });
}

async function api(url, experiment, body) {
  const r = await fetch(`${url}/v1/lab/${experiment}`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
  });
  assert.equal(r.status, 200, `${experiment}: ${await r.clone().text()}`);
  return r.json();
}

// Sets the panel's inputs, runs it, waits for it to finish; returns what the page says it showed.
async function runPanel(page, id, inputs = {}) {
  for (const [input, value] of Object.entries(inputs)) {
    await page.$eval('#' + input, (el, v) => { el.value = v; }, String(value));
  }
  const panel = await page.$('#' + id);
  await panel.scrollIntoView();
  await page.$eval(`#${id} .lab-run`, (b) => b.click());
  await page.waitForFunction((pid) => ['done', 'error'].includes(document.getElementById(pid).dataset.state),
    { timeout: 60000 }, id);
  const state = await page.$eval('#' + id, (el) => ({ state: el.dataset.state, text: el.querySelector('.lab-out').innerText }));
  assert.equal(state.state, 'done', `${id}: ${state.text}`);
  await panel.screenshot({ path: path.join(outDir, `${id}.png`) });
  return state.text;
}

test('every lab panel runs and shows what the API says', async () => {
  const url = await startServer();
  const args = ['--headless=new', '--enable-unsafe-webgpu', '--enable-features=Vulkan', '--use-angle=swiftshader',
    '--disable-dev-shm-usage'];
  if (process.getuid && process.getuid() === 0) args.push('--no-sandbox');
  const browser = await puppeteer.launch({ executablePath: '/usr/bin/chromium', args, headless: true, timeout: 30000 });
  try {
    const page = await browser.newPage();
    await page.setViewport({ width: 1280, height: 900 });
    const failures = [];
    page.on('pageerror', (e) => failures.push(String(e)));
    page.on('console', (m) => { if (/Content Security Policy|Error/.test(m.text())) failures.push(m.text()); });
    await page.goto(url + '/', { waitUntil: 'load' });
    await page.waitForFunction(() => window.peregrineLab && window.peregrineLab.ready, { timeout: 10000 }).catch(async (e) => {
      throw new Error(`${e.message}; page errors: ${failures.join(' | ')}; the lab says: ` +
        await page.$eval('#lab-intro', (el) => el.textContent));
    });
    const shown = () => page.evaluate(() => window.peregrineLab.shown);

    // 10.1: the browser multiplies the server's matrices (same generator, same seed).
    await runPanel(page, 'lab-matmul', { 'mm-m': 96, 'mm-k': 64, 'mm-n': 80, 'mm-seed': 5 });
    const mm = (await shown()).matmul;
    const ref = await api(url, 'matmul', { m: 96, k: 64, n: 80, seed: 5 });
    assert.equal(mm.serverChecksum, ref.checksum);
    assert.ok(mm.agree, `browser ${mm.jsChecksum} vs server ${ref.checksum}`);
    assert.ok(Math.abs(mm.jsChecksum - ref.checksum) < 1e-3 * (1 + Math.abs(ref.checksum)));
    if (mm.gpuAvailable) {
      assert.ok(mm.gpuAgree, `WebGPU differs from JavaScript by ${mm.gpuDiff}`);
      console.log('# WebGPU ran in headless chromium and agreed with JavaScript');
    } else {
      const note = await page.$eval('#lab-matmul .gpu-unavailable', (el) => el.textContent);
      assert.match(note, /unavailable/);
      console.log(`# WebGPU: headless chromium offered no adapter here; the panel says: ${note}`);
    }

    // 10.2: identical tokens; without the cache the time per token grows with the position.
    await runPanel(page, 'lab-kv-cache', { 'kvc-tokens': 96 });
    const kv = (await shown()).kvCache;
    assert.equal(kv.identical, true);
    assert.equal(await page.$eval('#lab-kv-cache .lab-out [data-ok]', (el) => el.dataset.ok), 'true');
    assert.ok(kv.lastQuarter > 1.3 * kv.firstQuarter, `no-cache ms per token: ${kv.firstQuarter} then ${kv.lastQuarter}`);

    // 10.3: the chapter's example, and the loaded model's three layouts.
    const sizes = await runPanel(page, 'lab-kv-sizes', { 'kvs-context': 256, 'kvs-batch': 1 });
    for (const figure of ['4.00 GiB', '1.00 GiB', '128 MiB']) assert.ok(sizes.includes(figure), `${figure} in ${sizes}`);
    const ks = (await shown()).kvSizes;
    const apiSizes = await api(url, 'kv-sizes', { context: 256, batch: 1 });
    assert.deepEqual(ks.model.layouts, apiSizes.model.layouts);
    assert.ok(sizes.includes(`${apiSizes.model.layouts[2].longest_context.toLocaleString('en')} tokens`));

    // 10.4: the decode step far left of the prefill chunk.
    await runPanel(page, 'lab-steps', { 'st-tokens': 48 });
    const st = (await shown()).steps;
    assert.deepEqual(st.points.map((p) => p.phase), ['prefill', 'decode']);
    assert.ok(st.points[0].intensity > 10 * st.points[1].intensity);

    // 10.5: the table's finish steps are the API's; continuous finishes the short requests first.
    await runPanel(page, 'lab-batching', { 'bt-outputs': '24,4,12,6,18,3', 'bt-slots': 3 });
    const bt = (await shown()).batching;
    const table = await page.$$eval('#lab-batching table.finish tr', (rows) => rows.slice(1).map((r) =>
      [...r.children].map((td) => td.textContent)));
    table.forEach((row, i) => {
      assert.equal(Number(row[2]), bt.static.finish[i].step);
      assert.equal(Number(row[4]), bt.continuous.finish[i].step);
    });
    // Step counts are deterministic: the API asked again finishes every request at the same step.
    const again = await api(url, 'batching', { outputs: bt.outputs, slots: bt.slots });
    const steps = (policy) => policy.finish.map((x) => x.step);
    assert.deepEqual(steps(bt.static), steps(again.static));
    assert.deepEqual(steps(bt.continuous), steps(again.continuous));
    const order = (policy) => bt.outputs.map((_, i) => i).sort((a, b) => policy.finish[a].step - policy.finish[b].step || a - b);
    const shownOrder = (col) => table.map((row, i) => [Number(row[col]), i]).sort((a, b) => a[0] - b[0] || a[1] - b[1]).map((x) => x[1]);
    assert.deepEqual(shownOrder(4), order(again.continuous), 'the finish order shown is the API\'s');
    assert.deepEqual(shownOrder(2), order(again.static));
    const mean = (a) => a.reduce((x, y) => x + y, 0) / a.length;
    assert.ok(mean(steps(bt.continuous)) < mean(steps(bt.static)), 'continuous finishes requests sooner on average');
    assert.ok(bt.continuous.steps < bt.static.steps);

    // 10.6: the text is plain decoding's, and each pass is drawn.
    await page.select('#sp-proposer', 'draft');
    await runPanel(page, 'lab-speculative', { 'sp-k': 4, 'sp-tokens': 40 });
    const sp = (await shown()).speculative;
    assert.equal(sp.identical, true);
    assert.equal(sp.text, sp.plain_text);
    assert.equal(await page.$$eval('#lab-speculative .pass', (p) => p.length), sp.passes.length);
    assert.equal(await page.$eval('#lab-speculative .lab-out [data-ok]', (el) => el.dataset.ok), 'true');

    // 10.7: the tiled row within the stated tolerance (1e-4) of the full softmax.
    await runPanel(page, 'lab-attention', { 'at-layer': 1, 'at-head': 2, 'at-position': 100, 'at-tile': 32 });
    const at = (await shown()).attention;
    assert.equal(at.tolerance, 1e-4);
    assert.ok(at.max_abs_diff_kernel < at.tolerance && at.max_abs_diff_online < at.tolerance);
    assert.equal(at.tiles.length, 4);
    assert.equal(await page.$$eval('#lab-attention table tr', (r) => r.length - 1), at.tiles.length);

    // 8: the plan form.
    await page.select('#pl-model', 'llama-3-70b');
    await page.select('#pl-device', 'h100');
    await runPanel(page, 'lab-plan', { 'pl-tp': 4, 'pl-pp': 2 });
    const pl = (await shown()).plan;
    assert.equal(pl.layout.devices, 8);
    assert.equal(await page.$$eval('#lab-plan table tr', (r) => r.length - 1), pl.layouts_that_fit.length);

    const labSection = await page.$('#lab');
    await labSection.screenshot({ path: path.join(outDir, 'lab.png') });
    // Half scale, for the README (docs/images/lab.png is a copy of one).
    await page.evaluate(() => window.scrollTo(0, 0));  // so the box's viewport coordinates are the page's
    const box = await labSection.boundingBox();
    await page.screenshot({ path: path.join(outDir, 'lab-small.png'), captureBeyondViewport: true,
      clip: { x: box.x, y: box.y, width: box.width, height: box.height, scale: 0.5 } });
    assert.deepEqual(failures, []);
  } finally {
    await browser.close();
  }
});
