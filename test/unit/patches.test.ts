/**
 * The patch list (src/workflows/patches.ts) is complete and its ids are the ones in histories:
 * every patched() call takes its id from it, every id a committed history recorded is in it, and
 * no id ever changes.
 */
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { PATCHES } from '../../src/workflows/patches';

const ROOT = path.join(__dirname, '../..');

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const full = path.join(dir, e.name);
    if (e.isDirectory()) return sources(full);
    return e.name.endsWith('.ts') ? [full] : [];
  });
}

/** Every call of `patched` or `deprecatePatch` in src/, with its argument as written. */
function patchCalls(): { file: string; arg: string }[] {
  return sources(path.join(ROOT, 'src')).flatMap((file) => {
    const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true);
    const calls: { file: string; arg: string }[] = [];
    const visit = (node: ts.Node) => {
      if (
        ts.isCallExpression(node) &&
        ts.isIdentifier(node.expression) &&
        ['patched', 'deprecatePatch'].includes(node.expression.text)
      )
        calls.push({ file: path.relative(ROOT, file), arg: node.arguments.map((a) => a.getText(source)).join(', ') });
      ts.forEachChild(node, visit);
    };
    visit(source);
    return calls;
  });
}

/** The patch ids recorded in every committed history (core's `core_patch` markers). */
function recordedIds(): Set<string> {
  const ids = new Set<string>();
  const historyDir = path.join(ROOT, 'test/history');
  for (const release of readdirSync(historyDir)) {
    for (const file of readdirSync(path.join(historyDir, release)).filter((f) => f.endsWith('.json'))) {
      const history = JSON.parse(readFileSync(path.join(historyDir, release, file), 'utf8'));
      for (const event of history.events) {
        const marker = event.markerRecordedEventAttributes;
        if (marker?.markerName !== 'core_patch') continue;
        const data = marker.details['patch-data'].payloads[0].data;
        ids.add(JSON.parse(Buffer.from(data, 'base64').toString('utf8')).id);
      }
    }
  }
  return ids;
}

describe('patches', () => {
  it('every patched() call takes its id from PATCHES', () => {
    const calls = patchCalls();
    expect(calls.length).toBeGreaterThan(0);
    const keys = Object.keys(PATCHES);
    for (const { file, arg } of calls) {
      const key = /^PATCHES\.(\w+)\.id$/.exec(arg)?.[1];
      expect(key, `${file}: patched(${arg})`).toBeDefined();
      expect(keys, `${file}: patched(${arg})`).toContain(key);
    }
  });

  it('every patch listed is used, and says when it came and what runs from before it keep doing', () => {
    const used = new Set(patchCalls().map((c) => c.arg));
    for (const [key, patch] of Object.entries(PATCHES)) {
      expect(used, key).toContain(`PATCHES.${key}.id`);
      // A landing before wave 3; since it, the issue and the wave.
      expect(patch.since, key).toMatch(/landing|^issue \d+ \(wave \d+\)/);
      expect(patch.before.length, key).toBeGreaterThan(20);
    }
  });

  it('the ids are the ones histories hold: never renamed, never removed while runs from before may replay', () => {
    const ids = Object.values(PATCHES).map((p) => p.id);
    expect(new Set(ids).size).toBe(ids.length);
    expect(ids.sort()).toEqual([
      'best-of-n',
      'carry-by-reference',
      'early-stops',
      'host-affinity',
      'integration-sandboxes-kept',
      'living-plan',
      'plan-validated-by-activity',
      'pr-checks',
      'progress-in-background',
      'pull-request-review',
      'pull-requests',
      'request-parsed-by-activity',
      'review-rounds',
      'rollover',
      'run-limits',
      'run-mirror-per-run',
      'salvage-failed-agent-runs',
      'search-attributes',
      'test-evidence',
      'thousand-sub-tasks',
    ]);
    const recorded = recordedIds();
    expect(recorded.size).toBeGreaterThan(0);
    for (const id of recorded) expect(ids, `recorded in test/history`).toContain(id);
  });
});
