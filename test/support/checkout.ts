/**
 * Copies of this checkout for tests that run Flotilla from somewhere else: under a private
 * directory, or where a user other than root can read it (the suite itself may run from a clone
 * under a 0700 directory, which no other user may enter).
 */
import { spawnSync } from 'node:child_process';
import { chmodSync, cpSync, mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';

const ROOT = path.join(__dirname, '../..');

/** What runs Flotilla from the sources: package files, bin/, src/, schema/ and node_modules. */
const ENTRIES = ['package.json', 'package-lock.json', 'tsconfig.json', 'bin', 'src', 'schema'];

/**
 * A copy of the checkout at `dir/flotilla` (mode 0755), node_modules hard-linked where the file
 * system allows (it is over a gigabyte), else copied. The links share their files' modes with
 * this checkout: change a directory's mode in the copy, never a file's.
 */
export function copyCheckout(dir: string): string {
  const checkout = path.join(dir, 'flotilla');
  mkdirSync(checkout, { mode: 0o755 });
  chmodSync(checkout, 0o755);
  for (const entry of ENTRIES) cpSync(path.join(ROOT, entry), path.join(checkout, entry), { recursive: true });
  linkOrCopy(path.join(ROOT, 'node_modules'), path.join(checkout, 'node_modules'));
  return checkout;
}

/** `node` (default: this Node) with the checkout's TypeScript loader: what runs its sources. */
export function checkoutNode(checkout: string, node = process.execPath): string[] {
  return [node, '--require', createRequire(path.join(checkout, 'package.json')).resolve('tsx/cjs')];
}

/** The command that runs the CLI of the checkout at `checkout` from its sources. */
export function checkoutCli(checkout: string, node = process.execPath): string[] {
  return [...checkoutNode(checkout, node), path.join(checkout, 'src/cli/index.ts')];
}

/** A copy of this Node at `dir/node/bin/node`, as an installation of its own (nvm's layout). */
export function copyNode(dir: string): string {
  const bin = path.join(dir, 'node', 'bin');
  mkdirSync(bin, { recursive: true, mode: 0o755 });
  chmodSync(path.dirname(bin), 0o755);
  const node = path.join(bin, 'node');
  linkOrCopy(process.execPath, node);
  return node;
}

/** `to` as `from`: hard links where the file system allows, else a copy. */
export function linkOrCopy(from: string, to: string): void {
  const linked = spawnSync('cp', ['-al', from, to]);
  if (linked.status !== 0) cpSync(from, to, { recursive: true, preserveTimestamps: true });
}
