/**
 * The dashboard of `sluice dev` and `sluice run --dashboard`: one page, served at / beside the
 * ingestion endpoint, that polls GET /stats (DevStatus, lib/cli/status-shape.ts) once a second
 * and draws the job graph as inline SVG laid out by stage, the counters, the checkpoint
 * timeline, each sink's latest records and the projected AWS cost. A string, so the compiled
 * package carries it with no build step; no library, no request but to its own origin.
 */

const STYLE = `
:root { --fg: #1d2330; --muted: #5b6475; --line: #d5dae3; --bg: #f5f7fa; --card: #fff; --accent: #2563eb; --warn: #b45309; --bad: #b91c1c; --ok: #15803d; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg); background: var(--bg); }
header { display: flex; align-items: baseline; gap: 16px; padding: 12px 20px; background: #0f172a; color: #e2e8f0; }
header h1 { font-size: 18px; margin: 0; }
header .meta { color: #94a3b8; font-size: 13px; }
header .state { margin-left: auto; font-size: 13px; }
header .state.stale { color: #fca5a5; }
main { padding: 16px 20px; display: grid; gap: 16px; }
section { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 12px 16px; }
section h2 { font-size: 14px; margin: 0 0 10px; text-transform: uppercase; letter-spacing: .04em; color: var(--muted); }
.counters { display: grid; grid-template-columns: repeat(auto-fill, minmax(150px, 1fr)); gap: 10px; }
.counter { border: 1px solid var(--line); border-radius: 6px; padding: 8px 10px; }
.counter .label { color: var(--muted); font-size: 12px; }
.counter .value { font-size: 20px; font-weight: 600; font-variant-numeric: tabular-nums; }
.counter .detail { color: var(--muted); font-size: 12px; min-height: 16px; }
.counter.bad .value { color: var(--bad); }
.counter.warn .value { color: var(--warn); }
#graph { overflow-x: auto; }
svg text { font-family: inherit; }
.op rect { fill: #eef2ff; stroke: #6366f1; }
.op.sink rect { fill: #ecfdf5; stroke: #10b981; }
.op.source rect { fill: #fff7ed; stroke: #f59e0b; }
.op .name { font-weight: 600; font-size: 13px; }
.op .kind, .op .num { font-size: 11px; fill: var(--muted); }
.op .late { font-size: 11px; fill: var(--bad); }
.stage-box { fill: #f8fafc; stroke: var(--line); }
.stage-title { font-weight: 600; font-size: 12px; }
.stage-info { font-size: 11px; fill: var(--muted); }
.edge { fill: none; stroke: #64748b; stroke-width: 1.5; }
.edge.shuffle { stroke-dasharray: 5 4; }
.fill-bg { fill: #e2e8f0; }
.fill-bar { fill: var(--ok); }
.fill-bar.high { fill: var(--bad); }
table { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--line); font-size: 13px; }
th { color: var(--muted); font-weight: 500; }
td.num, th.num { text-align: right; }
.status-completed { color: var(--ok); }
.status-aborted { color: var(--bad); }
.status-in-progress { color: var(--warn); }
.row { display: grid; grid-template-columns: minmax(0, 3fr) minmax(0, 2fr); gap: 16px; }
.sink h3 { font-size: 13px; margin: 8px 0 4px; }
.sink pre { margin: 0; max-height: 220px; overflow: auto; background: #0f172a; color: #e2e8f0; padding: 8px; border-radius: 6px; font-size: 12px; }
.muted { color: var(--muted); }
.cost-total { font-size: 22px; font-weight: 600; }
ul.assumptions { margin: 6px 0 0; padding-left: 18px; color: var(--muted); font-size: 12px; }
`;

