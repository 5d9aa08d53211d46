// Value formatting for the dashboard (dashboard.js): numbers, rates, durations, bytes and
// values with the units the server reports, as a reader wants them. Pure functions.


export function fmtNum(v) {
  if (v === null || v === undefined || !isFinite(v)) return '–';
  const a = Math.abs(v);
  if (a >= 1e12) return (v / 1e12).toFixed(2) + 'T';
  if (a >= 1e9) return (v / 1e9).toFixed(a >= 1e10 ? 1 : 2) + 'G';
  if (a >= 1e6) return (v / 1e6).toFixed(a >= 1e7 ? 1 : 2) + 'M';
  if (a >= 1e4) return (v / 1e3).toFixed(a >= 1e5 ? 0 : 1) + 'k';
  if (Number.isInteger(v)) return String(v);
  if (a >= 100) return v.toFixed(0);
  if (a >= 10) return v.toFixed(1);
  return v.toFixed(2);
}

export function fmtRate(v) { return fmtNum(v); }

// A duration given in microseconds, in the most readable scale: "750 ns", "5 µs", "1.25 ms".
export function fmtMicros(us) {
  if (us === null || us === undefined || !isFinite(us)) return '–';
  if (us === 0) return '0 µs';
  if (us < 1) return (us * 1e3).toFixed(0) + ' ns';
  if (us < 10) return (Number.isInteger(us) ? String(us) : us.toFixed(1)) + ' µs';
  if (us < 1000) return us.toFixed(0) + ' µs';
  if (us < 1e6) return (us / 1e3).toFixed(us < 1e4 ? 2 : 1) + ' ms';
  if (us < 120e6) return (us / 1e6).toFixed(2) + ' s';
  return fmtSeconds(us / 1e6);
}

// A latency percentile or mean from a histogram of whole microseconds: a value below 1 was
// recorded as 0 (the call took under a microsecond), which "0" would misstate.
export function fmtLatency(us) {
  if (us === null || us === undefined || !isFinite(us)) return '–';
  return us < 1 ? '<1 µs' : fmtMicros(us);
}

// Axis labels: "2.00 ms" reads better as "2 ms", "1.50 ms" as "1.5 ms"; the baseline is "0".
export function axisLabel(format) {
  return (v) => (v === 0 ? '0' :
    format(v).replace(/(\.\d*?)0+(?=\D*$)/, '$1').replace(/\.(?=\D*$)/, ''));
}

// "1 connection", "2 connections": the singular of each count unit the server reports.
const SINGULAR_UNITS = {
  requests: 'request', calls: 'call', errors: 'error', connections: 'connection',
  messages: 'message', entries: 'entry', threads: 'thread', methods: 'method',
};

export function plural(n, unit) {
  return n === 1 && SINGULAR_UNITS[unit] ? SINGULAR_UNITS[unit] : unit;
}

function fmtBytes(b) {
  if (b === null || b === undefined || !isFinite(b)) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (Math.abs(b) >= 1024 && i < units.length - 1) { b /= 1024; i++; }
  return (i === 0 ? String(b) : b.toFixed(b < 10 ? 2 : 1)) + ' ' + units[i];
}

function fmtSeconds(s) {
  if (s === null || s === undefined || !isFinite(s)) return '–';
  if (s < 120) return fmtNum(s) + ' s';
  const d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600), m = Math.floor((s % 3600) / 60);
  return (d ? d + 'd ' : '') + (d || h ? h + 'h ' : '') + m + 'm';
}

const TIME_UNIT_MICROS = { nanoseconds: 1e-3, microseconds: 1, milliseconds: 1e3, seconds: 1e6 };
const TIME_UNIT_SHORT = { nanoseconds: 'ns', microseconds: 'µs', milliseconds: 'ms', seconds: 's' };

// A value with its unit, in the most readable scale. fromHistogram: v is a percentile, mean,
// min or max of a histogram of whole units, where a time below 1 unit reads "<1 µs".
export function fmtByUnit(v, unit, fromHistogram) {
  if (v === null || v === undefined || !isFinite(v)) return '–';
  if (unit in TIME_UNIT_MICROS) {
    if (fromHistogram && v < 1) return '<1 ' + TIME_UNIT_SHORT[unit];
    return fmtMicros(v * TIME_UNIT_MICROS[unit]);
  }
  switch (unit) {
    case 'bytes': return fmtBytes(v);
    case undefined: case null: case '': case 'units': return fmtNum(v);
    default: return fmtNum(v) + ' ' + plural(v, unit);
  }
}
