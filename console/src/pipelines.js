// The pipeline list: name, status, storage and actions for each; a form that
// opens the editor on a new pipeline. Refreshed every two seconds.

import { h, replace, message } from './dom.js';
import { api, seg } from './api.js';
import { badge, actions, confirmation } from './status.js';

const NAME = /^[a-zA-Z0-9_-]{1,100}$/;

export function pipelinesPage(main) {
  const list = h('div#pipelines');
  const note = h('div.note');
  const name = h('input#new-name', { placeholder: 'new pipeline name', maxlength: 100 });
  const form = h('form.row', {
    onsubmit: (e) => {
      e.preventDefault();
      const n = name.value.trim();
      if (!NAME.test(n)) {
        replace(note, message('error', 'A name is 1 to 100 letters, digits, "_" or "-".'));
        return;
      }
      location.hash = `#/pipelines/${seg(n)}/sql`;
    },
  }, name, h('button.primary#create', { type: 'submit' }, 'New pipeline'));
  replace(main, h('h1', {}, 'Pipelines'), form, note, list);

  let timer = null;
  let stopped = false;
  // Each refresh has a number; only the latest may draw or poll again, so
  // an action during a fetch never starts a second loop or lets an older
  // answer replace a newer one.
  let latest = 0;
  async function refresh() {
    const mine = ++latest;
    clearTimeout(timer);
    try {
      const ps = await api('/pipelines');
      if (stopped || mine !== latest) return;
      replace(list, ps.length === 0
        ? h('p.empty', {}, 'No pipelines yet: name one above and write its SQL.')
        : h('table.grid.pipelines', {},
          h('thead', {}, h('tr', {}, ['Name', 'Status', 'Storage', 'Program', 'Actions'].map((c) => h('th', {}, c)))),
          h('tbody', {}, ps.map(row))));
    } catch (e) {
      if (stopped || mine !== latest) return;
      replace(list, message('error', `Listing pipelines failed: ${e.message}`));
    }
    timer = setTimeout(refresh, 2000);
  }

  function row(p) {
    const buttons = actions(p).map(([label, what]) => h('button', {
      'data-action': what,
      onclick: () => act(p.name, what),
    }, label));
    if (p.deployment_status === 'Stopped') {
      buttons.push(h('button.danger', { 'data-action': 'delete', onclick: () => remove(p.name) }, 'Delete'));
    }
    return h('tr', { 'data-pipeline': p.name },
      h('td', {}, h('a', { href: `#/pipelines/${seg(p.name)}/sql` }, p.name)),
      h('td', {}, badge(p)),
      h('td', {}, p.storage_status || ''),
      h('td', {}, p.program_status || ''),
      h('td', {}, h('div.actions', {}, buttons)));
  }

  async function act(name, what) {
    const question = confirmation(name, what);
    if (question && !confirm(question)) return;
    try {
      if (what === 'delete') await api(`/pipelines/${seg(name)}`, { method: 'DELETE' });
      else await api(`/pipelines/${seg(name)}/${what}`, { method: 'POST' });
      replace(note);
    } catch (e) {
      replace(note, message('error', `${what} ${name}: ${e.message}`));
    }
    refresh();
  }

  function remove(name) {
    if (confirm(`Delete pipeline ${name}? Its program and state are removed.`)) act(name, 'delete');
  }

  refresh();
  return { leave: () => { stopped = true; clearTimeout(timer); } };
}
