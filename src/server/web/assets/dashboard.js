// rrpc dashboard: polls /metrics.json once a second and draws, per RPC method, the request rate
// (from successive calls_total values) and latency percentiles (from the total_time_us or
// handler_time_us histogram) on <canvas>, plus tables of every entity and metric.
//
// Schema: {"timestamp_ms":N,"entities":[{"type":"method","id":"svc.Method","attributes":{..},
//   "metrics":[{"name":..,"type":"counter"|"gauge"|"histogram","unit":..,"help":..,"value":N}
//   or histogram fields count,sum,min,max,mean,p50,p75,p95,p99,p999]}]}
//
// Everything from the server is inserted with textContent, never as markup. Each chart canvas
// carries data-updates (points drawn so far) and <body> data-updates (snapshots processed), which
// the browser test reads.
//
// Loaded as an ES module by index.html; format.js formats values, line_chart.js draws the charts.

import { LineChart } from './line_chart.js';
import { axisLabel, fmtByUnit, fmtLatency, fmtMicros, fmtNum, fmtRate, plural } from './format.js';

const POLL_MS = 1000;
const RETRY_MS = 2000;
const FETCH_TIMEOUT_MS = 5000;
const LATENCY_HISTOGRAMS = ['total_time_us', 'handler_time_us'];
const TYPE_ORDER = ['server', 'messenger', 'service', 'method', 'client'];

// ---------------------------------------------------------------- DOM helpers

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function setText(id, text) {
  const e = document.getElementById(id);
  if (e && e.textContent !== text) e.textContent = text;
}

// ---------------------------------------------------------------- snapshot access

function findMetric(entity, name) {
  const ms = Array.isArray(entity.metrics) ? entity.metrics : [];
  for (const m of ms) if (m && m.name === name) return m;
  return null;
}

function latencyHistogram(entity) {
  for (const name of LATENCY_HISTOGRAMS) {
    const m = findMetric(entity, name);
    if (m && m.type === 'histogram') return m;
  }
  return null;
}

// "rrpc.bench.BenchService.Echo" -> "BenchService.Echo".
function shortMethodName(id) {
  const parts = id.split('.');
  return parts.length > 2 ? parts.slice(-2).join('.') : id;
}

function splitMethodId(id) {
  const dot = id.lastIndexOf('.');
  return dot < 0 ? ['', id] : [id.slice(0, dot + 1), id.slice(dot + 1)];
}

// ---------------------------------------------------------------- method cards

const methodViews = new Map();  // method id -> view
let totalChart = null;
let prevTotal = null;  // {calls, t}
let updates = 0;

function methodView(id) {
  let v = methodViews.get(id);
  if (v) return v;
  const card = el('div', 'method');
  card.dataset.method = id;
  const head = el('div', 'method-head');
  const name = el('div', 'method-name');
  const [svc, fn] = splitMethodId(id);
  name.appendChild(el('span', 'svc', svc));
  name.appendChild(el('span', 'fn', fn));
  name.title = id;
  const stats = el('div', 'method-stats');
  // The number in <b> (which the browser tests read), then its label as a text node.
  const stat = (label) => {
    const s = el('span');
    const b = el('b', '', '–');
    s.appendChild(b);
    s.appendChild(document.createTextNode(' ' + label));
    stats.appendChild(s);
    return b;
  };
  const rateEl = stat('req/s'), p50El = stat('p50'), p99El = stat('p99'), callsEl = stat('calls');
  head.appendChild(name);
  head.appendChild(stats);
  const charts = el('div', 'method-charts');
  const rateBox = el('div');
  rateBox.appendChild(el('div', 'chart-title', 'Throughput (req/s)'));
  const rateCanvas = el('canvas', 'chart rate-chart');
  rateBox.appendChild(rateCanvas);
  const latBox = el('div');
  const latTitle = el('div', 'chart-title', 'Latency');
  latBox.appendChild(latTitle);
  const latCanvas = el('canvas', 'chart latency-chart');
  latBox.appendChild(latCanvas);
  charts.appendChild(rateBox);
  charts.appendChild(latBox);
  card.appendChild(head);
  card.appendChild(charts);

  // Keep cards sorted by id.
  const grid = document.getElementById('methods');
  let before = null;
  for (const child of grid.children) {
    if (child.dataset.method > id) { before = child; break; }
  }
  grid.insertBefore(card, before);

  v = {
    card: card,
    rateChart: new LineChart(rateCanvas, [{ color: '--rate', fill: true }], axisLabel(fmtRate)),
    latChart: new LineChart(latCanvas, [{ color: '--p50' }, { color: '--p99' }], axisLabel(fmtMicros)),
    latTitle: latTitle,
    rateEl: rateEl, p50El: p50El, p99El: p99El, callsEl: callsEl,
    prevCalls: null, prevT: null, rate: null,
  };
  methodViews.set(id, v);
  applyFilter();
  v.rateChart.draw();
  v.latChart.draw();
  return v;
}

