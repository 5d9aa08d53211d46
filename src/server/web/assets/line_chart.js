// LineChart: a time-series line chart on a <canvas> for the dashboard (dashboard.js), drawn
// with the colours of dashboard.css. Each canvas carries data-updates (points drawn so far),
// which the browser test reads.

const WINDOW_MS = 120 * 1000;  // Charts show the last two minutes.

function cssVar(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

// Steps of 1, 2, 2.5 or 5 times a power of ten: grid values a reader can add up.
function niceStep(raw) {
  if (!(raw > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  const f = raw / p;
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10) * p;
}

// A time-series line chart on a <canvas>: one or more series sharing the y axis, the newest
// sample at the right edge, WINDOW_MS of history.
export class LineChart {
  // series: [{color: '--css-var', fill: bool}], format: value -> axis label.
  constructor(canvas, series, format) {
    this.canvas = canvas;
    this.series = series;
    this.format = format;
    this.points = [];  // {t: ms, v: [value per series]}
    this.updates = 0;
    canvas.dataset.updates = '0';
  }

  push(t, values) {
    const last = this.points[this.points.length - 1];
    if (last && t <= last.t) return;  // Same snapshot twice: nothing new to draw.
    this.points.push({ t: t, v: values });
    while (this.points.length > 2 && this.points[1].t < t - WINDOW_MS) this.points.shift();
    this.updates++;
    this.canvas.dataset.updates = String(this.updates);
    this.draw();
  }

  draw() {
    const c = this.canvas;
    const w = c.clientWidth, h = c.clientHeight;
    if (w === 0 || h === 0) return;  // Hidden (filtered out); drawn when shown again.
    const dpr = window.devicePixelRatio || 1;
    if (c.width !== Math.round(w * dpr) || c.height !== Math.round(h * dpr)) {
      c.width = Math.round(w * dpr);
      c.height = Math.round(h * dpr);
    }
    const g = c.getContext('2d');
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, h);

    const padL = 54, padR = 10, padT = 8, padB = 20;
    const pw = w - padL - padR, ph = h - padT - padB;
    const font = '11px system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif';
    g.font = font;
    const muted = cssVar('--faint') || '#98a2b3';
    const grid = cssVar('--grid') || '#eee';

    const tEnd = this.points.length ? this.points[this.points.length - 1].t : 0;
    const tStart = tEnd - WINDOW_MS;
    let max = 0;
    for (const p of this.points) {
      if (p.t < tStart) continue;
      for (const v of p.v) if (v !== null && isFinite(v) && v > max) max = v;
    }
    const step = niceStep(max / 4);
    const yMax = step * 4;
    const x = (t) => padL + ((t - tStart) / WINDOW_MS) * pw;
    const y = (v) => padT + ph - (v / yMax) * ph;

    // Grid and axis labels.
    g.lineWidth = 1;
    g.textBaseline = 'middle';
    g.textAlign = 'right';
    for (let i = 0; i <= 4; i++) {
      const yy = Math.round(y(step * i)) + 0.5;
      g.strokeStyle = grid;
      g.beginPath();
      g.moveTo(padL, yy);
      g.lineTo(w - padR, yy);
      g.stroke();
      g.fillStyle = muted;
      g.fillText(this.format(step * i), padL - 8, yy);
    }
    g.textBaseline = 'alphabetic';
    g.textAlign = 'center';
    for (let s = 0; s <= WINDOW_MS / 1000; s += 30) {
      const label = s === 0 ? 'now' : '−' + (s % 60 === 0 ? s / 60 + 'm' : s + 's');
      const xx = padL + pw - (s * 1000 / WINDOW_MS) * pw;
      g.textAlign = s === 0 ? 'right' : s === WINDOW_MS / 1000 ? 'left' : 'center';
      g.fillText(label, xx, h - 5);
    }

    if (this.points.length === 0) {
      g.textAlign = 'center';
      g.textBaseline = 'middle';
      g.fillStyle = muted;
      g.fillText('waiting for data…', padL + pw / 2, padT + ph / 2);
      return;
    }

    g.save();
    g.beginPath();
    g.rect(padL, padT - 2, pw, ph + 4);
    g.clip();
    this.series.forEach((s, i) => {
      const color = cssVar(s.color) || '#2563eb';
      const pts = this.points.filter((p) => p.v[i] !== null && isFinite(p.v[i]));
      if (pts.length === 0) return;
      if (s.fill && pts.length > 1) {
        const grad = g.createLinearGradient(0, padT, 0, padT + ph);
        grad.addColorStop(0, hexAlpha(color, 0.22));
        grad.addColorStop(1, hexAlpha(color, 0.02));
        g.beginPath();
        g.moveTo(x(pts[0].t), y(0));
        for (const p of pts) g.lineTo(x(p.t), y(p.v[i]));
        g.lineTo(x(pts[pts.length - 1].t), y(0));
        g.closePath();
        g.fillStyle = grad;
        g.fill();
      }
      g.beginPath();
      pts.forEach((p, j) => (j ? g.lineTo(x(p.t), y(p.v[i])) : g.moveTo(x(p.t), y(p.v[i]))));
      g.strokeStyle = color;
      g.lineWidth = 1.8;
      g.lineJoin = 'round';
      g.stroke();
      const last = pts[pts.length - 1];
      g.beginPath();
      g.arc(x(last.t), y(last.v[i]), 2.8, 0, 2 * Math.PI);
      g.fillStyle = color;
      g.fill();
    });
    g.restore();
  }
}

function hexAlpha(color, alpha) {
  const m = /^#([0-9a-f]{6})$/i.exec(color);
  if (!m) return color;
  const n = parseInt(m[1], 16);
  return 'rgba(' + (n >> 16) + ',' + ((n >> 8) & 255) + ',' + (n & 255) + ',' + alpha + ')';
}
