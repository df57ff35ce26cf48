// The lab (docs/api.md, "The lab"): one panel per figure of the fast-inference chapter, each run on
// demand against POST /v1/lab/<experiment> (and, for the matrix multiply, in this browser too).
// What each panel showed is kept in window.peregrineLab.shown for the browser test.
'use strict';

(() => {  // the page's scripts share one global scope: the lab keeps its names to itself
const lab = { info: null, shown: {}, runs: 0 };
window.peregrineLab = lab;

const $ = (sel, root = document) => root.querySelector(sel);
const num = (id) => Number(document.getElementById(id).value);
const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' }[c]));

function f(v, digits = 3) {
  if (v === null || v === undefined || !Number.isFinite(v)) return '–';
  return Math.abs(v) >= 1000 ? v.toFixed(0) : v.toPrecision(digits);
}
function bytes(b) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (b >= 1024 && i < units.length - 1) { b /= 1024; i++; }
  return `${b.toFixed(b >= 100 ? 0 : b >= 10 ? 1 : 2)} ${units[i]}`;
}
const yes = (ok, text) => `<span class="${ok ? 'ok' : 'bad'}" data-ok="${ok}">${esc(text)}</span>`;
const loadNote = (r) => (r.under_load ? ' (measured under load: requests were being served)' : '') +
  (r.truncated ? ' (stopped at the time limit)' : '');

async function labPost(experiment, body) {
  const r = await apiFetch('/v1/lab/' + experiment, { method: 'POST', body: JSON.stringify(body) });
  if (!r.ok) throw new Error(`${r.status}: ${await errorText(r)}`);
  return r.json();
}

// Wires a panel's run control: status while it runs, errors shown in the panel.
function panel(id, run) {
  const el = document.getElementById(id);
  const out = $('.lab-out', el);
  const button = $('.lab-run', el);
  const go = async (ev) => {
    if (ev) ev.preventDefault();
    button.disabled = true;
    el.dataset.state = 'running';
    out.innerHTML = '<span class="lab-status">running…</span>';
    try {
      await run(el, out);
      el.dataset.state = 'done';
    } catch (e) {
      out.innerHTML = `<span class="bad">${esc(e.message)}</span>`;
      el.dataset.state = 'error';
    } finally {
      button.disabled = false;
      lab.runs += 1;
    }
  };
  (button.type === 'submit' ? button.form : button).addEventListener(button.type === 'submit' ? 'submit' : 'click', go);
}

// ---- 10.1: the same matrices in JavaScript, WebGPU and on the server ----

// The server's generator (kernels/matmul_timing.h): a 32-bit LCG, values ((s >> 8) - 2^23) / 2^23.
function lcg(n, seed) {
  const out = new Float32Array(n);
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    out[i] = ((s >>> 8) - 8388608) / 8388608;
  }
  return out;
}

function jsMatmul(a, b, m, k, n) {
  const c = new Float32Array(m * n);
  for (let i = 0; i < m; i++) {
    for (let j = 0; j < n; j++) {
      let sum = 0;
      for (let t = 0; t < k; t++) sum += a[i * k + t] * b[j * k + t];
      c[i * n + j] = sum;
    }
  }
  return c;
}

function timeIt(fn, minMs = 60) {
  let reps = 0, result;
  const t0 = performance.now();
  do { result = fn(); reps++; } while (performance.now() - t0 < minMs);
  return { ms: (performance.now() - t0) / reps, result };
}

const kShader = `
struct Dims { m: u32, k: u32, n: u32, pad: u32 }
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
@group(0) @binding(3) var<uniform> dims: Dims;
@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
  let i = id.y;
  let j = id.x;
  if (i >= dims.m || j >= dims.n) { return; }
  var sum = 0.0;
  for (var t = 0u; t < dims.k; t++) { sum += a[i * dims.k + t] * b[j * dims.k + t]; }
  c[i * dims.n + j] = sum;
}`;

