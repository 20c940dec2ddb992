/** The package built for a bench, unless dist/ is newer than every source of the build. */
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';

const top = path.join(__dirname, '..');

/**
 * True when the build's last output (dist/workflow-bundle-traced.js, written last by `npm run build`) is
 * newer than every file the build reads: after the suite (whose package test builds) or a bench,
 * CI's smoke run need not spend 20 s building again.
 */
function builtSinceLastChange(): boolean {
  const output = path.join(top, 'dist', 'workflow-bundle-traced.js');
  if (!existsSync(output)) return false;
  const newest = (p: string): number => {
    const st = statSync(p);
    if (!st.isDirectory()) return st.mtimeMs;
    return Math.max(st.mtimeMs, ...readdirSync(p).map((e) => newest(path.join(p, e))));
  };
  const inputs = ['src', 'scripts/bundle-workflows.js', 'tsconfig.json', 'tsconfig.build.json', 'package-lock.json'];
  return inputs.every((i) => !existsSync(path.join(top, i)) || newest(path.join(top, i)) < statSync(output).mtimeMs);
}

/** The worker runs as built: a bench of a stale dist/ would measure other code. */
export function buildUnlessBuilt(): void {
  if (builtSinceLastChange()) console.log('(dist/ is newer than every source of the build: not rebuilt)');
  else execFileSync('npm', ['run', '--silent', 'build'], { cwd: top, stdio: 'pipe' });
}
