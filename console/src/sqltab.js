// The SQL tab: the program in the editor and the runtime configuration (a
// form of the settings Eddy reads, and the JSON sent). Save (or Ctrl-S) sends the program: `PUT` creates a new pipeline,
// `PATCH` changes an existing one (keeping what it does not name). A program
// that does not check is saved as Feldera saves one (`program_status`
// `SqlError`): its errors, with line and column, are marked in the editor,
// and the pipeline cannot start until a fixed program is saved.

import { h, replace, message } from './dom.js';
import { api, seg } from './api.js';
import { sqlEditor } from './editor.js';
import { runtimeForm } from './runtime.js';

const TEMPLATE = `-- Tables take changes; views stay up to date as they arrive.
CREATE TABLE t (
    id BIGINT NOT NULL PRIMARY KEY,
    name VARCHAR
) WITH ('materialized' = 'true');

CREATE MATERIALIZED VIEW v AS
SELECT name, COUNT(*) AS n
FROM t
GROUP BY name;
`;

export function sqlTab(body, ctx) {
  const d = ctx.descriptor();
  const status = h('div.note#save-note');
  const holder = h('div.editor#sql-editor');
  const save = h('button.primary#save', { onclick: () => doSave() }, d ? 'Save' : 'Create pipeline');
  const dirty = h('span.dirty');
  const config = runtimeForm(d && d.runtime_config);
  replace(body,
    h('div.row', {}, save, dirty, h('span.hint', {}, 'Ctrl-S saves. A running pipeline must be stopped to change.')),
    status, holder,
    h('details.config#runtime', {}, h('summary', {}, 'Runtime configuration'), config.element));
  const editor = sqlEditor(holder, d ? d.program_code : TEMPLATE, {
    onChange: () => { replace(dirty, '● unsaved changes'); },
    onSave: () => doSave(),
  });
  if (!d) replace(dirty, '● unsaved changes');
  showProgramErrors(d);

  function showProgramErrors(desc, after) {
    const msgs = desc && desc.program_error && desc.program_error.sql_compilation
      && desc.program_error.sql_compilation.messages;
    if (msgs && msgs.length) {
      editor.markErrors(msgs);
      const shown = msgs.map((m) => message('error.snippet', m.snippet || m.message));
      if (after) status.append(...shown);
      else replace(status, shown);
    }
  }

  async function doSave() {
    let runtime;
    try {
      runtime = config.value();
    } catch (e) {
      replace(status, message('error', e.message));
      return;
    }
    replace(status, message('info', 'Checking the program…'));
    const exists = ctx.descriptor() !== null;
    try {
      const saved = await api(`/pipelines/${seg(ctx.name)}`, {
        method: exists ? 'PATCH' : 'PUT',
        json: { name: ctx.name, program_code: editor.text(), runtime_config: runtime },
      });
      editor.clearErrors();
      replace(dirty);
      save.textContent = 'Save';
      if (saved && saved.program_status === 'SqlError') {
        replace(status, message('error', exists
          ? 'Saved with errors: the pipeline cannot start until they are fixed.'
          : 'Pipeline created with errors: it cannot start until they are fixed.'));
        showProgramErrors(saved, true);
      } else {
        replace(status, message('ok', exists ? 'Saved.' : 'Pipeline created.'));
      }
      await ctx.refresh();
    } catch (e) {
      const msgs = e.details && e.details.sql_compilation && e.details.sql_compilation.messages;
      if (msgs && msgs.length) {
        editor.markErrors(msgs);
        replace(status, msgs.map((m) => message('error.snippet', m.snippet || m.message)));
      } else {
        replace(status, message('error', `Saving failed: ${e.message}`));
      }
    }
  }

  return {};
}
