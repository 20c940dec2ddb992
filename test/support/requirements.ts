/**
 * What some tests need of the machine, beyond Node and git: without it they skip. CI names what
 * its machine must have in FLOTILLA_CI_REQUIRE (a comma list of the names below, or `all`):
 * there a lack fails instead, so a skip cannot pass silently. scripts/setup.sh installs them.
 */
import { spawnSync } from 'node:child_process';
import { it } from 'vitest';

/** Why the machine lacks each requirement, or undefined when it has it. */
const PROBES = {
  /** Bubblewrap can start a sandbox (user namespaces allowed, no FLOTILLA_ISOLATION=none). */
  bwrap: () =>
    process.env.FLOTILLA_ISOLATION === 'none'
      ? 'FLOTILLA_ISOLATION=none is set'
      : spawnSync('bwrap', ['--ro-bind', '/', '/', '--unshare-pid', '--die-with-parent', 'true']).status === 0
        ? undefined
        : 'bubblewrap cannot start a sandbox here',
  /** The tests run as root (to hand out sandbox uids, or drop to another user). */
  root: () => (process.getuid?.() === 0 ? undefined : 'the tests do not run as root'),
  /** Network namespaces can be made (`ip netns`, as root). */
  netns: () =>
    process.getuid?.() !== 0
      ? 'making network namespaces needs root'
      : spawnSync('ip', ['netns', 'list']).status === 0
        ? undefined
        : '`ip netns` does not work here (iproute2 missing?)',
  'docker-compose': () => tool('docker-compose'),
  hadolint: () => tool('hadolint'),
  /** A real E2B account: never on a CI machine, so `all` does not include it. */
  e2b: () => (process.env.E2B_API_KEY ? undefined : 'E2B_API_KEY is not set'),
};

export type Requirement = keyof typeof PROBES;

/** What FLOTILLA_CI_REQUIRE=all requires: everything a CI machine set up by scripts/setup.sh has. */
export const MACHINE_REQUIREMENTS: Requirement[] = ['bwrap', 'root', 'netns', 'docker-compose', 'hadolint'];

function tool(name: string): string | undefined {
  return spawnSync(name, ['--version']).error ? `${name} is not installed` : undefined;
}

/** The requirements FLOTILLA_CI_REQUIRE names; an unknown name is refused, naming the variable. */
export function ciRequired(setting = process.env.FLOTILLA_CI_REQUIRE ?? ''): Requirement[] {
  const names = setting
    .split(',')
    .map((n) => n.trim())
    .filter(Boolean);
  return names.flatMap((name): Requirement[] => {
    if (name === 'all') return MACHINE_REQUIREMENTS;
    if (name in PROBES) return [name as Requirement];
    throw new Error(
      `FLOTILLA_CI_REQUIRE: unknown requirement "${name}"; known: all, ${Object.keys(PROBES).join(', ')}`,
    );
  });
}

const lacks = new Map<Requirement, string | undefined>();

/**
 * Whether the machine has `what`, for `describe.runIf` / `it.skipIf` while a file is collected.
 * When it lacks it and FLOTILLA_CI_REQUIRE names it, a failing test saying why takes the place
 * of the skip.
 */
export function machineHas(what: Requirement): boolean {
  if (!lacks.has(what)) lacks.set(what, PROBES[what]());
  const lack = lacks.get(what);
  if (lack === undefined) return true;
  if (ciRequired().includes(what)) {
    it(`the machine has ${what} (FLOTILLA_CI_REQUIRE)`, () => {
      throw new Error(`FLOTILLA_CI_REQUIRE requires ${what}, but ${lack}`);
    });
  }
  return false;
}
