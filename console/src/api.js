// The REST client: every call to `/v0` goes through `api()`, which adds
// the API key that the login prompt stored for this browser session and,
// on a 401, asks for the key and tries again.

import { h } from './dom.js';

const KEY = 'eddy-api-key';

/** An answer that was not 2xx: `status`, Eddy's `error_code` and
 * `details` (Feldera's error shape). */
export class ApiError extends Error {
  constructor(status, body) {
    super(body && body.message ? body.message : `HTTP ${status}`);
    this.status = status;
    this.code = body && body.error_code;
    this.details = (body && body.details) || {};
  }
}

export function apiKey() {
  return sessionStorage.getItem(KEY);
}

export function logout() {
  sessionStorage.removeItem(KEY);
}

function headers(extra) {
  const out = Object.assign({}, extra || {});
  const key = apiKey();
  if (key) out.Authorization = `Bearer ${key}`;
  return out;
}

/** Fetches `/v0{path}`; `opts.raw` returns the Response (for streams and
 * downloads) instead of parsed JSON. */
export async function api(path, opts = {}) {
  for (;;) {
    const init = {
      method: opts.method || 'GET',
      headers: headers(opts.json !== undefined ? { 'Content-Type': 'application/json' } : {}),
      signal: opts.signal,
    };
    if (opts.json !== undefined) init.body = JSON.stringify(opts.json);
    else if (opts.body !== undefined) init.body = opts.body;
    const res = await fetch(`/v0${path}`, init);
    if (res.status === 401) {
      await askForKey(apiKey() ? 'That API key was refused.' : null);
      continue;
    }
    if (!res.ok) {
      let body = null;
      try { body = await res.json(); } catch (_) { /* not JSON */ }
      throw new ApiError(res.status, body);
    }
    if (opts.raw) return res;
    const text = await res.text();
    return text ? JSON.parse(text) : null;
  }
}

let pending = null;

/** Shows the login prompt (once, however many calls were refused) and
 * resolves when a key was entered. */
function askForKey(problem) {
  if (pending) return pending;
  pending = new Promise((resolve) => {
    const input = h('input#api-key', { type: 'password', autocomplete: 'current-password', placeholder: 'API key' });
    const form = h('form.login', {
      onsubmit: (e) => {
        e.preventDefault();
        if (!input.value) return;
        sessionStorage.setItem(KEY, input.value);
        overlay.remove();
        pending = null;
        document.dispatchEvent(new Event('eddy-login'));
        resolve();
      },
    },
    h('h2', {}, 'Log in'),
    h('p', {}, 'This server needs its API key (the --api-key it was started with). It is kept for this browser tab only.'),
    problem ? h('p.msg.error', {}, problem) : null,
    input,
    h('button.primary#login', { type: 'submit' }, 'Log in'));
    const overlay = h('div.overlay', {}, form);
    document.body.appendChild(overlay);
    input.focus();
  });
  return pending;
}

/** Reads a stream of lines, calling `onLine` with each one that is not
 * blank (trimmed). */
export async function readTextLines(res, onLine) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    let nl;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, nl).trim();
      buf = buf.slice(nl + 1);
      if (line) onLine(line);
    }
  }
  if (buf.trim()) onLine(buf.trim());
}

/** Reads a newline-delimited JSON stream, calling `onValue` per line. */
export async function readLines(res, onValue) {
  await readTextLines(res, (line) => onValue(JSON.parse(line)));
}

/** Path segment for a name. */
export function seg(name) {
  return encodeURIComponent(name);
}
