// Ad-hoc queries: a read-only SELECT over one consistent snapshot of the
// materialized tables and views (`GET /query`), shown in a grid and
// downloadable as CSV.

import { h, replace, message, grid } from './dom.js';
import { api, seg, readLines } from './api.js';

/** Rows drawn in the grid; all of them are counted and downloaded. */
const SHOWN_ROWS = 5000;

export function queryTab(body, ctx) {
  const d = ctx.descriptor();
  const views = (d && d.program_info && d.program_info.schema.outputs) || [];
  const text = h('textarea#query-text', {
    rows: 5, spellcheck: 'false',
    value: views.length ? `SELECT * FROM ${views[0].name} LIMIT 100` : 'SELECT 1',
    onkeydown: (e) => { if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) { e.preventDefault(); run(); } },
  });
  const note = h('div.note#query-note');
  const result = h('div#query-result');
  const download = h('button#download', { onclick: () => csv(), disabled: true }, 'Download CSV');
  replace(body, text,
    h('div.row', {}, h('button.primary#run-query', { onclick: () => run() }, 'Run'), download,
      h('span.hint', {}, 'Ctrl-Enter runs. Reads materialized tables and views of a running pipeline.')),
    note, result);

  // The run in flight (a newer one, or leaving the tab, aborts it) and
  // the text of the query whose result is shown (what *Download* fetches).
  let running = null;
  let shown = null;

  async function run() {
    if (running) running.abort();
    const ctrl = new AbortController();
    running = ctrl;
    const sql = text.value;
    replace(note, message('info', 'Running…'));
    replace(result);
    download.disabled = true;
    const started = performance.now();
    try {
      const res = await api(`/pipelines/${seg(ctx.name)}/query?format=json&sql=${encodeURIComponent(sql)}`,
        { raw: true, signal: ctrl.signal });
      const rows = [];
      await readLines(res, (row) => rows.push(row));
      if (ctrl.signal.aborted) return;
      const ms = Math.round(performance.now() - started);
      const columns = rows.length ? Object.keys(rows[0]) : [];
      replace(note, message('ok', `${rows.length} row${rows.length === 1 ? '' : 's'} in ${ms} ms${rows.length > SHOWN_ROWS ? ` (the first ${SHOWN_ROWS} shown)` : ''}.`));
      replace(result, rows.length ? grid(columns, rows.slice(0, SHOWN_ROWS).map((r) => columns.map((c) => r[c]))) : null);
      shown = sql;
      download.disabled = false;
    } catch (e) {
      if (!ctrl.signal.aborted) replace(note, message('error', e.message));
    }
  }

  async function csv() {
    try {
      const res = await api(`/pipelines/${seg(ctx.name)}/query?format=csv&sql=${encodeURIComponent(shown)}`, { raw: true });
      const url = URL.createObjectURL(await res.blob());
      const a = h('a', { href: url, download: `${ctx.name}-query.csv` });
      document.body.appendChild(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 10000);
    } catch (e) {
      replace(note, message('error', `Download failed: ${e.message}`));
    }
  }

  return { leave: () => { if (running) running.abort(); } };
}
