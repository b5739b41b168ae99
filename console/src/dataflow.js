// Dataflow: the pipeline's circuit drawn as a graph (laid out by dagre),
// each node coloured by what it costs — its share of the time spent in
// steps, or of the state kept — from `/circuit`, polled every two seconds.
// A node's details say what it has read, produced, spent and kept, its
// cost over the last interval, and the SQL of the table or view it belongs
// to; clicking a relation's name there selects its nodes.

import dagre from '@dagrejs/dagre';
import { h, replace, message, grid } from './dom.js';
import { api, seg } from './api.js';

const PERIOD = 2000;
const NODE_W = 170;
const NODE_H = 46;
const SVG = 'http://www.w3.org/2000/svg';

/** An SVG element with attributes and children. */
function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (v !== null && v !== undefined) el.setAttribute(k, String(v));
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    el.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

/** `n` bytes, rows or microseconds, short. */
export function short(n, unit) {
  if (unit === 'us') {
    if (n >= 1e6) return `${(n / 1e6).toFixed(2)} s`;
    if (n >= 1e3) return `${(n / 1e3).toFixed(1)} ms`;
    return `${n} µs`;
  }
  const steps = unit === 'B' ? [[2 ** 30, 'GiB'], [2 ** 20, 'MiB'], [2 ** 10, 'KiB']] : [[1e9, 'G'], [1e6, 'M'], [1e3, 'k']];
  for (const [size, name] of steps) if (n >= size) return `${(n / size).toFixed(1)} ${name}`;
  return unit === 'B' ? `${n} B` : String(n);
}

/** A cost's colour: white for none, through amber, to red for the most. */
export function heat(share) {
  const t = Math.max(0, Math.min(1, share));
  if (t === 0) return '#ffffff';
  // Hue from 50 (amber) to 0 (red), lightness from 92% to 60%.
  return `hsl(${Math.round(50 - 50 * t)}, 90%, ${Math.round(92 - 32 * t)}%)`;
}

/** The statement of `program` that defines `relation` (by its name), or null. */
export function statementOf(program, relation) {
  if (!program || !relation) return null;
  const name = relation.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  const re = new RegExp(`create\\s+(?:materialized\\s+|local\\s+)?(?:table|view)\\s+"?${name}"?[\\s(]`, 'i');
  const m = re.exec(program);
  if (!m) return null;
  const end = program.indexOf(';', m.index);
  return program.slice(m.index, end < 0 ? program.length : end + 1);
}