// One thread per output cell; null with the reason when this browser has no WebGPU adapter.
async function gpuMatmul(a, b, m, k, n) {
  if (!navigator.gpu) return { unavailable: 'this browser has no WebGPU (navigator.gpu is missing)' };
  const adapter = await navigator.gpu.requestAdapter();
  if (!adapter) return { unavailable: 'this browser offers no WebGPU adapter' };
  const device = await adapter.requestDevice();
  const storage = (data) => {
    const buf = device.createBuffer({ size: data.byteLength, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST });
    device.queue.writeBuffer(buf, 0, data);
    return buf;
  };
  const ba = storage(a), bb = storage(b);
  const bc = device.createBuffer({ size: m * n * 4, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC });
  const dims = device.createBuffer({ size: 16, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
  device.queue.writeBuffer(dims, 0, new Uint32Array([m, k, n, 0]));
  const pipeline = device.createComputePipeline({
    layout: 'auto', compute: { module: device.createShaderModule({ code: kShader }), entryPoint: 'main' },
  });
  const group = device.createBindGroup({
    layout: pipeline.getBindGroupLayout(0),
    entries: [ba, bb, bc, dims].map((buffer, binding) => ({ binding, resource: { buffer } })),
  });
  const run = async () => {
    const enc = device.createCommandEncoder();
    const pass = enc.beginComputePass();
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, group);
    pass.dispatchWorkgroups(Math.ceil(n / 8), Math.ceil(m / 8));
    pass.end();
    device.queue.submit([enc.finish()]);
    await device.queue.onSubmittedWorkDone();
  };
  await run();  // compiles and warms up
  let reps = 0;
  const t0 = performance.now();
  do { await run(); reps++; } while (performance.now() - t0 < 60);
  const ms = (performance.now() - t0) / reps;
  const read = device.createBuffer({ size: m * n * 4, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const enc = device.createCommandEncoder();
  enc.copyBufferToBuffer(bc, 0, read, 0, m * n * 4);
  device.queue.submit([enc.finish()]);
  await read.mapAsync(GPUMapMode.READ);
  const c = new Float32Array(read.getMappedRange().slice(0));
  read.unmap();
  device.destroy();
  return { ms, c, adapter: adapter.info ? `${adapter.info.vendor} ${adapter.info.architecture}`.trim() : '' };
}

function maxDiff(x, y) {
  let d = 0;
  for (let i = 0; i < x.length; i++) d = Math.max(d, Math.abs(x[i] - y[i]));
  return d;
}

panel('lab-matmul', async (el, out) => {
  const m = num('mm-m'), k = num('mm-k'), n = num('mm-n'), seed = num('mm-seed');
  const server = await labPost('matmul', { m, k, n, seed });  // checks the sizes first
  const a = lcg(m * k, seed), b = lcg(n * k, seed + 1);
  const flops = 2 * m * k * n;
  jsMatmul(a, b, m, k, n);  // once untimed, so the timing is of compiled code
  const js = timeIt(() => jsMatmul(a, b, m, k, n));
  let absSum = 0, sum = 0;
  for (const v of js.result) { sum += v; absSum += Math.abs(v); }
  const tol = 1e-4 * (absSum + 1);
  const agree = Math.abs(sum - server.checksum) <= tol &&
    server.sample.every((v, i) => Math.abs(v - js.result[i]) <= 1e-4 * (1 + Math.abs(v)));
  let gpu;
  try { gpu = await gpuMatmul(a, b, m, k, n); } catch (e) { gpu = { unavailable: 'WebGPU failed: ' + e.message }; }
  const gpuDiff = gpu.c ? maxDiff(gpu.c, js.result) : null;
  const gpuAgree = gpu.c ? gpuDiff <= 1e-3 * Math.sqrt(k) : null;
  const items = [{ label: 'JavaScript loop', value: flops / js.ms / 1e6, colour: '#6b7a8f' }];
  items.push(gpu.c ? { label: 'WebGPU shader', value: flops / gpu.ms / 1e6, colour: '#b04ad8' }
    : { label: 'WebGPU shader', value: 0, note: 'unavailable' });
  for (const p of server.points) items.push({ label: 'server ' + p.kernel, value: p.gflops });
  labDraw.bars($('canvas', el), items, 'GFLOP/s');
  lab.shown.matmul = {
    jsChecksum: sum, serverChecksum: server.checksum, agree, gpuAvailable: !!gpu.c, gpuUnavailable: gpu.unavailable || null,
    gpuAgree, gpuDiff, jsGflops: flops / js.ms / 1e6, server,
  };
  out.innerHTML = `<div>${m}×${k} times ${k}×${n}: ${f(flops / 1e6)} MFLOP. Browser and server results ` +
    `${yes(agree, agree ? 'agree' : 'differ')} (sums ${f(sum, 7)} and ${f(server.checksum, 7)}).</div>` +
    `<div>WebGPU: ${gpu.c ? `${f(flops / gpu.ms / 1e6)} GFLOP/s${gpu.adapter ? ' on ' + esc(gpu.adapter) : ''}, ` +
      `max |difference| from JavaScript ${f(gpuDiff, 2)}: ${yes(gpuAgree, gpuAgree ? 'agrees' : 'differs')}`
      : `<span class="gpu-unavailable">unavailable: ${esc(gpu.unavailable)}</span>`}</div>` +
    `<table><tr><th>where</th><th>GFLOP/s</th><th>flop/byte</th><th>roof GFLOP/s</th></tr>` +
    `<tr><td>JavaScript loop</td><td>${f(flops / js.ms / 1e6)}</td><td></td><td></td></tr>` +
    server.points.map((p) => `<tr><td>server ${esc(p.kernel)} (${esc(server.isa)}, 1 thread)</td><td>${f(p.gflops)}</td>` +
      `<td>${f(p.intensity)}</td><td>${f(p.roof_gflops)}</td></tr>`).join('') + '</table>';
});

// ---- 10.2: with and without the KV cache ----

panel('lab-kv-cache', async (el, out) => {
  const r = await labPost('kv-cache', { tokens: num('kvc-tokens') });
  // CPU time of the engine thread per token: wall time on a busy machine is mostly other work.
  const pts = (side) => side.per_token.slice(1).map((p) => [p.position, p.cpu_ms]);  // the first includes the prompt
  labDraw.lines($('canvas', el), [
    { label: 'with the KV cache', colour: '#3a7be8', points: pts(r.with_cache) },
    { label: 'without (prefix recomputed)', colour: '#e8833a', points: pts(r.without_cache) },
  ], { xLabel: 'position', yLabel: 'CPU ms per token (engine thread)' });
  // Medians: a step the machine's other work interrupted shows as a spike, not as the trend.
  const median = (a) => { const s = [...a].sort((x, y) => x - y); return s.length ? s[Math.floor(s.length / 2)] : NaN; };
  const w = pts(r.without_cache).map((p) => p[1]), c = pts(r.with_cache).map((p) => p[1]);
  const q = Math.max(1, Math.floor(w.length / 4));
  lab.shown.kvCache = { identical: r.identical, firstQuarter: median(w.slice(0, q)), lastQuarter: median(w.slice(-q)), response: r };
  out.innerHTML = `<div>Tokens identical with and without the cache: ${yes(r.identical, r.identical ? 'yes' : 'no')}.</div>` +
    `<div>${r.tokens} tokens after a ${r.prompt_tokens}-token prompt: ${f(r.with_cache.total_ms)} ms with the cache, ` +
    `${f(r.without_cache.total_ms)} ms without (wall time; ${f(r.without_cache.total_cpu_ms / r.with_cache.total_cpu_ms)}× ` +
    `in CPU time). Median CPU ms per token, first and last quarter: without the cache ${f(median(w.slice(0, q)))} then ${f(median(w.slice(-q)))}; ` +
    `with it ${f(median(c.slice(0, q)))} then ${f(median(c.slice(-q)))}.${loadNote(r.with_cache) || loadNote(r.without_cache)}</div>` +
    `<div class="muted">“${esc(r.text)}”</div>`;
});

// ---- 10.3: MHA, GQA, MQA ----

function layoutTable(layouts, withLongest) {
  return '<table><tr><th>layout</th><th>KV heads</th><th>per token</th><th>context × batch</th>' +
    (withLongest ? '<th>longest context in the server\'s KV memory</th>' : '') + '</tr>' +
    layouts.map((l) => `<tr><td>${l.layout}</td><td>${l.kv_heads}</td><td>${bytes(l.bytes_per_token)}</td>` +
      `<td>${bytes(l.bytes)}</td>${withLongest ? `<td>${l.longest_context.toLocaleString('en')} tokens</td>` : ''}</tr>`).join('') +
    '</table>';
}

panel('lab-kv-sizes', async (el, out) => {
  const r = await labPost('kv-sizes', { context: num('kvs-context'), batch: num('kvs-batch') });
  lab.shown.kvSizes = r;
  out.innerHTML = `<div><b>${esc(r.model.name)}</b>: ${r.model.layers} layers, ${r.model.heads} query heads of ` +
    `${r.model.head_dim}, ${r.model.kv_heads} KV heads, ${r.kv_type}; the server's KV memory is ` +
    `${bytes(r.server_kv_bytes)} (${r.server_kv_tokens.toLocaleString('en')} positions).</div>` +
    layoutTable(r.model.layouts, true) +
    `<div class="lab-sub"><b>The chapter's example</b>: ${esc(r.example.name)}</div>` + layoutTable(r.example.layouts, false);
});

// ---- 10.4: a prefill chunk and a decode step on the roofline ----

function roofOf(info) {
  if (!info || !info.roof) return null;
  const peaks = [{ label: 'f32 peak', value: info.roof.peak_f32 }];
  if (info.roof.peak_int8 > 0) peaks.push({ label: 'int8 peak', value: info.roof.peak_int8 });
  return { bandwidth: info.roof.bandwidth, peaks };
}

panel('lab-steps', async (el, out) => {
  const r = await labPost('steps', { prompt_tokens: num('st-tokens') });
  const points = r.points.map((p) => ({
    label: `${p.phase} (${p.tokens} token${p.tokens === 1 ? '' : 's'}): ${f(p.intensity)} flop/B`,
    intensity: p.intensity, gflops: p.gflops, colour: p.phase === 'prefill' ? '#e8833a' : '#3a7be8',
  }));
  labDraw.roofline($('canvas', el), roofOf(lab.info), points);
  lab.shown.steps = r;
  out.innerHTML = '<table><tr><th>step</th><th>tokens</th><th>ms</th><th>flop/byte</th><th>GFLOP/s</th><th>roof</th><th>bound</th></tr>' +
    r.points.map((p) => `<tr><td>${p.phase}</td><td>${p.tokens}</td><td>${f(p.ms)}</td><td>${f(p.intensity)}</td>` +
      `<td>${f(p.gflops)}</td><td>${f(p.roof_gflops)}</td><td>${p.bound || '–'}</td></tr>`).join('') +
    `</table><div class="muted">Flops and bytes estimated from the model's shape, as the live view places its steps.${loadNote(r)}</div>`;
});

// ---- 10.5: static and continuous batching ----

panel('lab-batching', async (el, out) => {
  const outputs = document.getElementById('bt-outputs').value.split(/[ ,]+/).filter(Boolean).map(Number);
  const r = await labPost('batching', { outputs, slots: num('bt-slots') });
  labDraw.slotGrids($('canvas', el), [{ title: 'static', grid: r.static.grid }, { title: 'continuous', grid: r.continuous.grid }], r.slots);
  lab.shown.batching = r;
  const row = (i) => {
    const s = r.static.finish[i], c = r.continuous.finish[i];
    return `<tr><td><i class="swatch" data-req="${i}"></i>request ${i}</td><td>${r.outputs[i]}</td><td>${s ? s.step : '–'}</td>` +
      `<td>${s ? f(s.ms) : '–'}</td><td>${c ? c.step : '–'}</td><td>${c ? f(c.ms) : '–'}</td></tr>`;
  };
  out.innerHTML = `<div>${r.outputs.length} requests on ${r.slots} slots. Static: ${r.static.steps} steps, ` +
    `${f(r.static.total_ms)} ms, slots busy ${f(100 * r.static.slot_use, 2)}% of the time; continuous: ${r.continuous.steps} steps, ` +
    `${f(r.continuous.total_ms)} ms, ${f(100 * r.continuous.slot_use, 2)}%.${loadNote(r.static) || loadNote(r.continuous)}</div>` +
    '<table class="finish"><tr><th>request</th><th>output tokens</th><th>static: finished at step</th><th>ms</th>' +
    '<th>continuous: step</th><th>ms</th></tr>' + r.outputs.map((_, i) => row(i)).join('') + '</table>' +
    '<div class="muted">Colours are requests; the paler part of a bar is its prompt (prefill).</div>';
});

// ---- 10.6: speculative decoding ----

panel('lab-speculative', async (el, out) => {
  const r = await labPost('speculative', {
    proposer: document.getElementById('sp-proposer').value, k: num('sp-k'), tokens: num('sp-tokens'),
  });
  const tok = (t, cls) => `<span class="${cls}">${esc(JSON.stringify(t).slice(1, -1)) || '·'}</span>`;
  $('.spec-passes', el).innerHTML = r.passes.map((p, i) => {
    let html = '';
    p.proposed_text.forEach((t, j) => {
      if (j < p.accepted) html += tok(t, 'acc');
      else if (j === p.accepted) html += tok(t, 'rej');
    });
    const last = p.emitted_text[p.emitted_text.length - 1];
    if (p.proposed.length === 0) html += tok(last, 'tgt');
    else html += tok(last, p.bonus ? 'bonus' : 'tgt');
    return `<div class="pass">${String(i + 1).padStart(3)} ${html}</div>`;
  }).join('');
  labDraw.bars($('canvas', el), r.acceptance.map((a) => ({ label: `draft position ${a.position}`, value: 100 * a.rate, colour: '#1a9b5a', note: a.proposed ? '0 % accepted' : 'never proposed' })), '% accepted');
  lab.shown.speculative = r;
  out.innerHTML = `<div>Same text as plain decoding: ${yes(r.identical, r.identical ? 'yes' : 'no')}. ` +
    `${r.passes.length} passes of the model for ${r.tokens} tokens (${f(r.tokens_per_pass)} tokens per pass) with ${esc(r.proposer)}, k = ${r.k}.</div>` +
    `<div>Plain ${f(r.plain.tokens_per_s)} tokens/s, speculative ${f(r.speculative.tokens_per_s)} tokens/s: ` +
    `${f(r.speedup)}× (same minute, lab steps only).${loadNote(r)}</div><div class="muted">“${esc(r.text)}”</div>`;
});

// ---- 10.7: attention in tiles ----

panel('lab-attention', async (el, out) => {
  const r = await labPost('attention', {
    layer: num('at-layer'), head: num('at-head'), position: num('at-position'), tile: num('at-tile'),
  });
  labDraw.attention($('canvas', el), r);
  lab.shown.attention = r;
  const ok = r.max_abs_diff_online <= r.tolerance && r.max_abs_diff_kernel <= r.tolerance;
  out.innerHTML = `<div>Layer ${r.layer}, head ${r.head} (KV head ${r.kv_head}), the query at position ${r.position} ` +
    `against ${r.position - r.first + 1} keys in ${r.tiles.length} tiles of ${r.tile}. Largest |difference| from the full ` +
    `softmax: online ${r.max_abs_diff_online.toExponential(2)}, the engine's kernel (tiles of ${r.kernel_tile}, f32) ` +
    `${r.max_abs_diff_kernel.toExponential(2)}: ${yes(ok, ok ? `within ${r.tolerance}` : `beyond ${r.tolerance}`)}.</div>` +
    '<table><tr><th>tile</th><th>keys</th><th>tile max</th><th>running max</th><th>rescale</th><th>running sum</th></tr>' +
    r.tiles.map((t, i) => `<tr><td>${i + 1}</td><td>${t.start}–${t.end - 1}</td><td>${f(t.tile_max)}</td>` +
      `<td>${f(t.running_max)}</td><td>${f(t.rescale)}</td><td>${f(t.running_sum)}</td></tr>`).join('') + '</table>';
});

// ---- 8: the plan form ----

panel('lab-plan', async (el, out) => {
  const body = {
    model: document.getElementById('pl-model').value, device: document.getElementById('pl-device').value,
    link: document.getElementById('pl-link').value, tp: num('pl-tp'), pp: num('pl-pp'), ep: num('pl-ep'),
  };
  const disagg = document.getElementById('pl-disagg').value.trim();
  if (disagg) body.disaggregate = disagg;
  const r = await apiFetch('/v1/lab/plan', { method: 'POST', body: JSON.stringify(body) });
  if (!r.ok) throw new Error(`${r.status}: ${await errorText(r)}`);
  const p = await r.json();
  lab.shown.plan = p;
  const fig = (title, x) => x.refusal ? `<div><b>${title}</b>: cannot be cut this way: ${esc(x.refusal)}</div>`
    : `<div><b>${title}</b> (${x.devices} device${x.devices > 1 ? 's' : ''}): weights ${bytes(x.weight_bytes_per_device)} of ` +
      `${bytes(x.usable_bytes_per_device)} usable per device${x.fits ? '' : ' <span class="bad">does not fit</span>'}, ` +
      `largest batch ${x.max_batch}, decode ${f(x.decode_tokens_per_s)} tokens/s (${f(x.decode_memory_ms)} ms memory + ` +
      `${f(x.decode_comm_ms)} ms communication), prefill ${f(x.prefill_tokens_per_s)} tokens/s</div>`;
  out.innerHTML = `<div>${esc(p.model.name)}: ${f(p.model.params / 1e9)} B parameters, ${bytes(p.model.weight_bytes)}, on ` +
    `${esc(p.device.name)} over ${esc(p.link.name)}.</div>` +
    (p.layout ? fig('this layout', p.layout) : fig('prefill pool', p.prefill_pool) + fig('decode pool', p.decode_pool)) +
    '<table><tr><th>TP × PP (EP)</th><th>weights/device</th><th>largest batch</th><th>decode tok/s</th><th>prefill tok/s</th></tr>' +
    p.layouts_that_fit.map((x) => `<tr><td>${x.tp} × ${x.pp}${x.ep > 1 ? ` (${x.ep})` : ''}</td><td>${bytes(x.weight_bytes_per_device)}</td>` +
      `<td>${x.max_batch}</td><td>${f(x.decode_tokens_per_s)}</td><td>${f(x.prefill_tokens_per_s)}</td></tr>`).join('') + '</table>';
});

function fillSelect(id, values, chosen) {
  const el = document.getElementById(id);
  el.innerHTML = values.map((v) => `<option${v === chosen ? ' selected' : ''}>${esc(v)}</option>`).join('');
}
const names = (text) => text.split(/,\s*|\s+or\s+/).map((s) => s.trim()).filter(Boolean);

// What the server offers: the model's shape, proposers, plan presets, limits.
async function loadLabInfo() {
  try {
    const r = await apiFetch('/v1/lab');
    if (!r.ok) throw new Error(await errorText(r));
    lab.info = await r.json();
  } catch (e) {
    document.getElementById('lab-intro').textContent = 'The lab is not available: ' + e.message;
    return;
  }
  const i = lab.info;
  fillSelect('sp-proposer', i.proposers, i.proposers.includes('draft') ? 'draft' : i.proposers[0]);
  fillSelect('pl-model', ['loaded'].concat(names(i.plan.presets)), 'loaded');
  fillSelect('pl-device', names(i.plan.devices), 'h100');
  fillSelect('pl-link', names(i.plan.links), 'nvlink');
  document.getElementById('at-layer').max = i.layers - 1;
  document.getElementById('at-head').max = i.heads - 1;
  document.getElementById('at-position').max = Math.min(511, i.context_length - 1);
  document.getElementById('kvs-context').value = i.context_length;
  lab.ready = true;
}
loadLabInfo();
})();
