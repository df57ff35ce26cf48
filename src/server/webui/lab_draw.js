// Drawing for the lab's panels (lab.js): line charts, bars, the roofline, the batching grids and
// the attention row, each on a canvas, with axes in the units the panel reports.
'use strict';

const labDraw = (() => {
  const colours = ['#3a7be8', '#e8833a', '#1a9b5a', '#b04ad8', '#d0454c', '#6b7a8f', '#c9a227', '#2aa3b5'];

  function clear(canvas) {
    const ctx = canvas.getContext('2d');
    ctx.clearRect(0, 0, canvas.width, canvas.height);
    ctx.font = '10px system-ui';
    return ctx;
  }

  function ticks(lo, hi, n = 5) {
    const span = hi - lo || 1;
    const step = 10 ** Math.floor(Math.log10(span / n));
    const nice = [1, 2, 5, 10].map((f) => f * step).find((s) => span / s <= n) || step * 10;
    const out = [];
    for (let v = Math.ceil(lo / nice) * nice; v <= hi + 1e-12; v += nice) out.push(+v.toPrecision(6));
    return out;
  }

  // series: [{label, colour, points: [[x, y], ...]}]; linear axes from 0.
  function lines(canvas, series, { xLabel = '', yLabel = '' } = {}) {
    const ctx = clear(canvas);
    const w = canvas.width, h = canvas.height, m = { l: 46, r: 10, t: 16, b: 26 };
    const xs = series.flatMap((s) => s.points.map((p) => p[0]));
    const ys = series.flatMap((s) => s.points.map((p) => p[1]));
    if (!xs.length) return;
    const x0 = Math.min(...xs), x1 = Math.max(...xs, x0 + 1), y1 = Math.max(...ys) * 1.1 || 1;
    const X = (v) => m.l + (v - x0) / (x1 - x0) * (w - m.l - m.r);
    const Y = (v) => h - m.b - v / y1 * (h - m.t - m.b);
    ctx.strokeStyle = '#ddd';
    ctx.fillStyle = '#777';
    for (const v of ticks(0, y1)) {
      ctx.beginPath(); ctx.moveTo(m.l, Y(v)); ctx.lineTo(w - m.r, Y(v)); ctx.stroke();
      ctx.fillText(String(v), 4, Y(v) + 3);
    }
    for (const v of ticks(x0, x1, 8)) ctx.fillText(String(v), X(v) - 6, h - m.b + 12);
    ctx.fillText(xLabel, w - m.r - ctx.measureText(xLabel).width, h - 3);
    ctx.fillText(yLabel, m.l + 4, m.t - 4);
    series.forEach((s, i) => {
      ctx.strokeStyle = ctx.fillStyle = s.colour || colours[i % colours.length];
      ctx.lineWidth = 1.5;
      ctx.beginPath();
      s.points.forEach(([x, y], j) => (j ? ctx.lineTo(X(x), Y(y)) : ctx.moveTo(X(x), Y(y))));
      ctx.stroke();
      for (const [x, y] of s.points) { ctx.beginPath(); ctx.arc(X(x), Y(y), 2, 0, 2 * Math.PI); ctx.fill(); }
      ctx.fillText(s.label, w - m.r - 170, m.t + 12 * i + 8);
    });
    ctx.lineWidth = 1;
  }

  // bars: [{label, value, colour}] drawn horizontally, value text at the end.
  function bars(canvas, items, unit) {
    const ctx = clear(canvas);
    const w = canvas.width, h = canvas.height, left = 150;
    const max = Math.max(...items.map((b) => b.value || 0), 1e-9);
    const bh = Math.min(26, (h - 8) / Math.max(1, items.length));
    items.forEach((b, i) => {
      const y = 4 + i * bh;
      ctx.fillStyle = '#444';
      ctx.fillText(b.label, 4, y + bh / 2 + 3);
      ctx.fillStyle = b.colour || colours[i % colours.length];
      const bw = b.value > 0 ? Math.max(1, (w - left - 90) * b.value / max) : 0;
      ctx.fillRect(left, y + 3, bw, bh - 6);
      ctx.fillStyle = '#222';
      ctx.fillText(b.value > 0 ? `${b.value.toPrecision(3)} ${unit}` : (b.note || 'n/a'), left + bw + 6, y + bh / 2 + 3);
    });
  }

  // Log-log roofline: roof {bandwidth (B/s), peaks: [{label, value (flop/s)}]}, points
  // [{label, intensity, gflops, colour}].
  function roofline(canvas, roof, points) {
    const ctx = clear(canvas);
    const w = canvas.width, h = canvas.height, m = { l: 48, r: 10, t: 12, b: 28 };
    const peaks = roof ? roof.peaks.map((p) => p.value / 1e9) : [];
    const bw = roof ? roof.bandwidth / 1e9 : 0;
    const xs = points.map((p) => p.intensity).concat(peaks.map((p) => p / bw).filter(Number.isFinite));
    const ys = points.map((p) => p.gflops).concat(peaks);
    if (!ys.length) return;
    ctx.strokeStyle = '#e2e2e2';
    const { X, Y, x0, x1 } = logLogAxes(ctx, canvas, m, xs, ys);  // live.js
    if (roof) {
      ctx.strokeStyle = '#222';
      ctx.lineWidth = 1.5;
      roof.peaks.forEach((p, i) => {
        const peak = p.value / 1e9, ridge = peak / bw;
        ctx.beginPath();
        ctx.moveTo(X(10 ** x0), Y(bw * 10 ** x0));
        ctx.lineTo(X(ridge), Y(peak));
        ctx.lineTo(X(10 ** x1), Y(peak));
        ctx.stroke();
        ctx.fillStyle = '#222';
        ctx.fillText(p.label, X(10 ** x1) - 70, Y(peak) - 3 - 10 * i);
      });
      ctx.lineWidth = 1;
    }
    points.forEach((p, i) => {
      ctx.fillStyle = p.colour || colours[i % colours.length];
      ctx.beginPath(); ctx.arc(X(p.intensity), Y(p.gflops), 4, 0, 2 * Math.PI); ctx.fill();
      ctx.fillText(p.label, X(p.intensity) + 6, Y(p.gflops) - 4);
    });
  }

  // Two step x slot grids side by side: grids [{title, grid: [step][slot] = [request, phase] | null}].
  function slotGrids(canvas, grids, slots) {
    const ctx = clear(canvas);
    const w = canvas.width, h = canvas.height, gap = 10, top = 14;
    const steps = Math.max(...grids.map((g) => g.grid.length), 1);
    const gw = (w - gap * (grids.length - 1)) / grids.length;
    const cw = gw / steps, ch = (h - top) / Math.max(slots, 1);
    grids.forEach((g, gi) => {
      const left = gi * (gw + gap);
      ctx.fillStyle = '#eef0f3';
      ctx.fillRect(left, top, gw, h - top);
      ctx.fillStyle = '#222';
      ctx.fillText(`${g.title}: ${g.grid.length} steps`, left + 2, 10);
      g.grid.forEach((row, s) => row.forEach((cell, slot) => {
        if (!cell) return;
        const [req, phase] = cell;
        ctx.fillStyle = colours[req % colours.length];
        ctx.globalAlpha = phase === 'p' ? 0.55 : 1;
        ctx.fillRect(left + s * cw, top + slot * ch + 1, Math.max(1, cw - 0.4), ch - 2);
        ctx.globalAlpha = 1;
      }));
    });
  }

  // The attention row: scores by position (dots), tile boundaries, the running maximum as steps.
  function attention(canvas, r) {
    const ctx = clear(canvas);
    const w = canvas.width, h = canvas.height, m = { l: 40, r: 8, t: 14, b: 22 };
    const scores = r.scores.map((s, p) => [p, s]).filter(([, s]) => s !== null);
    const ys = scores.map(([, s]) => s);
    const lo = Math.min(...ys), hi = Math.max(...ys);
    const n = r.scores.length;
    const X = (p) => m.l + p / Math.max(1, n - 1) * (w - m.l - m.r);
    const Y = (v) => h - m.b - (v - lo) / (hi - lo || 1) * (h - m.t - m.b);
    ctx.fillStyle = '#777';
    ctx.fillText('score', 4, m.t - 3);
    ctx.fillText('key position', w - m.r - 60, h - 3);
    r.tiles.forEach((t, i) => {
      ctx.fillStyle = i % 2 ? '#f4f6fa' : '#e9eef8';
      ctx.fillRect(X(t.start) - 1, m.t, X(Math.max(t.start, t.end - 1)) - X(t.start) + 2, h - m.t - m.b);
      ctx.strokeStyle = '#e8833a';
      ctx.lineWidth = 2;
      ctx.beginPath(); ctx.moveTo(X(t.start), Y(t.running_max)); ctx.lineTo(X(t.end - 1), Y(t.running_max)); ctx.stroke();
      ctx.lineWidth = 1;
    });
    for (const v of ticks(lo, hi, 4)) { ctx.fillStyle = '#777'; ctx.fillText(String(v), 2, Y(v) + 3); }
    ctx.fillStyle = '#3a7be8';
    for (const [p, s] of scores) { ctx.beginPath(); ctx.arc(X(p), Y(s), 1.8, 0, 2 * Math.PI); ctx.fill(); }
    ctx.fillStyle = '#e8833a';
    ctx.fillText('running maximum', m.l + 4, m.t + 8);
  }

  return { lines, bars, roofline, slotGrids, attention, colours };
})();
