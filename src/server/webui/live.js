// The live view: reads GET /v1/engine/events (one JSON frame a few times a second, docs/api.md)
// and draws the counters, the step x slot grid (which request ran in each batch slot at each
// step, as a prefill chunk or a decode) and where the last steps sit on this machine's roofline.
'use strict';

const live = {
  frames: 0,
  steps: [],         // the last kColumns steps: {step, ms, decode_rows, prefill_tokens, intensity, gflops, slots}
  slots: 8,
  roof: null,
  busyCells: 0,      // non-idle cells in the grid now (the browser test reads it)
  peakTokensPerS: 0,
  last: null,        // the last frame
};
const kColumns = 160;
const kRooflinePoints = 64;

function fmt(v, digits = 1) {
  if (!Number.isFinite(v)) return '–';
  return v >= 100 ? v.toFixed(0) : v.toFixed(digits);
}

function onFrame(f) {
  live.frames += 1;
  live.last = f;
  if (f.roof !== undefined) live.roof = f.roof;
  live.slots = Math.max(1, f.slots);
  for (const s of f.steps) live.steps.push(s);
  if (live.steps.length > kColumns) live.steps.splice(0, live.steps.length - kColumns);
  live.peakTokensPerS = Math.max(live.peakTokensPerS, f.tokens_per_s);
  document.getElementById('model-name').textContent = f.model;
  document.getElementById('running').textContent = f.running;
  document.getElementById('waiting').textContent = f.waiting;
  document.getElementById('tokens-per-s').textContent = fmt(f.tokens_per_s);
  const lat = f.latency;
  document.getElementById('ttft').textContent = lat.ttft_samples ? fmt(lat.ttft_ms_p50) + ' ms' : '–';
  document.getElementById('itl').textContent = lat.itl_samples ? fmt(lat.itl_ms_p50) + ' ms' : '–';
  const p = f.prefix;
  document.getElementById('prefix').textContent = p.queried_tokens ? (100 * p.hit_rate).toFixed(0) + '%' : '–';
  const kv = f.kv;
  document.getElementById('kv-text').textContent = `${kv.used} used · ${kv.cached} cached · ${kv.free} free of ${kv.total}` +
    (kv.type ? ` · ${kv.type}, ${Math.round(kv.bytes_per_token)} B per token` : '');
  document.getElementById('kv-used').style.width = (100 * kv.used / kv.total) + '%';
  document.getElementById('kv-cached').style.width = (100 * kv.cached / kv.total) + '%';
  drawSlotGrid();
  drawRoofline();
  const last = live.steps[live.steps.length - 1];
  document.getElementById('step-text').textContent = last
    ? `step ${last.step}: ${last.decode_rows} decode rows, ${last.prefill_tokens} prefill tokens, ${fmt(last.ms, 2)} ms` +
      (last.unslotted ? ` (${last.unslotted} sequences beyond the drawn slots)` : '')
    : 'no steps yet';
}

// Requests get alternating shades so neighbours in a slot row can be told apart.
function cellColour(phase, request) {
  const light = request % 2 === 0 ? 0 : 12;
  return phase === 'p' ? `hsl(26, 78%, ${57 + light}%)` : `hsl(218, 78%, ${56 + light}%)`;
}

function drawSlotGrid() {
  const canvas = document.getElementById('slot-grid');
  const ctx = canvas.getContext('2d');
  let used = 0;
  for (const s of live.steps) for (const c of s.slots) used = Math.max(used, c[0] + 1);
  const rows = Math.min(live.slots, Math.max(4, used));
  const w = canvas.width, h = canvas.height, left = 28;
  const cw = (w - left) / kColumns, ch = h / rows;
  ctx.fillStyle = getComputedStyle(document.documentElement).getPropertyValue('--idle');
  ctx.fillRect(0, 0, w, h);
  ctx.fillStyle = '#777';
  ctx.font = '10px system-ui';
  for (let r = 0; r < rows; r++) if (ch >= 10) ctx.fillText(String(r), 4, r * ch + ch / 2 + 3);
  let busy = 0;
  const offset = kColumns - live.steps.length;  // newest step on the right
  live.steps.forEach((s, i) => {
    for (const [slot, request, phase] of s.slots) {
      if (slot >= rows) continue;
      ctx.fillStyle = cellColour(phase, request);
      ctx.fillRect(left + (offset + i) * cw, slot * ch + 1, Math.max(1, cw - 0.5), Math.max(1, ch - 2));
      busy += 1;
    }
  });
  live.busyCells = busy;
  canvas.dataset.busyCells = busy;
}

