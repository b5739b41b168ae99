// Element building without innerHTML: every string that came from the
// server (names, rows, error messages) becomes a text node, so nothing a
// pipeline holds can run as script in the console.

/** `h('div#id.card', {onclick}, child, …)`: an element with the id and
 * classes the tag names, attributes and listeners from `attrs`, and children
 * (strings become text nodes; null and false are skipped). */
export function h(tag, attrs, ...children) {
  const parts = tag.split(/(?=[.#])/);
  const name = parts[0].startsWith('.') || parts[0].startsWith('#') ? 'div' : parts.shift();
  const el = document.createElement(name);
  const classes = [];
  for (const p of parts) {
    if (p[0] === '#') el.id = p.slice(1);
    else classes.push(p.slice(1));
  }
  if (classes.length) el.className = classes.join(' ');
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'value') el.value = v;
    else if (k === 'checked') el.checked = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
}

/** Replaces every child of `el`. */
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** A cell's text: SQL NULL is shown as `NULL` (styled apart), nested values
 * as JSON. */
export function cellText(v) {
  if (v === null || v === undefined) return null;
  if (typeof v === 'object') return JSON.stringify(v);
  return String(v);
}

/** A `<td>` for a value. */
export function cell(v) {
  const t = cellText(v);
  return t === null ? h('td.null', {}, 'NULL') : h('td', {}, t);
}

/** A table of `rows` (arrays of values) under `columns`. */
export function grid(columns, rows, rowClass) {
  return h('table.grid', {},
    h('thead', {}, h('tr', {}, columns.map((c) => h('th', {}, c)))),
    h('tbody', {}, rows.map((r, i) => {
      const tr = h('tr', {}, r.map(cell));
      const cls = rowClass && rowClass(i);
      if (cls) tr.className = cls;
      return tr;
    })));
}

/** A message box: `kind` is `error`, `ok` or `info`. */
export function message(kind, text) {
  return h(`div.msg.${kind}`, { role: kind.startsWith('error') ? 'alert' : 'status' }, text);
}
