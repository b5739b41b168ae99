// Performance: charts over time of input and output records per second,
// step latency, buffered input and memory, drawn from `/stats` polled once
// a second; below them each connector's counters and errors and the
// operators that keep the most state.

import uPlot from 'uplot';
import { h, replace, message, grid } from './dom.js';
import { api, seg } from './api.js';

/** Samples kept per chart (ten minutes at one a second). */
const KEPT = 600;
/** Polling period, milliseconds. */
const PERIOD = 1000;

// Samples survive leaving the tab (per pipeline, for this page's life).
const histories = new Map();

const CHARTS = [
  { id: 'records', title: 'Records per second', series: [['input', '#2563eb'], ['output (view changes)', '#16a34a']] },
  { id: 'latency', title: 'Last step latency (ms)', series: [['latency', '#d97706']] },
  { id: 'buffered', title: 'Buffered input records', series: [['buffered', '#7c3aed']] },
  { id: 'memory', title: 'Memory (MiB)', series: [['process RSS', '#dc2626'], ['operator state', '#0891b2']] },
];

function sum(obj) {
  return Object.values(obj || {}).reduce((a, b) => a + b, 0);
}

export function performanceTab(body, ctx) {
  const note = h('div.note#perf-note');
  const charts = h('div.charts');
  const connectors = h('div#connectors');
  const operators = h('div#operators');
  replace(body, note, charts, h('h3', {}, 'Connectors'), connectors, h('h3', {}, 'State by operator'), operators);

  let hist = histories.get(ctx.name);
  if (!hist) {
    hist = { t: [], prev: null, cols: CHARTS.map((c) => c.series.map(() => [])) };
    histories.set(ctx.name, hist);
  }
  const plots = CHARTS.map((c) => {
    const holder = h(`div.chart#chart-${c.id}`);
    charts.appendChild(holder);
    return new uPlot({
      title: c.title,
      width: Math.max(holder.clientWidth - 10, 300),
      height: 200,
      scales: { x: { time: true } },
      series: [{}, ...c.series.map(([label, stroke]) => ({ label, stroke, width: 2 }))],
      axes: [{}, { size: 60 }],
    }, [[], ...c.series.map(() => [])], holder);
  });

  let stopped = false;
  let timer = null;

  function record(s) {
    const g = s.global_metrics;
    const now = Date.now() / 1000;
    const out = sum(s.view_changes);
    const prev = hist.prev;
    const rate = (a, b) => (prev && now > prev.now && a >= b ? (a - b) / (now - prev.now) : 0);
    hist.t.push(now);
    const values = [
      [rate(g.total_input_records, prev && prev.input), rate(out, prev && prev.out)],
      [g.last_step_latency_micros / 1000],
      [g.buffered_input_records],
      [g.rss_bytes / 1048576, g.state_memory_bytes / 1048576],
    ];
    values.forEach((vs, i) => vs.forEach((v, j) => hist.cols[i][j].push(v)));
    hist.prev = { now, input: g.total_input_records, out };
    if (hist.t.length > KEPT) {
      hist.t.shift();
      hist.cols.forEach((series) => series.forEach((a) => a.shift()));
    }
    plots.forEach((p, i) => p.setData([hist.t, ...hist.cols[i]]));
  }

  function tables(s) {
    const rows = (list, input) => list.map((e) => {
      const m = e.metrics || {};
      return [e.endpoint_name, input ? 'input' : 'output', m.total_records,
        input ? m.num_parse_errors : m.dropped_records, m.num_transport_errors,
        input ? (m.end_of_input ? 'yes' : 'no') : '', e.last_error || e.fatal_error || ''];
    });
    const all = [...rows(s.inputs || [], true), ...rows(s.outputs || [], false)];
    replace(connectors, all.length
      ? grid(['Endpoint', 'Direction', 'Records', 'Parse errors / dropped', 'Transport errors', 'End of input', 'Last error'], all)
      : h('p.empty', {}, 'No connectors or HTTP endpoints yet.'));
    const ops = [...(s.operators || [])].sort((a, b) => b.memory_bytes - a.memory_bytes).slice(0, 20);
    replace(operators, ops.length
      ? grid(['Node', 'Operator', 'Entries', 'Memory bytes', 'Storage bytes', 'Shards'],
        ops.map((o) => [o.node, o.operator, o.entries, o.memory_bytes, o.storage_bytes, o.shards]))
      : h('p.empty', {}, 'No operator keeps state.'));
  }

  async function poll() {
    const d = ctx.descriptor();
    if (!d || d.deployment_status === 'Stopped') {
      replace(note, message('info', 'The pipeline is not running: its statistics appear once it starts.'));
    } else {
      try {
        const s = await api(`/pipelines/${seg(ctx.name)}/stats`);
        if (stopped) return;
        replace(note);
        record(s);
        tables(s);
      } catch (e) {
        if (!stopped) replace(note, message('error', `Reading statistics failed: ${e.message}`));
      }
    }
    if (!stopped) timer = setTimeout(poll, PERIOD);
  }
  poll();
  return {
    leave: () => {
      stopped = true;
      clearTimeout(timer);
      plots.forEach((p) => p.destroy());
    },
  };
}
