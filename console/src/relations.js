// Tables and views: each one's columns and types. A view's contents are
// shown live from its egress stream (without backpressure so that a slow
// browser never slows the pipeline): a materialized view's stream starts
// with its current rows (`send_snapshot=true`), any view's then carries its
// changes; inserts and deletes are applied as they arrive and listed in a
// change log. A table
// takes rows pasted as JSON or CSV, to insert or delete.

import { h, replace, message, cell } from './dom.js';
import { api, seg, readLines } from './api.js';

/** Rows drawn in a live table; the count covers all of them. */
const SHOWN_ROWS = 1000;
/** Changes kept in the log under a live table. */
const LOGGED_CHANGES = 200;

function typeName(t) {
  if (!t) return '';
  let s = t.type || '';
  if (t.component) s = `${typeName(t.component)} ${s}`;
  if (t.precision !== undefined && t.precision !== null && t.precision >= 0) {
    s += t.scale !== undefined && t.scale !== null ? `(${t.precision}, ${t.scale})` : `(${t.precision})`;
  }
  return t.nullable === false ? `${s} NOT NULL` : s;
}

export function relationsTab(body, ctx) {
  const d = ctx.descriptor();
  const schema = d && d.program_info && d.program_info.schema;
  if (!schema) {
    replace(body, h('p.empty', {}, 'Save a program first: its tables and views appear here.'));
    return {};
  }
  const rels = [
    ...schema.inputs.map((r) => ({ ...r, kind: 'table' })),
    ...schema.outputs.map((r) => ({ ...r, kind: 'view' })),
  ];
  const detail = h('div.relation#relation');
  const list = h('ul.relations', {}, rels.map((r) => h('li', {},
    h('button.rel', { 'data-relation': r.name, onclick: () => select(r) },
      h(`span.kind.${r.kind}`, {}, r.kind), ' ', r.name))));
  replace(body, h('div.split', {}, list, detail));

  let current = null;
  function select(r) {
    if (current && current.leave) current.leave();
    for (const a of list.querySelectorAll('button')) a.classList.toggle('active', a.dataset.relation === r.name);
    const columns = h('table.grid.schema', {},
      h('thead', {}, h('tr', {}, h('th', {}, 'Column'), h('th', {}, 'Type'))),
      h('tbody', {}, r.fields.map((f) => h('tr', {}, h('td', {}, f.name), h('td', {}, typeName(f.columntype))))));
    const panel = h('div');
    replace(detail, h('h2', {}, `${r.kind === 'table' ? 'Table' : 'View'} ${r.name}`),
      r.materialized ? h('p.hint', {}, 'Materialized: ad-hoc queries can read it.') : null,
      columns, panel);
    current = r.kind === 'view' ? liveView(panel, ctx, r) : tableInput(panel, ctx, r);
  }
  const first = rels.find((r) => r.kind === 'view') || rels[0];
  if (first) select(first);
  return { leave: () => { if (current && current.leave) current.leave(); } };
}

/** The live contents of view `r` and its change log. */
function liveView(panel, ctx, r) {
  const columns = r.fields.map((f) => f.name);
  const state = h('div.note#live-state');
  const count = h('span#live-count');
  const table = h('div#live-rows');
  const log = h('div#live-log');
  replace(panel, h('h3', {}, 'Contents ', count), state, table, h('h3', {}, 'Changes'), log);

  const rows = new Map(); // JSON of the row -> { row, n, at }
  const changes = [];
  let ctrl = null;
  let drawPending = false;
  let stopped = false;
  let seq = 0;

  function value(row, c) {
    if (c in row) return row[c];
    const lc = c.toLowerCase();
    for (const k of Object.keys(row)) if (k.toLowerCase() === lc) return row[k];
    return null;
  }

  function draw() {
    drawPending = false;
    let total = 0;
    for (const e of rows.values()) total += e.n;
    replace(count, `(${total} row${total === 1 ? '' : 's'})`);
    const shown = [...rows.values()].sort((a, b) => b.at - a.at).slice(0, SHOWN_ROWS);
    const recent = seq - 1;
    replace(table, h('table.grid.live', {},
      h('thead', {}, h('tr', {}, columns.map((c) => h('th', {}, c)), h('th', {}, '×'))),
      h('tbody', {}, shown.map((e) => h(`tr${e.at >= recent && e.at > 0 ? '.fresh' : ''}`, {},
        columns.map((c) => cell(value(e.row, c))), h('td.weight', {}, String(e.n)))))));
    replace(log, changes.length === 0 ? h('p.empty', {}, 'No changes since the stream opened.')
      : h('table.grid.changes', {},
        h('thead', {}, h('tr', {}, h('th', {}, ''), columns.map((c) => h('th', {}, c)))),
        h('tbody', {}, changes.map((c) => h(`tr.${c.insert ? 'insert' : 'delete'}`, {},
          h('td.sign', {}, c.insert ? '+' : '−'), columns.map((col) => cell(value(c.row, col))))))));
  }

  function schedule() {
    if (!drawPending) { drawPending = true; requestAnimationFrame(draw); }
  }

  function apply(data, snapshot) {
    seq += 1;
    for (const change of data) {
      const insert = 'insert' in change;
      const row = insert ? change.insert : change.delete;
      const key = JSON.stringify(row);
      // A delete of a row the stream never showed (a view that is not
      // materialized sends no snapshot) is only logged.
      if (insert || rows.has(key)) {
        const e = rows.get(key) || { row, n: 0, at: 0 };
        e.n += insert ? 1 : -1;
        e.at = snapshot ? 0 : seq;
        if (e.n === 0) rows.delete(key); else rows.set(key, e);
      }
      if (!snapshot) {
        changes.unshift({ insert, row });
        if (changes.length > LOGGED_CHANGES) changes.pop();
      }
    }
    schedule();
  }

  async function connect() {
    if (stopped || ctrl) return;
    const d = ctx.descriptor();
    if (!d || d.deployment_status === 'Stopped') {
      replace(state, message('info', 'The pipeline is not running: start it to see this view live.'));
      return;
    }
    const mine = new AbortController();
    ctrl = mine;
    let resync = false;
    rows.clear();
    changes.length = 0;
    // The stream opens with `{"sequence_number": n}`; the snapshot's chunks
    // carry that same n, each later step's changes a larger one.
    let opened = null;
    replace(state, message('info', 'Connecting…'));
    try {
      // Only a materialized view's rows are kept: another's stream starts
      // empty and shows what changes from now on.
      const snapshot = r.materialized ? 'true' : 'false';
      const res = await api(`/pipelines/${seg(ctx.name)}/egress/${seg(r.name)}?format=json&send_snapshot=${snapshot}&backpressure=false`,
        { method: 'POST', raw: true, signal: ctrl.signal });
      replace(state, message('ok', r.materialized ? 'Live: changes appear as the pipeline computes them.'
        : 'Live, from now on: the view is not materialized, so its rows before the stream opened are not kept.'));
      schedule();
      await readLines(res, (chunk) => {
        if (chunk.dropped) {
          // The browser fell behind and the server dropped changes (the
          // stream has no backpressure): start again (from a snapshot,
          // for a materialized view).
          resync = true;
          mine.abort();
          return;
        }
        if (resync) return;
        if (opened === null) opened = chunk.sequence_number;
        if (chunk.json_data) apply(chunk.json_data, chunk.sequence_number <= opened);
      });
      if (!stopped) replace(state, message('info', 'The stream ended (the pipeline stopped).'));
    } catch (e) {
      if (!stopped && !resync) replace(state, message('error', `The view's stream failed: ${e.message}`));
    }
    ctrl = null;
    if (resync && !stopped) connect();
  }

  ctx.onDescriptor(() => { if (!ctrl) connect(); });
  connect();
  return { leave: () => { stopped = true; if (ctrl) ctrl.abort(); } };
}

