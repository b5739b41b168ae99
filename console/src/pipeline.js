// One pipeline: its status and actions, and seven tabs: the SQL editor, its
// tables and views, ad-hoc queries, performance, its dataflow, its errors
// and its log. The descriptor is
// polled every two seconds; a pipeline that does not exist yet (a new name)
// opens on an empty editor whose first save creates it.

import { h, replace, message } from './dom.js';
import { api, seg } from './api.js';
import { badge, actions, changes, confirmation } from './status.js';
import { sqlTab } from './sqltab.js';
import { relationsTab } from './relations.js';
import { queryTab } from './query.js';
import { performanceTab } from './performance.js';
import { logsTab } from './logs.js';
import { dataflowTab } from './dataflow.js';
import { errorsTab } from './errors.js';

const TABS = [
  ['sql', 'SQL', sqlTab],
  ['relations', 'Tables & views', relationsTab],
  ['query', 'Query', queryTab],
  ['performance', 'Performance', performanceTab],
  ['dataflow', 'Dataflow', dataflowTab],
  ['errors', 'Errors', errorsTab],
  ['logs', 'Logs', logsTab],
];

export function pipelinePage(main, name, tab) {
  const title = h('h1', {}, name, ' ');
  const state = h('span#state');
  const buttons = h('div.actions#pipeline-actions');
  const note = h('div.note#action-note');
  const failure = h('div#deployment-error');
  const approval = h('div#approval');
  const tabs = h('nav.tabs', {}, TABS.map(([id, label]) => h(`a${id === tab ? '.active' : ''}`, {
    href: `#/pipelines/${seg(name)}/${id}`, 'data-tab': id,
  }, label)));
  const body = h('section.tab');
  title.appendChild(state);
  replace(main, title, buttons, note, approval, failure, tabs, body);

  let stopped = false;
  let timer = null;
  let descriptor = null;
  const listeners = [];
  const ctx = {
    name,
    /** The last descriptor (`selector=all`), or null for a new pipeline. */
    descriptor: () => descriptor,
    /** Calls `f(descriptor)` on every refresh. */
    onDescriptor: (f) => listeners.push(f),
    refresh: () => refresh(),
  };

  const entry = TABS.find(([id]) => id === tab) || TABS[0];
  let content = null;
  // Only the latest refresh may draw and poll again (see pipelines.js);
  // the tab is built after the first answer that says what the pipeline
  // is (its descriptor, or a 404 for a new one), never after an error, so
  // a failed read is not mistaken for a pipeline that does not exist.
  let latest = 0;
  async function refresh() {
    const mine = ++latest;
    clearTimeout(timer);
    let next;
    try {
      next = await api(`/pipelines/${seg(name)}?selector=all`);
    } catch (e) {
      if (stopped || mine !== latest) return;
      if (e.status !== 404) {
        replace(failure, message('error', `Reading the pipeline failed: ${e.message}`));
        timer = setTimeout(refresh, 2000);
        return;
      }
      next = null;
    }
    if (stopped || mine !== latest) return;
    descriptor = next;
    show();
    if (!content) content = entry[2](body, ctx);
    for (const f of listeners) f(descriptor);
    timer = setTimeout(refresh, 2000);
  }

  function show() {
    if (!descriptor) {
      replace(state, h('span.badge.new', { 'data-status': 'New' }, 'not saved yet'));
      replace(buttons);
      replace(failure);
      replace(approval);
      return;
    }
    replace(state, badge(descriptor));
    const list = actions(descriptor).map(([label, what]) => h('button', {
      'data-action': what, onclick: () => act(what),
    }, label));
    replace(buttons, list);
    const err = descriptor.deployment_error;
    // Storage that cannot make input durable (a full disk): the pipeline
    // runs and answers reads, and refuses input until a write succeeds.
    const degraded = descriptor.storage_error;
    // A changed program waiting for approval: what approving would do.
    replace(approval, descriptor.deployment_runtime_status === 'AwaitingApproval'
      ? h('div.msg.warning', { role: 'status' },
        h('strong', {}, 'The program changed since the state was kept. Approve to start it:'),
        h('ul', {}, changes(descriptor.deployment_runtime_status_details)
          .map(([id, text]) => h('li', { 'data-change': id }, text))))
      : null);
    replace(failure,
      err ? h('div.msg.error', { role: 'alert' },
        `${err.error_code || 'Error'}: ${err.message || ''}`,
        h('button.link', { onclick: () => act('dismiss_error') }, 'Dismiss')) : null,
      degraded ? h('div.msg.warning#storage-error', { role: 'status' },
        `${degraded.error_code || 'StorageDegraded'}: ${degraded.message || ''}`) : null);
  }

  async function act(what) {
    const question = confirmation(name, what);
    if (question && !confirm(question)) return;
    replace(note, message('info', `${what}…`));
    try {
      await api(`/pipelines/${seg(name)}/${what}`, { method: 'POST' });
      replace(note);
    } catch (e) {
      replace(note, message('error', `${what}: ${e.message}`));
    }
    ctx.refresh();
  }

  refresh();

  return {
    leave: () => {
      stopped = true;
      clearTimeout(timer);
      if (content && content.leave) content.leave();
    },
  };
}