const SCRIPT = `
'use strict';
const SVG = 'http://www.w3.org/2000/svg';
const int = (n) => Math.round(n).toLocaleString('en-US');
const rate = (n) => (n === null || n === undefined ? '-' : n < 10 && n > 0 ? n.toFixed(1) : int(n));
function span(ms) {
  const a = Math.abs(ms), s = ms < 0 ? '-' : '';
  if (a < 1000) return s + Math.round(a) + ' ms';
  if (a < 60000) return s + (a / 1000).toFixed(1) + ' s';
  if (a < 3600000) return s + Math.round(a / 60000) + ' min';
  if (a < 86400000) return s + Math.round(a / 3600000) + ' h';
  if (a < 365 * 86400000) return s + Math.round(a / 86400000) + ' d';
  return s + (a / (365.25 * 86400000)).toFixed(1) + ' y';
}
function bytes(n) { return n < 1024 ? n + ' B' : n < 1048576 ? (n / 1024).toFixed(1) + ' KB' : (n / 1048576).toFixed(1) + ' MB'; }
function dollars(d) {
  if (d === null || d === undefined) return '-';
  if (d === 0) return '$0';
  if (d >= 1) return '$' + d.toFixed(2);
  return '$' + d.toFixed(Math.min(10, Math.max(2, 1 - Math.floor(Math.log10(d)))));
}
function el(tag, attrs, text) {
  const e = tag.startsWith('svg:') ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = String(text);
  return e;
}
function replace(id, ...children) { const n = document.getElementById(id); n.replaceChildren(...children); return n; }

function counter(id, label, value, shown, detail, tone) {
  const c = el('div', { class: 'counter' + (tone ? ' ' + tone : ''), 'data-testid': 'counter', id: id, 'data-value': value });
  c.append(el('div', { class: 'label' }, label), el('div', { class: 'value' }, shown), el('div', { class: 'detail' }, detail || ''));
  return c;
}

function drawCounters(s) {
  const sourceRate = s.operators.filter((o) => o.kind === 'source').reduce((n, o) => n + o.inPerSecond, 0);
  const rejected = s.rejected.invalid + s.rejected.overBounds;
  const late = Object.entries(s.lateDropped).filter(([, n]) => n > 0).map(([op, n]) => op + ' ' + int(n)).join(', ');
  const last = s.checkpoints && s.checkpoints.timeline.length ? s.checkpoints.timeline[s.checkpoints.timeline.length - 1] : null;
  replace('counters',
    counter('records-ingested', 'records ingested', s.recordsIngested, int(s.recordsIngested), rate(sourceRate) + ' records/s'),
    counter('queued', 'queued', s.queuedRecords, int(s.queuedRecords), 'lag ' + span(s.lagMs), s.lagMs >= 5000 ? 'warn' : ''),
    counter('rejected', 'rejected', rejected, int(rejected), int(s.rejected.invalid) + ' invalid, ' + int(s.rejected.overBounds) + ' over the bounds' + (s.rejected.requestsRefused ? ', ' + int(s.rejected.requestsRefused) + ' requests unread' : ''), rejected ? 'bad' : ''),
    counter('dead-letters', 'dead letters', s.deadLetters, int(s.deadLetters), s.deadLetterFile && s.deadLetters ? s.deadLetterFile : '', s.deadLetters ? 'bad' : ''),
    counter('late-dropped', 'late dropped', s.lateDroppedTotal, int(s.lateDroppedTotal), late, s.lateDroppedTotal ? 'warn' : ''),
    counter('shed', 'shed (load shedding)', s.shedTotal || 0, int(s.shedTotal || 0), Object.entries(s.shed || {}).map(([k, v]) => k + ' ' + Object.entries(v).map(([r, n]) => r + ' ' + int(n)).join(', ')).join('; '), s.shedTotal ? 'warn' : ''),
    counter('last-checkpoint', 'last checkpoint', s.lastCheckpoint === null ? '' : s.lastCheckpoint, s.lastCheckpoint === null ? 'none yet' : 'epoch ' + s.lastCheckpoint, last ? last.status + (last.durationMs !== null ? ', ' + int(last.durationMs) + ' ms' : '') : s.checkpoints ? '' : 'checkpoints off'),
    counter('cost', 'AWS cost / million events', s.cost.dollarsPerMillionEvents === null ? '' : s.cost.dollarsPerMillionEvents, dollars(s.cost.dollarsPerMillionEvents), 'projected, prices ' + s.cost.pricesAsOf),
  );
}

const OP_W = 210, OP_H = 84, COL_W = 270, GAP = 28, TOP = 88, PAD = 20;
function drawGraph(s) {
  const pos = new Map();
  let height = 0;
  s.stages.forEach((st, i) => {
    st.operators.forEach((name, j) => pos.set(name, { x: PAD + i * COL_W + (COL_W - 20 - OP_W) / 2, y: TOP + j * (OP_H + GAP) }));
    height = Math.max(height, TOP + st.operators.length * (OP_H + GAP));
  });
  const width = PAD * 2 + s.stages.length * COL_W - 20;
  const svg = el('svg:svg', { width: width, height: height + 10, viewBox: '0 0 ' + width + ' ' + (height + 10), role: 'img', 'aria-label': 'job graph' });
  const defs = el('svg:defs');
  const marker = el('svg:marker', { id: 'arrow', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' });
  marker.append(el('svg:path', { d: 'M 0 0 L 10 5 L 0 10 z', fill: '#64748b' }));
  defs.append(marker);
  svg.append(defs);
  s.stages.forEach((st, i) => {
    const x = PAD + i * COL_W - 6;
    const adv = s.scaling ? s.scaling.stages[i] : undefined;
    const advised = adv && adv.advisedPartitions !== null ? adv.advisedPartitions : null;
    const g = el('svg:g', { 'data-testid': 'stage', 'data-name': st.name, 'data-advised': advised === null ? '' : advised });
    g.append(el('svg:rect', { class: 'stage-box', x: x, y: 6, width: COL_W - 8, height: height - 6, rx: 8 }));
    g.append(el('svg:text', { class: 'stage-title', x: x + 10, y: 24 }, 'stage ' + st.name + ' \\u00d7' + st.parallelism + (advised !== null && advised !== st.parallelism ? ' (advised \\u00d7' + advised + ')' : '')));
    const wm = st.endOfInput ? 'end of input' : st.watermark === null ? 'none yet' : new Date(st.watermark).toISOString().replace('T', ' ').slice(0, 19);
    g.append(el('svg:text', { class: 'stage-info', x: x + 10, y: 40 }, 'watermark ' + wm + (st.watermarkLagMs !== null ? ' (lag ' + span(st.watermarkLagMs) + ')' : '')));
    g.append(el('svg:text', { class: 'stage-info', x: x + 10, y: 55 }, 'queued ' + int(st.queuedRecords) + ' \\u00b7 state ' + (st.stateKeys === null ? '-' : int(st.stateKeys) + ' keys')));
    const barW = COL_W - 28;
    g.append(el('svg:rect', { class: 'fill-bg', x: x + 10, y: 62, width: barW, height: 6, rx: 3 }));
    g.append(el('svg:rect', { class: 'fill-bar' + (st.queueFill > 0.8 ? ' high' : ''), x: x + 10, y: 62, width: Math.max(st.queueFill > 0 ? 2 : 0, barW * st.queueFill), height: 6, rx: 3 }));
    g.append(el('svg:title', {}, 'back-pressure: fullest input queue ' + Math.round(st.queueFill * 100) + '% of ' + int(st.queueCapacity) + ' records' + (adv && adv.truePerPartition !== null ? '; true rate ' + int(adv.truePerPartition) + ' records/s per partition, ' + advised + ' partition(s) for the current input' : '')));
    svg.append(g);
  });
  for (const e of s.edges) {
    const a = pos.get(e.from), b = pos.get(e.to);
    if (!a || !b) continue;
    let d;
    if (e.shuffle || a.x !== b.x) {
      const x1 = a.x + OP_W, y1 = a.y + OP_H / 2, x2 = b.x, y2 = b.y + OP_H / 2, mx = (x1 + x2) / 2;
      d = 'M ' + x1 + ' ' + y1 + ' C ' + mx + ' ' + y1 + ', ' + mx + ' ' + y2 + ', ' + (x2 - 2) + ' ' + y2;
    } else {
      const x = a.x + OP_W / 2;
      d = 'M ' + x + ' ' + (a.y + OP_H) + ' L ' + x + ' ' + (b.y - 2);
    }
    svg.append(el('svg:path', { class: 'edge' + (e.shuffle ? ' shuffle' : ''), d: d, 'marker-end': 'url(#arrow)', 'data-from': e.from, 'data-to': e.to }));
  }
  for (const o of s.operators) {
    const p = pos.get(o.name);
    if (!p) continue;
    const g = el('svg:g', { class: 'op ' + o.kind, 'data-testid': 'operator', 'data-name': o.name, 'data-records-in': o.recordsIn, 'data-late-dropped': o.lateDropped, transform: 'translate(' + p.x + ',' + p.y + ')' });
    g.append(el('svg:rect', { width: OP_W, height: OP_H, rx: 6 }));
    g.append(el('svg:text', { class: 'name', x: 10, y: 18 }, o.name));
    g.append(el('svg:text', { class: 'kind', x: OP_W - 10, y: 18, 'text-anchor': 'end' }, o.kind));
    g.append(el('svg:text', { class: 'num', x: 10, y: 38 }, 'in ' + int(o.recordsIn) + ' \\u00b7 ' + rate(o.inPerSecond) + '/s'));
    g.append(el('svg:text', { class: 'num', x: 10, y: 54 }, 'out ' + (o.recordsOut === null ? '-' : int(o.recordsOut) + ' \\u00b7 ' + rate(o.outPerSecond) + '/s')));
    if (o.lateDropped) g.append(el('svg:text', { class: 'late', x: 10, y: 72 }, int(o.lateDropped) + ' late dropped'));
    svg.append(g);
  }
  replace('graph', svg);
}

function drawCheckpoints(s) {
  const box = document.getElementById('checkpoints');
  if (!s.checkpoints) { box.replaceChildren(el('p', { class: 'muted' }, 'Checkpoints are off (--checkpoint-interval 0 takes them only at the stop and for savepoints).')); return; }
  const rows = s.checkpoints.timeline.slice().reverse();
  const items = [el('p', { class: 'muted' }, (s.checkpoints.intervalMs ? 'every ' + span(s.checkpoints.intervalMs) + ' while input arrives' : 'at the stop and for savepoints') + ', in ' + s.checkpoints.dir)];
  if (!rows.length) { items.push(el('p', { class: 'muted' }, 'No checkpoint yet.')); box.replaceChildren(...items); return; }
  const done = s.checkpoints.timeline.filter((c) => c.durationMs !== null);
  const max = Math.max(1, ...done.map((c) => c.durationMs));
  const chart = el('svg:svg', { width: '100%', height: 60, viewBox: '0 0 ' + Math.max(50, s.checkpoints.timeline.length) * 14 + ' 60', preserveAspectRatio: 'none', 'aria-label': 'checkpoint durations' });
  s.checkpoints.timeline.forEach((c, i) => {
    const h = c.durationMs === null ? 4 : Math.max(2, (c.durationMs / max) * 56);
    const bar = el('svg:rect', { x: i * 14 + 2, y: 58 - h, width: 10, height: h, fill: c.status === 'completed' ? '#15803d' : c.status === 'aborted' ? '#b91c1c' : '#b45309' });
    bar.append(el('svg:title', {}, 'epoch ' + c.epoch + ': ' + c.status + (c.durationMs !== null ? ', ' + c.durationMs + ' ms' : '')));
    chart.append(bar);
  });
  items.push(chart);
  const table = el('table');
  const head = el('tr');
  for (const [t, cls] of [['epoch', 'num'], ['status', ''], ['started', ''], ['duration', 'num'], ['size', 'num'], ['savepoint', '']]) head.append(el('th', { class: cls }, t));
  table.append(head);
  for (const c of rows) {
    const tr = el('tr', { 'data-testid': 'checkpoint', 'data-epoch': c.epoch, 'data-status': c.status });
    tr.append(el('td', { class: 'num' }, c.epoch), el('td', { class: 'status-' + c.status.replace(' ', '-') }, c.status),
      el('td', {}, c.startedAt === null ? '-' : new Date(c.startedAt).toISOString().slice(11, 19)),
      el('td', { class: 'num' }, c.durationMs === null ? '-' : int(c.durationMs) + ' ms'),
      el('td', { class: 'num' }, c.bytes === null ? '-' : bytes(c.bytes)), el('td', {}, c.savepoint || ''));
    table.append(tr);
  }
  items.push(table);
  box.replaceChildren(...items);
}

function drawSinks(s) {
  const parts = [];
  if (!s.sinks.length) parts.push(el('p', { class: 'muted' }, 'No sink.'));
  for (const k of s.sinks) {
    const d = el('div', { class: 'sink', 'data-testid': 'sink', 'data-name': k.name });
    d.append(el('h3', {}, k.name + ' (' + k.kind + ', ' + int(k.written) + ' records written' + (k.latest.length ? ', the last ' + k.latest.length : '') + ')'));
    d.append(el('pre', {}, k.latest.length ? k.latest.map((r) => JSON.stringify(r)).join('\\n') : 'nothing written yet'));
    parts.push(d);
  }
  replace('sinks', ...parts);
}

function drawCost(s) {
  const c = s.cost;
  const items = [el('div', { class: 'cost-total', 'data-testid': 'cost' }, c.dollarsPerMillionEvents === null ? 'no events yet' : dollars(c.dollarsPerMillionEvents) + ' per million events')];
  const table = el('table');
  for (const [service, d] of Object.entries(c.byService)) { const tr = el('tr'); tr.append(el('td', {}, service), el('td', { class: 'num' }, dollars(d))); table.append(tr); }
  if (c.checkpointDollarsPerHour !== null) items.push(el('p', {}, 'checkpoints: ' + dollars(c.checkpointDollarsPerHour) + ' an hour while input arrives'));
  items.push(table, el('p', { class: 'muted' }, 'A projection of this run onto the AWS path at us-east-1 prices as of ' + c.pricesAsOf + '. Assumed:'));
  const ul = el('ul', { class: 'assumptions' });
  for (const a of c.assumptions) ul.append(el('li', {}, a));
  items.push(ul);
  replace('cost-box', ...items);
}

function draw(s) {
  document.title = s.job + ' \\u00b7 sluice';
  document.getElementById('job').textContent = s.job;
  document.getElementById('meta').textContent = 'pid ' + s.pid + ' \\u00b7 up ' + span(s.uptimeMs) + ' \\u00b7 ' + s.url;
  drawCounters(s);
  drawGraph(s);
  drawCheckpoints(s);
  drawSinks(s);
  drawCost(s);
  window.sluiceStatus = s;
  document.body.dataset.updated = String(s.at);
}

async function poll() {
  const state = document.getElementById('state');
  try {
    const res = await fetch('stats', { cache: 'no-store' });
    if (!res.ok) throw new Error('HTTP ' + res.status);
    draw(await res.json());
    state.textContent = 'live \\u00b7 ' + new Date().toISOString().slice(11, 19);
    state.className = 'state';
  } catch (e) {
    state.textContent = 'not reachable (' + e.message + '): the job has stopped?';
    state.className = 'state stale';
  }
  setTimeout(poll, 1000);
}
poll();
`;

export const DASHBOARD_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>sluice dashboard</title>
<style>${STYLE}</style>
</head>
<body>
<header><h1 id="job">sluice</h1><span class="meta" id="meta"></span><span class="state" id="state">connecting...</span></header>
<main>
<section><h2>Counters</h2><div class="counters" id="counters"></div></section>
<section><h2>Job graph</h2><div id="graph"></div><p class="muted">Stages left to right; a dashed edge is a shuffle (by key, or rebalanced). Out: what the next operators took in. The bar under a stage is its back-pressure: the fullest partition's input queue.</p></section>
<div class="row">
<section><h2>Checkpoints</h2><div id="checkpoints"></div></section>
<section><h2>Projected AWS cost</h2><div id="cost-box"></div></section>
</div>
<section><h2>Latest results</h2><div id="sinks"></div></section>
</main>
<script>${SCRIPT}</script>
</body>
</html>
`;
