// Eddy's web console: a page of its own served by `eddy serve` at `/`,
// driving the same `/v0` REST API as every other client. Routes live in the
// URL's fragment: `#/` lists pipelines, `#/pipelines/NAME/TAB` shows one.

import { h, replace } from './dom.js';
import { apiKey, logout } from './api.js';
import { pipelinesPage } from './pipelines.js';
import { pipelinePage } from './pipeline.js';

const root = document.getElementById('app');
let current = null;

function header() {
  return h('header', {},
    h('a.brand', { href: '#/' }, 'Eddy'),
    h('nav', {}, h('a', { href: '#/' }, 'Pipelines'),
      h('a', { href: '/v0/api-doc/openapi.json', target: '_blank', rel: 'noopener' }, 'API')),
    apiKey()
      ? h('button.link#logout', { onclick: () => { logout(); route(); } }, 'Log out')
      : null);
}

function route() {
  if (current && current.leave) current.leave();
  const path = (location.hash.replace(/^#/, '') || '/').split('/').filter(Boolean).map(decodeURIComponent);
  const main = h('main');
  replace(root, header(), main);
  if (path[0] === 'pipelines' && path[1]) current = pipelinePage(main, path[1], path[2] || 'sql');
  else current = pipelinesPage(main);
}

window.addEventListener('hashchange', route);
document.addEventListener('eddy-login', () => {
  const nav = root.querySelector('header');
  if (nav) nav.replaceWith(header());
});
route();
