// The SQL editor: CodeMirror 6 with SQL highlighting, line numbers, undo
// history, bracket matching and a lint gutter in which a program error from
// `PUT` is marked at its line and column. No autocompletion and no closing
// of brackets: what is typed is what is saved.

import { EditorState } from '@codemirror/state';
import {
  EditorView, keymap, lineNumbers, highlightActiveLine, highlightActiveLineGutter,
  drawSelection, highlightSpecialChars,
} from '@codemirror/view';
import { defaultKeymap, history, historyKeymap, indentWithTab } from '@codemirror/commands';
import {
  syntaxHighlighting, defaultHighlightStyle, bracketMatching, indentOnInput,
} from '@codemirror/language';
import { lintGutter, setDiagnostics } from '@codemirror/lint';
import { sql, PostgreSQL } from '@codemirror/lang-sql';

/** An editor in `parent` holding `doc`; `onChange` hears every edit,
 * `onSave` Ctrl-S / Cmd-S. */
export function sqlEditor(parent, doc, { onChange, onSave } = {}) {
  const view = new EditorView({
    parent,
    state: EditorState.create({
      doc,
      extensions: [
        lineNumbers(),
        highlightActiveLineGutter(),
        highlightSpecialChars(),
        history(),
        drawSelection(),
        indentOnInput(),
        syntaxHighlighting(defaultHighlightStyle, { fallback: true }),
        bracketMatching(),
        highlightActiveLine(),
        lintGutter(),
        sql({ dialect: PostgreSQL }),
        keymap.of([
          { key: 'Mod-s', preventDefault: true, run: () => { if (onSave) onSave(); return true; } },
          ...defaultKeymap, ...historyKeymap, indentWithTab,
        ]),
        EditorView.updateListener.of((u) => { if (u.docChanged && onChange) onChange(); }),
        EditorView.theme({ '&': { height: '100%' }, '.cm-scroller': { overflow: 'auto' } }),
      ],
    }),
  });
  return {
    view,
    text: () => view.state.doc.toString(),
    setText: (text) => view.dispatch({ changes: { from: 0, to: view.state.doc.length, insert: text } }),
    /** Marks `messages` (Feldera's `sql_compilation.messages`: 1-based
     * `start_line_number`, `start_column`, `end_*`) in the text. */
    markErrors(messages) {
      const doc = view.state.doc;
      const pos = (line, col) => {
        const l = doc.line(Math.min(Math.max(line || 1, 1), doc.lines));
        return Math.min(l.from + Math.max((col || 1) - 1, 0), l.to);
      };
      const diagnostics = (messages || []).map((m) => {
        const from = pos(m.start_line_number, m.start_column);
        let to = pos(m.end_line_number || m.start_line_number, m.end_column || m.start_column);
        if (to <= from) {
          // Mark the word that starts at the position (or the line's end).
          const line = doc.lineAt(from);
          const rest = line.text.slice(from - line.from);
          const word = /^[\w"$.]+/.exec(rest);
          to = word ? from + word[0].length : Math.max(line.to, from);
        }
        return { from, to, severity: m.warning ? 'warning' : 'error', message: m.message };
      });
      view.dispatch(setDiagnostics(view.state, diagnostics));
      if (diagnostics.length) {
        view.dispatch({ selection: { anchor: diagnostics[0].from }, scrollIntoView: true });
      }
    },
    clearErrors() {
      view.dispatch(setDiagnostics(view.state, []));
    },
  };
}
