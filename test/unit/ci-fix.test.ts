/**
 * The host's validation of a CI-fix agent's mapping (activities/ci-fix.ts): every check it was
 * given mapped to a fix or to external with a reason, or the round is refused saying why; and
 * land.checks validated with errors naming the field.
 */
import { describe, expect, it } from 'vitest';
import { MAX_MAPPING_BYTES, validateMapping } from '../../src/activities/ci-fix';
import { parseLeaderRequest } from '../../src/contracts/request';
import { requestProblems, shellRequest, greet } from '../support/requests';

const given = ['ci/test', 'ci/deploy'];

describe('validateMapping', () => {
  it('takes a mapping of every given check to a fix or external, trimmed and clipped', () => {
    const text = JSON.stringify({ 'ci/test': { fix: ' added a test ' }, 'ci/deploy': { external: 'x'.repeat(900) } });
    const v = validateMapping(text, given);
    expect(v).toEqual({
      mapping: { 'ci/test': { fix: 'added a test' }, 'ci/deploy': { external: expect.any(String) } },
    });
    expect(
      ('mapping' in v && (v.mapping['ci/deploy'] as { external: string }).external.length) || 0,
    ).toBeLessThanOrEqual(500);
  });

  it.each([
    ['', /wrote no mapping/],
    ['   \n', /wrote no mapping/],
    ['{not json', /is not JSON/],
    ['[]', /not a JSON object of check names/],
    ['"ci/test"', /not a JSON object of check names/],
    ['null', /not a JSON object of check names/],
    [JSON.stringify({ 'ci/test': { fix: 'a' } }), /leaves check\(s\) unmapped: "ci\/deploy"/],
    [JSON.stringify({ 'ci/test': { fix: 'a' }, 'ci/deploy': { fix: 'b' }, other: { fix: 'c' } }), /not given: "other"/],
    [JSON.stringify({ 'ci/test': { fix: '' }, 'ci/deploy': { fix: 'b' } }), /check "ci\/test": must be/],
    [
      JSON.stringify({ 'ci/test': { fix: 'a', external: 'b' }, 'ci/deploy': { fix: 'b' } }),
      /check "ci\/test": must be/,
    ],
    [JSON.stringify({ 'ci/test': 'fixed', 'ci/deploy': { fix: 'b' } }), /check "ci\/test": must be/],
    [JSON.stringify({ 'ci/test': { because: 'a' }, 'ci/deploy': { fix: 'b' } }), /check "ci\/test": must be/],
    [JSON.stringify({ 'ci/test': { fix: 3 }, 'ci/deploy': { fix: 'b' } }), /check "ci\/test": must be/],
    ['{"__proto__": {"fix": "a"}, "ci/test": {"fix": "a"}, "ci/deploy": {"fix": "b"}}', /not given: "__proto__"/],
  ])('refuses %j with a reason', (text, reason) => {
    const v = validateMapping(text, given);
    expect('problem' in v && v.problem).toMatch(reason);
  });

  it('names at most five unknown checks', () => {
    const many = Object.fromEntries(Array.from({ length: 8 }, (_, i) => [`x${i}`, { fix: 'a' }]));
    const v = validateMapping(JSON.stringify(many), given);
    expect('problem' in v && v.problem).toMatch(/"x4" and 3 more$/);
    expect(MAX_MAPPING_BYTES).toBe(16 * 1024);
  });
});

describe('land.checks', () => {
  const pr = (checks: unknown) =>
    shellRequest('https://github.com/acme/widgets.git', [greet('one')], { land: { kind: 'pr', checks } as never });

  it('defaults: 2 rounds, 60 minutes, every 30 seconds', () => {
    const land = parseLeaderRequest(pr({})).land;
    expect(land).toMatchObject({ kind: 'pr', checks: { rounds: 2, timeoutMinutes: 60, pollSeconds: 30 } });
  });

  it('refuses bad values naming the field', () => {
    expect(requestProblems(pr({ rounds: 11 }))[0]).toMatch(/^land\.checks\.rounds: must be at most 10/);
    expect(requestProblems(pr({ pollSeconds: 0 }))[0]).toMatch(/^land\.checks\.pollSeconds: must be at least 1 second/);
    expect(requestProblems(pr({ wait: true }))[0]).toMatch(/^land\.checks/);
    expect(requestProblems(pr({ fixer: { kind: 'claude-code' } }))).toContainEqual(
      expect.stringMatching(/^sandbox\.network: must be true: the CI fixer runs claude-code/),
    );
  });
});

describe('formatChecks', () => {
  it('shows each check with its attribution, and each round', async () => {
    const { formatChecks } = await import('../../src/cli/format/checks');
    const lines = formatChecks({
      headSha: 'abc',
      waiting: false,
      ended: 'failing only as external: ci/deploy',
      maxRounds: 2,
      checks: [
        { name: 'ci/test', conclusion: 'success', passed: true, required: true },
        { name: 'ci/deploy', conclusion: 'error', passed: false, attribution: { external: 'runner down' } },
      ],
      rounds: [
        {
          round: 1,
          sha: 'a0',
          checks: ['ci/test', 'ci/deploy'],
          subTaskId: 'one',
          outcome: 'pushed',
          message: 'tests passed, pushed abc',
        },
      ],
    });
    expect(lines).toEqual([
      'checks:    on abc: failing only as external: ci/deploy (1 of 2 CI-fix round(s))',
      '  ci/test: success (required)',
      '  ci/deploy: error (external: runner down)',
      '  CI-fix round 1 (ci/test, ci/deploy): pushed — tests passed, pushed abc',
    ]);
  });
});