function applyFilter() {
  const q = document.getElementById('filter').value.trim().toLowerCase();
  for (const [id, v] of methodViews) {
    const show = !q || id.toLowerCase().includes(q);
    if (v.card.hidden === show) {
      v.card.hidden = !show;
      if (show) { v.rateChart.draw(); v.latChart.draw(); }
    }
  }
}

function updateMethods(methods, t) {
  let totalRate = null, totalCalls = 0, active = 0, totalErrors = null;
  let slowest = null;
  const seen = new Set();
  for (const e of methods) {
    seen.add(e.id);
    const v = methodView(e.id);
    const callsMetric = findMetric(e, 'calls_total');
    const calls = callsMetric && isFinite(callsMetric.value) ? callsMetric.value : null;
    let rate = null;
    if (calls !== null && v.prevCalls !== null && t > v.prevT) {
      // A counter that went down was reset (server restart): no rate for this interval.
      if (calls >= v.prevCalls) rate = ((calls - v.prevCalls) * 1000) / (t - v.prevT);
    }
    if (calls !== null) { v.prevCalls = calls; v.prevT = t; totalCalls += calls; }
    const errors = findMetric(e, 'errors_total');
    if (errors && isFinite(errors.value)) totalErrors = (totalErrors || 0) + errors.value;
    if (rate !== null) {
      v.rateChart.push(t, [rate]);
      totalRate = (totalRate || 0) + rate;
      if (rate > 0) active++;
    }
    v.rate = rate;
    const hist = latencyHistogram(e);
    const hasCalls = hist && hist.count > 0;
    if (hist) {
      v.latChart.push(t, hasCalls ? [hist.p50, hist.p99] : [null, null]);
      v.latTitle.textContent = 'Latency p50 / p99 (' + hist.name.replace(/_time_us$/, '') + ')';
      if (hist.count > 0 && (!slowest || hist.p99 > slowest.p99)) slowest = { id: e.id, p99: hist.p99 };
    }
    v.rateEl.textContent = fmtRate(rate);
    v.p50El.textContent = hasCalls ? fmtLatency(hist.p50) : '–';
    v.p99El.textContent = hasCalls ? fmtLatency(hist.p99) : '–';
    v.callsEl.textContent = fmtNum(calls);
    v.callsEl.nextSibling.textContent = ' ' + plural(calls, 'calls');
  }
  for (const [id, v] of methodViews) {
    if (!seen.has(id)) { v.card.remove(); methodViews.delete(id); }
  }
  document.getElementById('no-methods').hidden = methods.length > 0;

  if (totalRate !== null) totalChart.push(t, [totalRate]);
  const big = document.getElementById('total-rate');
  big.textContent = '';
  big.appendChild(document.createTextNode(fmtRate(totalRate)));
  big.appendChild(el('small', '', 'req/s'));
  setText('card-calls', fmtNum(totalCalls));
  setText('card-calls-sub', totalErrors === null ? '' :
    fmtNum(totalErrors) + ' ' + plural(totalErrors, 'errors') + ' (' +
    (totalCalls > 0 ? (100 * totalErrors / totalCalls).toFixed(2) : '0') + '%)');
  setText('card-methods', String(active));
  setText('card-methods-sub', 'of ' + methods.length + ' ' + plural(methods.length, 'methods') +
    ' serving now');
  setText('card-p99', slowest ? fmtLatency(slowest.p99) : '–');
  // "Service.Method" fits the card; the full id is in the tooltip.
  const p99Sub = document.getElementById('card-p99-sub');
  setText('card-p99-sub', slowest ? shortMethodName(slowest.id) : 'no calls yet');
  p99Sub.title = slowest ? slowest.id : '';
}

