// The runtime configuration as a form: each setting Eddy reads, with what
// it does and its default (an empty field is the default, and is left out
// of what is sent). Settings the form does not know stay in the JSON
// beside it, which always shows what will be sent; editing either updates
// the other.

import { h, replace, message } from './dom.js';

/** The settings: [path, label, kind, default, what it does]. */
export const FIELDS = [
  [['workers'], 'Workers', 'number', '1', 'Shards of each keyed operator, run in parallel (1 to 64).'],
  [['max_buffered_records'], 'Buffered input records', 'number', '100000', 'Input records waiting for a step; producers wait past it.'],
  [['max_rss'], 'Memory budget', 'text', 'none', 'Past it (e.g. 2Gi, 1536Mi), state goes to disk sooner and the block cache is emptied.'],
  [['storage'], 'Storage', 'select:true,false', 'true', 'Large state batches on disk; off keeps all state in memory and cannot checkpoint.'],
  [['fault_tolerance', 'model'], 'Fault tolerance', 'select:exactly_once,at_least_once,none', 'none; exactly_once with other fault-tolerance settings', 'Journaled input, periodic checkpoints and recovery (exactly once: outputs too). Any fault-tolerance setting without a model is exactly_once.'],
  [['fault_tolerance', 'checkpoint_interval_secs'], 'Checkpoint every (s)', 'number', '60', 'Seconds between periodic checkpoints under fault tolerance (1 to 3600).'],
  [['resources', 'memory_mb_max'], 'Memory limit (MiB)', 'number', 'none', 'A quarter of it bounds each ad-hoc query (1024 MiB without it).'],
];

function get(obj, path) {
  return path.reduce((o, k) => (o && typeof o === 'object' ? o[k] : undefined), obj);
}

/** Sets (or, with undefined, removes) the value at `path`. An object
 * emptied by removing its last key goes too, but only then: an empty
 * object the user wrote keeps its meaning (`"fault_tolerance": {}` is
 * exactly once). */
function set(obj, path, value) {
  const [head, ...rest] = path;
  if (!rest.length) {
    if (value === undefined) delete obj[head];
    else obj[head] = value;
    return;
  }
  if (typeof obj[head] !== 'object' || obj[head] === null) {
    if (value === undefined) return;
    obj[head] = {};
  }
  const had = Object.keys(obj[head]).length;
  set(obj[head], rest, value);
  if (had && !Object.keys(obj[head]).length) delete obj[head];
}

/** What a field's text means in the JSON (undefined: left out). */
export function parse(kind, text) {
  const t = text.trim();
  if (t === '') return undefined;
  if (kind === 'number') {
    const n = Number(t);
    if (!Number.isInteger(n) || n < 0) throw new Error(`'${t}' is not a whole number`);
    return n;
  }
  if (kind.startsWith('select:')) {
    if (t === 'true' || t === 'false') return t === 'true';
    return t === 'none' ? null : t;
  }
  return t;
}

function shown(kind, v) {
  if (v === undefined) return '';
  if (v === null) return 'none';
  if (typeof v === 'object') return null; // an object the form cannot show
  return String(v);
}

/** The form and the JSON over `initial`; `value()` is what to send, or
 * throws what is wrong. */
export function runtimeForm(initial) {
  const json = h('textarea#runtime-config', { rows: 6, spellcheck: 'false', value: JSON.stringify(initial || {}, null, 2) });
  const note = h('div.note#runtime-note');
  const inputs = FIELDS.map(([path, label, kind, dflt, help]) => {
    const id = `rc-${path.join('-')}`;
    const input = kind.startsWith('select:')
      ? h(`select#${id}`, { onchange: () => fromForm() },
        h('option', { value: '' }, `default (${dflt})`),
        kind.slice(7).split(',').map((o) => h('option', { value: o }, o)))
      : h(`input#${id}`, { type: 'text', placeholder: `default: ${dflt}`, oninput: () => fromForm() });
    return { path, kind, input, row: h('label.rc', { for: id }, h('span.rc-label', {}, label), input, h('span.hint', {}, help)) };
  });
  json.addEventListener('input', () => toForm());

  function current() {
    const text = json.value.trim();
    const v = text ? JSON.parse(text) : {};
    if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new Error('it must be a JSON object');
    return v;
  }

  /** Shows the JSON's values in the form. */
  function toForm() {
    let v;
    try {
      v = current();
    } catch (e) {
      replace(note, message('error', `The runtime configuration is not JSON: ${e.message}`));
      return;
    }
    replace(note);
    for (const f of inputs) {
      const s = shown(f.kind, get(v, f.path));
      f.input.disabled = s === null;
      f.input.value = s === null ? '' : s;
    }
  }

  /** Writes the form's values into the JSON. */
  function fromForm() {
    let v;
    try {
      v = current();
      // Only what the form changes is written: a setting it shows as its
      // default stays as the JSON has it.
      for (const f of inputs) {
        if (f.input.disabled) continue;
        const value = parse(f.kind, f.input.value);
        if (JSON.stringify(value) !== JSON.stringify(get(v, f.path))) set(v, f.path, value);
      }
    } catch (e) {
      replace(note, message('error', e.message));
      return;
    }
    replace(note);
    json.value = JSON.stringify(v, null, 2);
  }

  toForm();
  return {
    element: h('div.runtime', {}, h('div.rc-form', {}, inputs.map((f) => f.row)), note,
      h('details', {}, h('summary', {}, 'As JSON (with any other settings)'), json)),
    value() {
      try {
        return current();
      } catch (e) {
        throw new Error(`The runtime configuration is not JSON: ${e.message}`);
      }
    },
  };
}
