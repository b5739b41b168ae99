// Bundles the console into crates/eddy-server/console/ (index.html, app.js,
// app.css, favicon.svg, THIRD-PARTY.txt), which the server compiles into its binary.
// Run through scripts/console-build.sh; `--out DIR` writes elsewhere (the
// check that the committed bundle is this build's).
import * as esbuild from 'esbuild';
import { copyFileSync, mkdirSync, readFileSync, writeFileSync, existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const i = process.argv.indexOf('--out');
const out = i > 0 ? process.argv[i + 1] : join(here, '..', 'crates', 'eddy-server', 'console');
mkdirSync(out, { recursive: true });

const common = { bundle: true, minify: true, legalComments: 'none', logLevel: 'warning' };
const js = await esbuild.build({
  ...common,
  entryPoints: [join(here, 'src', 'main.js')],
  outfile: join(out, 'app.js'),
  format: 'iife',
  target: 'es2020',
  metafile: true,
});
await esbuild.build({ ...common, entryPoints: [join(here, 'src', 'style.css')], outfile: join(out, 'app.css') });
for (const f of ['index.html', 'favicon.svg']) copyFileSync(join(here, f), join(out, f));

// The licenses of every package the bundle holds.
const packages = new Set();
for (const input of Object.keys(js.metafile.inputs)) {
  const m = /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(input);
  if (m) packages.add(m[1]);
}
let notice = 'Eddy\'s console bundles these packages (from npm, pinned in console/package-lock.json):\n';
for (const name of [...packages].sort()) {
  const dir = join(here, 'node_modules', name);
  const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
  notice += `\n==== ${name} ${pkg.version} (${pkg.license})\n\n`;
  const file = ['LICENSE', 'LICENSE.md', 'LICENSE.txt'].map((f) => join(dir, f)).find(existsSync);
  notice += file ? readFileSync(file, 'utf8').trim() + '\n' : `License: ${pkg.license}\n`;
}
writeFileSync(join(out, 'THIRD-PARTY.txt'), notice);