// ---------------------------------------------------------------- entity tables

let tableSignature = '';
const valueCells = new Map();  // "type|id|metric" -> td

function metricCellContent(td, m) {
  td.textContent = '';
  if (m.type === 'histogram') {
    const box = el('div', 'hist');
    const add = (label, value) => {
      const s = el('span');
      s.appendChild(document.createTextNode(label + ' '));
      s.appendChild(el('b', '', value));
      box.appendChild(s);
    };
    // An empty histogram reports zeros, which are no measurement: show dashes.
    const stat = (v) => (m.count > 0 ? fmtByUnit(v, m.unit, true) : '–');
    add('count', fmtNum(m.count));
    add('mean', stat(m.mean));
    add('p50', stat(m.p50));
    add('p95', stat(m.p95));
    add('p99', stat(m.p99));
    add('p99.9', stat(m.p999));
    add('max', stat(m.max));
    td.appendChild(box);
  } else {
    td.textContent = fmtByUnit(m.value, m.unit);
    td.title = String(m.value);
  }
}

function entityKey(e) { return e.type + '|' + e.id; }

function renderEntities(entities) {
  const sorted = entities.slice().sort((a, b) => {
    const ta = TYPE_ORDER.indexOf(a.type), tb = TYPE_ORDER.indexOf(b.type);
    const oa = ta < 0 ? TYPE_ORDER.length : ta, ob = tb < 0 ? TYPE_ORDER.length : tb;
    if (oa !== ob) return oa - ob;
    if (a.type !== b.type) return a.type < b.type ? -1 : 1;
    return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
  });
  const sig = JSON.stringify(sorted.map((e) => [e.type, e.id, e.attributes || {},
    (e.metrics || []).map((m) => m.name + ':' + m.type)]));
  if (sig !== tableSignature) {
    tableSignature = sig;
    buildEntityTables(sorted);
  }
  for (const e of sorted) {
    for (const m of e.metrics || []) {
      const td = valueCells.get(entityKey(e) + '|' + m.name);
      if (td) metricCellContent(td, m);
    }
  }
}

function buildEntityTables(sorted) {
  const root = document.getElementById('entities');
  const closed = new Set();
  for (const d of root.querySelectorAll('details.group')) if (!d.open) closed.add(d.dataset.type);
  root.textContent = '';
  valueCells.clear();
  const counts = {};
  for (const e of sorted) counts[e.type] = (counts[e.type] || 0) + 1;
  let group = null, groupType = null;
  for (const e of sorted) {
    if (e.type !== groupType) {
      groupType = e.type;
      group = el('details', 'group');
      group.dataset.type = e.type;
      group.open = !closed.has(e.type);
      const summary = el('summary', '', e.type.charAt(0).toUpperCase() + e.type.slice(1) + (counts[e.type] === 1 ? '' : 's'));
      summary.appendChild(el('span', 'count', String(counts[e.type])));
      group.appendChild(summary);
      root.appendChild(group);
    }
    const box = el('div', 'entity');
    const head = el('div', 'entity-head');
    head.appendChild(el('span', 'badge', e.type));
    head.appendChild(el('span', 'entity-id', e.id));
    const attrs = e.attributes || {};
    for (const k of Object.keys(attrs).sort()) head.appendChild(el('span', 'attr', k + '=' + attrs[k]));
    box.appendChild(head);
    const metrics = Array.isArray(e.metrics) ? e.metrics : [];
    if (metrics.length) {
      const table = el('table', 'metrics');
      const colgroup = el('colgroup');
      for (const c of ['c-name', 'c-type', 'c-value', 'c-help']) colgroup.appendChild(el('col', c));
      table.appendChild(colgroup);
      const hr = el('tr');
      for (const h of ['Metric', 'Type', 'Value', 'Description']) hr.appendChild(el('th', '', h));
      const thead = el('thead');
      thead.appendChild(hr);
      table.appendChild(thead);
      const tbody = el('tbody');
      for (const m of metrics) {
        const tr = el('tr');
        tr.appendChild(el('td', 'name', m.name));
        const type = el('td', 'type', m.type);
        if (m.unit) type.title = 'unit: ' + m.unit;
        tr.appendChild(type);
        const td = el('td', 'value');
        valueCells.set(entityKey(e) + '|' + m.name, td);
        tr.appendChild(td);
        tr.appendChild(el('td', 'help', m.help || ''));
        tbody.appendChild(tr);
      }
      table.appendChild(tbody);
      box.appendChild(table);
    }
    group.appendChild(box);
  }
  if (!sorted.length) root.appendChild(el('p', 'empty', 'The server reported no entities.'));
}

