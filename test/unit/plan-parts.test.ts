/**
 * A plan in parts (src/contracts/plan-parts.ts) and text in pieces (src/contracts/text.ts),
 * without a server: every part and piece fits its payload, and put back together they are the
 * plan and the text exactly. A run started so: test/e2e/plan-parts.test.ts.
 */
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { runMetadata } from '../../src/client/start';
import { PART_BYTES, digestOf, partsOf, planOf, planPartsProblem } from '../../src/contracts/plan-parts';
import { parseLeaderRequest } from '../../src/contracts/request';
import { pieces } from '../../src/contracts/text';
import { shell, shellRequest } from '../support/requests';

const jsonBytes = (text: string) => Buffer.byteLength(JSON.stringify(text));

describe('plan parts', () => {
  it('packs whole sub-tasks into parts under PART_BYTES that give the plan back in order', () => {
    const plan = Array.from({ length: 1000 }, (_, i) => ({
      id: `t${i}`,
      prompt: `é ${'x'.repeat(i % 300)}`,
      ownedPaths: [`t${i}`],
    }));
    const parts = partsOf(plan);
    expect(parts.length).toBeGreaterThan(3);
    for (const part of parts) expect(Buffer.byteLength(part)).toBeLessThanOrEqual(PART_BYTES);
    expect(planOf(parts)).toEqual(plan);
  });

  it('gives a sub-task larger than a part a part of its own', () => {
    const plan = [{ id: 'a' }, { id: 'big', prompt: 'y'.repeat(PART_BYTES) }, { id: 'c' }];
    expect(partsOf(plan).map((p) => (JSON.parse(p) as { id: string }[]).map((t) => t.id))).toEqual([
      ['a'],
      ['big'],
      ['c'],
    ]);
  });

  it('names a part by the SHA-256 of its UTF-8 text, as sha256sum would', () => {
    const text = '[{"id":"ü"}]';
    expect(digestOf(text)).toBe(createHash('sha256').update(text, 'utf8').digest('hex'));
  });

  it('refuses planParts that name no parts, or come with subTasks, naming the field', () => {
    const digest = digestOf('[]');
    expect(planPartsProblem({})).toBeUndefined();
    expect(planPartsProblem({ planParts: [digest] })).toBeUndefined();
    expect(planPartsProblem({ planParts: [digest, 'abc'] })).toBe(
      'planParts[1]: is not a SHA-256 digest (64 lowercase hex digits)',
    );
    expect(planPartsProblem({ planParts: [] })).toBe('planParts: must name at least one part');
    expect(planPartsProblem({ planParts: 'x' })).toMatch(/^planParts: /);
    expect(planPartsProblem({ planParts: [digest], subTasks: [] })).toMatch(
      /in subTasks or names them in planParts, not both/,
    );
  });

  it('names the part that is not a JSON array', () => {
    expect(() => planOf(['[]', '{"id":1}'])).toThrow('planParts[1]: its text is not a JSON array of sub-tasks');
    expect(() => planOf(['[', '[]'])).toThrow(/^planParts\[0\]: its text is not JSON/);
  });
});

describe('pieces', () => {
  it('cuts text into pieces of at most the given JSON bytes that join back to it, never inside a character', () => {
    const text = `${'a'.repeat(1000)}"\n${'€'.repeat(2000)}${'😀'.repeat(2000)}\u0001`.repeat(20);
    const got = pieces(text, 4096);
    expect(got.join('')).toBe(text);
    for (const piece of got) {
      expect(jsonBytes(piece) - 2).toBeLessThanOrEqual(4096);
      // Half a surrogate pair would not survive UTF-8: the piece is still the same text once encoded.
      expect(Buffer.from(piece, 'utf8').toString('utf8')).toBe(piece);
    }
    expect(got.length).toBeGreaterThan(text.length / 4096);
    expect(pieces('', 10)).toEqual(['']);
  });
});

describe("the Web UI's details of a run", () => {
  it('list the first 50 sub-tasks of a large plan and count the rest, well under one payload', () => {
    const subTasks = Array.from({ length: 1000 }, (_, i) => ({
      id: `t${i}`,
      prompt: `do ${i}\n${'x'.repeat(500)}`,
      ownedPaths: [`t${i}`],
      agent: shell('true'),
    }));
    const request = parseLeaderRequest(shellRequest('/tmp/r.git', subTasks));
    const { staticDetails } = runMetadata(request);
    expect(staticDetails).toContain('- **t49**: do 49');
    expect(staticDetails).not.toContain('**t50**');
    expect(staticDetails).toContain("- … and 950 more (the run's `plan` query lists them all)");
    expect(Buffer.byteLength(staticDetails)).toBeLessThan(8 * 1024);
  });
});