/** Parses pasted JSON: one array of rows, or one row object per line. */
function jsonRows(text) {
  const t = text.trim();
  if (!t) return [];
  const rows = t.startsWith('[') ? JSON.parse(t) : t.split('\n').filter((l) => l.trim()).map((l, i) => {
    try { return JSON.parse(l); } catch (e) { throw new Error(`line ${i + 1}: ${e.message}`); }
  });
  if (!Array.isArray(rows)) throw new Error('expected an array of rows');
  rows.forEach((r, i) => {
    if (typeof r !== 'object' || r === null || Array.isArray(r)) throw new Error(`row ${i + 1} is not an object`);
  });
  return rows;
}

/** Inserts into and deletes from table `r`. */
function tableInput(panel, ctx, r) {
  let gone = false;
  const example = JSON.stringify(Object.fromEntries(r.fields.map((f) => [f.name, null])));
  const text = h('textarea#rows', { rows: 8, spellcheck: 'false', placeholder: `${example}\n(one JSON object per line, or an array; CSV: one row per line, columns in order)` });
  const format = h('select#rows-format', {}, h('option', { value: 'json' }, 'JSON'), h('option', { value: 'csv' }, 'CSV'));
  const result = h('div.note#rows-note');
  const send = (del) => async () => {
    let body;
    let fmt = format.value;
    try {
      if (fmt === 'json') {
        body = jsonRows(text.value).map((row) => JSON.stringify(del ? { delete: row } : { insert: row })).join('\n');
      } else if (del) {
        throw new Error('deleting takes JSON rows (CSV rows are inserts)');
      } else {
        body = text.value;
      }
    } catch (e) {
      replace(result, message('error', `Not sent: ${e.message}`));
      return;
    }
    replace(result, message('info', 'Sending…'));
    try {
      const a = await api(`/pipelines/${seg(ctx.name)}/ingress/${seg(r.name)}?format=${fmt}`, { method: 'POST', body });
      replace(result, message('info', `${a.accepted} row${a.accepted === 1 ? '' : 's'} accepted; waiting for the step…`));
      await waitToken(ctx.name, a.token, () => gone);
      if (gone) return;
      replace(result, message('ok', `${a.accepted} row${a.accepted === 1 ? '' : 's'} ${del ? 'deleted' : 'inserted'} and processed.`));
    } catch (e) {
      const d = e.details || {};
      if (e.code === 'ParseErrors') {
        replace(result, message('error', `${d.accepted} accepted, ${d.rejected} rejected:`),
          h('ul.errors', {}, (d.errors || []).map((x) => h('li', {}, `line ${x.line}: ${x.reason}`))));
      } else {
        replace(result, message('error', `Sending failed: ${e.message}`));
      }
    }
  };
  replace(panel, h('h3', {}, 'Insert or delete rows'), text,
    h('div.row', {}, format,
      h('button.primary#insert', { onclick: send(false) }, 'Insert'),
      h('button#delete', { onclick: send(true) }, 'Delete')),
    result);
  return { leave: () => { gone = true; } };
}

/** Waits until the input before `token` is processed (or `left()`). */
async function waitToken(name, token, left) {
  for (let i = 0; i < 600 && !left(); i++) {
    const s = await api(`/pipelines/${seg(name)}/completion_status?token=${encodeURIComponent(token)}`);
    if (s.status === 'complete') return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error('the rows were accepted but not processed within a minute (is the pipeline paused?)');
}
