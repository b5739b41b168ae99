// Logs: the pipeline's log lines (`GET /logs`, streamed: the last 2,000
// kept, then each new one), newest at the bottom, warnings and errors
// marked, with a filter on their text. Following stops when the tab is
// left.

import { h, replace, message } from './dom.js';
import { api, seg, readTextLines } from './api.js';

/** Lines kept on the page. */
const KEPT = 2000;

function level(line) {
  if (/\sERROR\s/.test(line)) return 'error';
  if (/\sWARN\s/.test(line)) return 'warn';
  return 'info';
}

export function logsTab(body, ctx) {
  const filter = h('input#log-filter', { type: 'search', placeholder: 'Show lines containing…' });
  const note = h('div.note#log-note');
  const list = h('div.log#log-lines', { role: 'log', 'aria-live': 'polite' });
  replace(body, filter, note, list);

  const matches = (el) => !filter.value || el.textContent.toLowerCase().includes(filter.value.toLowerCase());
  filter.addEventListener('input', () => {
    for (const el of list.children) el.hidden = !matches(el);
  });

  function add(line) {
    // Follow the end unless the reader scrolled up.
    const atEnd = list.scrollTop + list.clientHeight >= list.scrollHeight - 4;
    const el = h(`div.line.${level(line)}`, {}, line);
    el.hidden = !matches(el);
    list.appendChild(el);
    while (list.children.length > KEPT) list.firstChild.remove();
    if (atEnd) list.scrollTop = list.scrollHeight;
  }

  const abort = new AbortController();
  (async () => {
    if (!ctx.descriptor()) {
      replace(note, message('info', 'Save the program first: a pipeline that does not exist has no log.'));
      return;
    }
    try {
      const res = await api(`/pipelines/${seg(ctx.name)}/logs`, { raw: true, signal: abort.signal });
      await readTextLines(res, add);
      replace(note, message('info', 'The log ended (the pipeline was deleted).'));
    } catch (e) {
      if (!abort.signal.aborted) replace(note, message('error', `Reading the log failed: ${e.message}`));
    }
  })();

  return { leave: () => abort.abort() };
}
