/**
 * The test harness's own promises: what a test made is released however it ends, newest first;
 * FLOTILLA_CI_REQUIRE names requirements or refuses, naming the variable.
 */
import { existsSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { releaseAtEnd } from '../support/cleanup';
import { MACHINE_REQUIREMENTS, ciRequired } from '../support/requirements';
import { tempDir } from '../support/temp';

describe('releaseAtEnd', () => {
  const released: string[] = [];
  let made = '';

  it.fails('a test whose assertion fails still releases what it made', () => {
    made = tempDir('harness');
    releaseAtEnd(() => released.push('first'));
    releaseAtEnd(() => released.push('second'));
    expect('the assertion').toBe('failing');
  });

  it('released it once that test ended, newest first', () => {
    expect(released).toEqual(['second', 'first']);
    expect(existsSync(made)).toBe(false);
  });
});

describe('FLOTILLA_CI_REQUIRE', () => {
  it('names nothing when unset, a comma list, or with `all` everything a CI machine has (not e2b)', () => {
    expect(ciRequired('')).toEqual([]);
    expect(ciRequired(' bwrap, hadolint ')).toEqual(['bwrap', 'hadolint']);
    expect(ciRequired('all')).toEqual(MACHINE_REQUIREMENTS);
    expect(MACHINE_REQUIREMENTS).not.toContain('e2b');
    expect(ciRequired('all,e2b')).toContain('e2b');
  });

  it('refuses an unknown name, naming the variable and the names it takes', () => {
    expect(() => ciRequired('bwrap,docker')).toThrow(
      'FLOTILLA_CI_REQUIRE: unknown requirement "docker"; known: all, bwrap, root, netns, docker-compose, hadolint, e2b',
    );
  });
});
