// Errors: what is wrong with the pipeline now — its program's errors, the
// error that stopped it, degraded storage, each connector's last and fatal
// errors with its counts of rejected rows and transport errors — and,
// below, every warning and error it logged (from `GET /logs`), with its
// time, newest first.

import { h, replace, message, grid } from './dom.js';
import { api, seg, readTextLines } from './api.js';

/** Log lines kept. */
const KEPT = 500;

function plural(n, what) {
  return `${n} ${what}${n === 1 ? '' : 's'}`;
}

/** A log line's time, level and text, if it is a warning or an error. */
export function problem(line) {
  const m = /^(\S+)\s+(WARN|ERROR)\s+(.*)$/.exec(line);
  return m ? { time: m[1], level: m[2], text: m[3] } : null;
}

export function errorsTab(body, ctx) {
  const now = h('div#errors-now');
  const note = h('div.note#errors-note');
  const history = h('div#errors-history');
  replace(body, h('h3', {}, 'Now'), now, h('h3', {}, 'Warnings and errors logged'), note, history);

  let stopped = false;
  let timer = null;
  const logged = [];
  let drawing = null;

  async function refresh() {
    const d = ctx.descriptor();
    const rows = [];
    if (d) {
      const msgs = (d.program_error && d.program_error.sql_compilation && d.program_error.sql_compilation.messages) || [];
      for (const m of msgs) rows.push(['program', `line ${m.start_line_number}:${m.start_column}`, m.message]);
      if (d.deployment_error) rows.push(['pipeline', d.deployment_error.error_code || 'Error', d.deployment_error.message || '']);
      if (d.storage_error) rows.push(['storage', d.storage_error.error_code || 'StorageDegraded', d.storage_error.message || '']);
      // A failed pipeline answers no statistics (its error is above).
      if (d.deployment_status !== 'Stopped' && !d.deployment_error) {
        try {
          const s = await api(`/pipelines/${seg(ctx.name)}/stats`);
          for (const e of [...(s.inputs || []), ...(s.outputs || [])]) {
            const m = e.metrics || {};
            const counts = [
              m.num_parse_errors ? plural(m.num_parse_errors, 'row') + ' rejected' : null,
              m.num_transport_errors ? plural(m.num_transport_errors, 'transport error') : null,
            ].filter(Boolean).join(', ');
            if (e.fatal_error) rows.push([e.endpoint_name, 'stopped', e.fatal_error]);
            else if (e.last_error) rows.push([e.endpoint_name, counts || 'error', `the last: ${e.last_error}`]);
          }
        } catch (e) {
          rows.push(['console', 'unreachable', `reading the statistics failed: ${e.message}`]);
        }
      }
    }
    if (stopped) return;
    replace(now, rows.length ? grid(['Where', 'What', 'Message'], rows)
      : h('p.empty#no-errors', {}, 'Nothing is wrong now.'));
    timer = setTimeout(refresh, 2000);
  }

  function showHistory() {
    replace(history, logged.length
      ? grid(['Time', 'Level', 'Message'], [...logged].reverse().map((p) => [p.time, p.level, p.text]),
        (i) => (logged[logged.length - 1 - i].level === 'ERROR' ? 'error' : 'warn'))
      : h('p.empty', {}, 'No warnings or errors logged.'));
  }

  const abort = new AbortController();
  (async () => {
    showHistory();
    if (!ctx.descriptor()) return;
    try {
      const res = await api(`/pipelines/${seg(ctx.name)}/logs`, { raw: true, signal: abort.signal });
      await readTextLines(res, (line) => {
        const p = problem(line);
        if (!p) return;
        logged.push(p);
        if (logged.length > KEPT) logged.shift();
        // Drawn once per burst of lines (the backlog comes all at once).
        if (!drawing) drawing = setTimeout(() => { drawing = null; showHistory(); }, 200);
      });
    } catch (e) {
      if (!abort.signal.aborted) replace(note, message('error', `Reading the log failed: ${e.message}`));
    }
  })();
  refresh();
  return { leave: () => { stopped = true; clearTimeout(timer); clearTimeout(drawing); abort.abort(); } };
}