function updateCards(entities) {
  const counts = {};
  for (const e of entities) counts[e.type] = (counts[e.type] || 0) + 1;
  setText('card-entities', String(entities.length));
  const parts = [];
  for (const t of TYPE_ORDER.concat(Object.keys(counts).filter((k) => !TYPE_ORDER.includes(k)))) {
    // A no-break space keeps "1 method" together when the card wraps the line.
    if (counts[t]) parts.push(counts[t] + '\u00a0' + t + (counts[t] === 1 ? '' : 's'));
  }
  setText('card-entities-sub', parts.join(' · '));
  const server = entities.find((e) => e.type === 'server');
  if (server) {
    const a = server.attributes || {};
    const name = a.hostname || a.host || a.name || server.id;
    setText('server-name', name);
    document.title = 'rrpc · ' + name;
  }
}

// ---------------------------------------------------------------- polling

function setStatus(state, text) {
  const s = document.getElementById('status');
  s.dataset.state = state;
  setText('status-text', text);
}

function onSnapshot(snap) {
  const t = Number(snap.timestamp_ms);
  const entities = (Array.isArray(snap.entities) ? snap.entities : [])
    .filter((e) => e && typeof e.id === 'string' && typeof e.type === 'string');
  updateMethods(entities.filter((e) => e.type === 'method'), t);
  updateCards(entities);
  renderEntities(entities);
  updates++;
  document.body.dataset.updates = String(updates);
  const when = isFinite(t) && t > 0 ? new Date(t).toLocaleTimeString() : 'now';
  setStatus('live', 'live · ' + when);
}

async function poll() {
  const ctrl = typeof AbortController === 'function' ? new AbortController() : null;
  const timer = ctrl ? setTimeout(() => ctrl.abort(), FETCH_TIMEOUT_MS) : null;
  let next = POLL_MS;
  try {
    const resp = await fetch('/metrics.json', { cache: 'no-store', signal: ctrl ? ctrl.signal : undefined });
    if (!resp.ok) throw new Error('HTTP ' + resp.status);
    onSnapshot(await resp.json());
  } catch (err) {
    setStatus('error', 'no data: ' + (err && err.message ? err.message : String(err)));
    next = RETRY_MS;
  } finally {
    if (timer) clearTimeout(timer);
  }
  setTimeout(poll, next);
}

function init() {
  totalChart = new LineChart(document.getElementById('total-chart'), [{ color: '--rate', fill: true }], axisLabel(fmtRate));
  totalChart.draw();
  document.getElementById('filter').addEventListener('input', applyFilter);
  let resizeTimer = null;
  window.addEventListener('resize', () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => {
      totalChart.draw();
      for (const v of methodViews.values()) { v.rateChart.draw(); v.latChart.draw(); }
    }, 100);
  });
  poll();
}

if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', init);
else init();