export function dataflowTab(body, ctx) {
  const note = h('div.note#dataflow-note');
  const measure = h('select#dataflow-measure', { onchange: () => draw() },
    h('option', { value: 'time' }, 'Colour by time spent'),
    h('option', { value: 'state' }, 'Colour by state kept'));
  const summary = h('span#dataflow-summary');
  const canvas = h('div.dataflow#dataflow-graph');
  const details = h('div.dataflow-details#dataflow-details',
    {}, h('p.empty', {}, 'Click a node to see its costs and its SQL.'));
  replace(body, note, h('div.toolbar', {}, measure, summary),
    h('div.dataflow-layout', {}, canvas, details));

  let stopped = false;
  let timer = null;
  let circuit = null;
  let previous = null; // the last answer before `circuit`, for rates
  let layout = null; // dagre's graph, kept while the nodes stay the same
  let shape = '';
  let selected = null;

  function laidOut(nodes) {
    const key = nodes.map((n) => `${n.id}:${n.operator}:${n.inputs.join(',')}`).join(';');
    if (key === shape && layout) return layout;
    const g = new dagre.graphlib.Graph();
    g.setGraph({ rankdir: 'TB', nodesep: 24, ranksep: 36, marginx: 10, marginy: 10 });
    g.setDefaultEdgeLabel(() => ({}));
    for (const n of nodes) g.setNode(String(n.id), { width: NODE_W, height: NODE_H });
    for (const n of nodes) for (const i of n.inputs) g.setEdge(String(i), String(n.id));
    dagre.layout(g);
    shape = key;
    layout = g;
    return g;
  }

  function cost(n) {
    return measure.value === 'state' ? n.memory_bytes + n.storage_bytes : n.time_micros;
  }

  function draw() {
    if (!circuit) return;
    const nodes = circuit.nodes;
    const g = laidOut(nodes);
    const most = Math.max(1, ...nodes.map(cost));
    const total = nodes.reduce((a, n) => a + n.time_micros, 0);
    const kept = nodes.reduce((a, n) => a + n.memory_bytes + n.storage_bytes, 0);
    replace(summary, `${nodes.length} nodes · ${circuit.steps} steps · ${short(total, 'us')} in operators · ${short(kept, 'B')} of state`);
    const { width, height } = g.graph();
    const svg = s('svg', { width, height, viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-label': 'dataflow graph' },
      s('defs', {}, s('marker', { id: 'arrow', viewBox: '0 0 10 10', refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' },
        s('path', { d: 'M 0 0 L 10 5 L 0 10 z', fill: '#94a3b8' }))));
    for (const e of g.edges()) {
      const pts = g.edge(e).points.map((p) => `${p.x},${p.y}`).join(' ');
      svg.appendChild(s('polyline', { points: pts, fill: 'none', stroke: '#94a3b8', 'stroke-width': 1.2, 'marker-end': 'url(#arrow)' }));
    }
    for (const n of nodes) {
      const p = g.node(String(n.id));
      const share = cost(n) / most;
      const line2 = measure.value === 'state'
        ? `${short(n.memory_bytes + n.storage_bytes, 'B')} · ${short(n.state_entries)} entries`
        : `${short(n.time_micros, 'us')} · ${short(n.rows_out)} rows out`;
      const mine = selected !== null && (selected === n.id || (typeof selected === 'string' && n.relation === selected));
      svg.appendChild(s('g', {
        class: `node${mine ? ' selected' : ''}`, 'data-node': n.id, 'data-relation': n.relation || '',
        transform: `translate(${p.x - NODE_W / 2},${p.y - NODE_H / 2})`,
        onclick: () => { selected = n.id; draw(); },
      },
      s('title', {}, `${n.operator} (node ${n.id})${n.relation ? ` of ${n.relation}` : ''}`),
      s('rect', { width: NODE_W, height: NODE_H, rx: 6, fill: heat(share), stroke: mine ? '#2563eb' : '#64748b', 'stroke-width': mine ? 2.5 : 1 }),
      s('text', { x: 8, y: 18, 'font-size': 12, 'font-weight': 600 }, `${n.id} ${n.operator}`.slice(0, 26)),
      s('text', { x: 8, y: 35, 'font-size': 11, fill: '#334155' }, n.relation ? `${n.relation.slice(0, 12)} · ${line2}` : line2)));
    }
    replace(canvas, svg);
    show();
  }

  /** The selected node's details (or a relation's nodes). */
  function show() {
    if (selected === null || !circuit) return;
    const byId = new Map(circuit.nodes.map((n) => [n.id, n]));
    if (typeof selected === 'string') {
      const mine = circuit.nodes.filter((n) => n.relation === selected);
      replace(details, h('h3', {}, selected),
        grid(['Node', 'Operator', 'Time', 'Rows in', 'Rows out', 'State'],
          mine.map((n) => [n.id, n.operator, short(n.time_micros, 'us'), n.rows_in, n.rows_out, short(n.memory_bytes + n.storage_bytes, 'B')])),
        sql(selected));
      return;
    }
    const n = byId.get(selected);
    if (!n) return;
    const before = previous && previous.nodes.find((p) => p.id === n.id && p.operator === n.operator);
    const secs = previous && circuit.at > previous.at ? (circuit.at - previous.at) / 1000 : 0;
    const recent = before && secs ? `${short(Math.round((n.time_micros - before.time_micros) / secs), 'us')} per second, ${Math.round((n.rows_in - before.rows_in) / secs)} rows in per second` : 'not measured yet';
    const perEval = n.evaluations ? short(Math.round(n.time_micros / n.evaluations), 'us') : '–';
    const rows = [
      ['Operator', n.operator],
      ['Reads', n.inputs.length ? n.inputs.map((i) => `${i} ${(byId.get(i) || {}).operator || ''}`).join(', ') : 'its table\'s input'],
      ['Evaluations', n.evaluations],
      ['Time', `${short(n.time_micros, 'us')} (${perEval} per evaluation)`],
      ['Lately', recent],
      ['Rows in / out', `${n.rows_in} / ${n.rows_out}`],
      ['State', `${n.state_entries} entries, ${short(n.memory_bytes, 'B')} in memory, ${short(n.storage_bytes, 'B')} in storage`],
      ['Shards', n.shards],
    ];
    replace(details, h('h3', {}, `Node ${n.id}`),
      h('table.grid.kv', {}, h('tbody', {}, rows.map(([k, v]) => h('tr', {}, h('th', {}, k), h('td', {}, String(v)))))),
      n.relation ? h('p', {}, 'Belongs to ', h('button.link', { 'data-select-relation': n.relation, onclick: () => { selected = n.relation; draw(); } }, n.relation)) : null,
      sql(n.relation));
  }

  function sql(relation) {
    const d = ctx.descriptor();
    const text = statementOf(d && d.program_code, relation);
    return text ? h('pre.sql#dataflow-sql', {}, text) : null;
  }

  async function poll() {
    const d = ctx.descriptor();
    if (!d || d.deployment_status === 'Stopped') {
      replace(note, message('info', 'The pipeline is not running: its dataflow appears once it starts.'));
    } else {
      try {
        const c = await api(`/pipelines/${seg(ctx.name)}/circuit`);
        if (stopped) return;
        c.at = Date.now();
        previous = circuit;
        circuit = c;
        replace(note);
        draw();
      } catch (e) {
        if (!stopped) replace(note, message('error', `Reading the dataflow failed: ${e.message}`));
      }
    }
    if (!stopped) timer = setTimeout(poll, PERIOD);
  }
  poll();
  return { leave: () => { stopped = true; clearTimeout(timer); } };
}