// Log-log axes for a roofline: intensity (flop/byte) from xs, GFLOP/s from ys, decade grid lines
// and labels in the context's current stroke style and font. Returns the two scales and the x
// range in decades (x0, x1). Shared by the live view and the lab (lab_draw.js).
function logLogAxes(ctx, canvas, m, xs, ys) {
  const w = canvas.width, h = canvas.height;
  const x0 = Math.log10(Math.min(0.1, ...xs) / 2), x1 = Math.log10(Math.max(100, ...xs) * 2);
  const y0 = Math.log10(Math.min(...ys) / 4), y1 = Math.log10(Math.max(...ys) * 2);
  const X = (v) => m.l + (Math.log10(v) - x0) / (x1 - x0) * (w - m.l - m.r);
  const Y = (v) => h - m.b - (Math.log10(v) - y0) / (y1 - y0) * (h - m.t - m.b);
  ctx.fillStyle = '#777';
  for (let e = Math.ceil(x0); e <= x1; e++) {
    ctx.beginPath(); ctx.moveTo(X(10 ** e), m.t); ctx.lineTo(X(10 ** e), h - m.b); ctx.stroke();
    ctx.fillText(String(10 ** e), X(10 ** e) - 6, h - m.b + 12);
  }
  for (let e = Math.ceil(y0); e <= y1; e++) {
    ctx.beginPath(); ctx.moveTo(m.l, Y(10 ** e)); ctx.lineTo(w - m.r, Y(10 ** e)); ctx.stroke();
    ctx.fillText(String(10 ** e), 4, Y(10 ** e) + 3);
  }
  ctx.fillText('flop/byte', w - m.r - 44, h - 4);
  ctx.fillText('GFLOP/s', m.l + 4, m.t + 10);
  return { X, Y, x0, x1 };
}

// Log-log: arithmetic intensity (flop/byte) against GFLOP/s, under the bandwidth slope and the
// compute ceilings measured when the server started.
function drawRoofline() {
  const canvas = document.getElementById('roofline');
  const ctx = canvas.getContext('2d');
  const w = canvas.width, h = canvas.height, m = { l: 48, r: 10, t: 10, b: 30 };
  ctx.clearRect(0, 0, w, h);
  const points = live.steps.slice(-kRooflinePoints).filter((s) => s.intensity > 0 && s.gflops > 0);
  const roof = live.roof;
  const peaks = roof ? [roof.peak_gflops_f32, roof.peak_gops_int8].filter((v) => v > 0) : [];
  const ys = points.map((p) => p.gflops).concat(peaks);
  const xs = points.map((p) => p.intensity);
  if (roof) xs.push(Math.max(...peaks) / roof.bandwidth_gbps);
  if (!ys.length) { document.getElementById('roof-text').textContent = 'no steps yet'; return; }
  ctx.strokeStyle = '#ccc';
  ctx.font = '10px system-ui';
  const { X, Y, x0, x1 } = logLogAxes(ctx, canvas, m, xs, ys);
  if (roof) {
    ctx.strokeStyle = '#222';
    ctx.lineWidth = 1.5;
    for (const peak of peaks) {
      const ridge = peak / roof.bandwidth_gbps;
      ctx.beginPath();
      ctx.moveTo(X(10 ** x0), Y(roof.bandwidth_gbps * 10 ** x0));
      ctx.lineTo(X(ridge), Y(peak));
      ctx.lineTo(X(10 ** x1), Y(peak));
      ctx.stroke();
    }
    ctx.lineWidth = 1;
  }
  for (const p of points) {
    ctx.fillStyle = p.prefill_tokens > 0 ? '#e8833a' : '#3a7be8';
    ctx.beginPath();
    ctx.arc(X(p.intensity), Y(p.gflops), 3, 0, 2 * Math.PI);
    ctx.fill();
  }
  const last = points[points.length - 1];
  const roofText = roof
    ? `roof: ${fmt(roof.bandwidth_gbps)} GB/s read, ${fmt(roof.peak_gflops_f32)} GFLOP/s f32` +
      (roof.peak_gops_int8 > 0 ? `, ${fmt(roof.peak_gops_int8)} GOP/s int8` : '')
    : 'roof not measured';
  document.getElementById('roof-text').textContent = roofText +
    (last ? ` · last step ${fmt(last.intensity, 2)} flop/byte, ${fmt(last.gflops, 2)} GFLOP/s` : '');
}

async function connect() {
  const status = document.getElementById('conn-status');
  for (;;) {
    try {
      const r = await apiFetch('/v1/engine/events', { headers: { Accept: 'text/event-stream' } });
      if (!r.ok) throw new Error(await errorText(r));
      status.textContent = 'live';
      await readEvents(r, (name, data) => { if (name === 'engine') onFrame(JSON.parse(data)); });
      status.textContent = 'live view ended; reconnecting';
    } catch (e) {
      status.textContent = 'live view: ' + e.message;
    }
    await new Promise((resolve) => setTimeout(resolve, 2000));
  }
}

window.peregrineLive = live;
connect();
