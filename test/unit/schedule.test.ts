/**
 * The living plan's schedule: what may start, why the rest waits, and what a failure, a
 * cancellation or a retry does to the sub-tasks that depend on it.
 */
import { describe, expect, it } from 'vitest';
import type { SubTask } from '../../src/contracts/request';
import { Schedule } from '../../src/workflows/leader/schedule';

const task = (id: string, fields: Partial<SubTask> = {}): SubTask => ({
  id,
  prompt: `do ${id}`,
  ownedPaths: [id],
  ...fields,
});
const ids = (s: Schedule) => s.ready().map((e) => e.task.id);
const integrate = (s: Schedule, id: string) => (s.get(id)!.state = 'integrated');
const start = (s: Schedule, id: string) => Object.assign(s.get(id)!, { state: 'running', attempts: 1 });

describe('a diamond', () => {
  const diamond = () =>
    new Schedule(
      [
        task('a'),
        task('b', { dependsOn: ['a'] }),
        task('c', { dependsOn: ['a'] }),
        task('d', { dependsOn: ['b', 'c'] }),
      ],
      2,
    );

  it('starts b and c only once a is integrated, and d once both are', () => {
    const s = diamond();
    expect(ids(s)).toEqual(['a']);
    expect(s.waits(s.get('b')!)).toBe('waits for a (dependency)');
    expect(s.waits(s.get('d')!)).toBe('waits for b, c (dependencies)');
    start(s, 'a');
    expect(ids(s)).toEqual([]);
    integrate(s, 'a');
    expect(ids(s)).toEqual(['b', 'c']);
    integrate(s, 'b');
    expect(s.waits(s.get('d')!)).toBe('waits for c (dependency)');
    integrate(s, 'c');
    expect(ids(s)).toEqual(['d']);
    expect(s.predecessors(s.get('d')!).map((p) => [p.entry.task.id, p.because])).toEqual([
      ['b', 'a dependency'],
      ['c', 'a dependency'],
    ]);
  });

  it('drops what depends on a sub-task that failed for good, and brings it back when that one is retried', () => {
    const s = diamond();
    start(s, 'a');
    expect(s.attemptFailed(s.get('a')!, 'exit 1')).toBe(true);
    expect(ids(s)).toEqual(['a']);
    start(s, 'a');
    s.get('a')!.attempts = 2;
    expect(s.attemptFailed(s.get('a')!, 'exit 1 again')).toBe(false);
    expect(s.dropDependents('a', 'a failed').map((e) => e.task.id)).toEqual(['b', 'd', 'c']);
    expect(s.settled()).toBe(true);
    expect(s.retry(s.get('a')!).back.map((e) => e.task.id)).toEqual(['b', 'c', 'd']);
    expect(ids(s)).toEqual(['a']);
    expect(s.get('a')!.allowance).toBe(3);
  });

  it('keeps dropped, for the other one, what also depends on a second sub-task that has ended, so nothing waits for good', () => {
    const s = new Schedule(
      [task('x'), task('y'), task('both', { dependsOn: ['x', 'y'] }), task('next', { dependsOn: ['both'] })],
      1,
    );
    for (const id of ['x', 'y']) {
      start(s, id);
      s.attemptFailed(s.get(id)!, 'exit 9');
      s.dropDependents(id, `its dependency ${id} failed`);
    }
    expect([s.get('both')!.droppedFor, s.get('next')!.droppedFor]).toEqual(['x', 'x']);
    const { back, still } = s.retry(s.get('x')!);
    expect(back).toEqual([]);
    expect(still.map((e) => [e.task.id, e.state, e.reason, e.droppedFor])).toEqual([
      ['both', 'dropped', 'its dependency y failed', 'y'],
      ['next', 'dropped', 'its dependency both was dropped', 'y'],
    ]);
    integrate(s, 'x');
    expect(s.settled()).toBe(true);
    expect(s.retry(s.get('y')!).back.map((e) => e.task.id)).toEqual(['both', 'next']);
  });
});

describe('why a sub-task waits', () => {
  it('stays one short line however many dependencies, or however long the path, a hostile plan gives', () => {
    const deps = Array.from({ length: 100 }, (_, i) => `dep-${i}-${'x'.repeat(50)}`);
    const long = `src/${'p'.repeat(5000)}`;
    const s = new Schedule(
      [
        ...deps.map((d) => task(d)),
        task('many', { dependsOn: deps }),
        task('a', { ownedPaths: [long] }),
        task('b', { ownedPaths: [long] }),
      ],
      1,
    );
    expect(s.waits(s.get('many')!)).toBe(`waits for ${deps.slice(0, 5).join(', ')} and 95 more (dependencies)`);
    expect(s.waits(s.get('b')!)).toMatch(/^waits for a: overlapping src\/p+… \(\+\d+ chars\)$/);
    expect(s.waits(s.get('b')!)!.length).toBeLessThan(250);
  });
});

describe('overlapping owned paths', () => {
  it('never run at once: the later one in the plan waits until the earlier one has settled, then builds on it', () => {
    const s = new Schedule(
      [task('api', { ownedPaths: ['src/routes.ts', 'src/api'] }), task('auth', { ownedPaths: ['src'] }), task('docs')],
      1,
    );
    expect(ids(s)).toEqual(['api', 'docs']);
    expect(s.waits(s.get('auth')!)).toBe('waits for api: overlapping src/routes.ts');
    expect(s.startsFromHead(s.get('auth')!)).toBe(true);
    expect(s.startsFromHead(s.get('docs')!)).toBe(false);
    start(s, 'api');
    s.attemptFailed(s.get('api')!, 'broken');
    expect(s.get('api')!.state).toBe('failed');
    // A failed predecessor releases the wait, but gives nothing to build on.
    expect(ids(s)).toEqual(['auth', 'docs']);
    expect(s.predecessors(s.get('auth')!)).toEqual([]);
  });

  it('follow the dependency order, so waits for overlaps and for dependencies never form a cycle', () => {
    // "first" is first in the plan but depends on "second": second goes first, and first waits for it.
    const s = new Schedule([task('first', { dependsOn: ['second'] }), task('second', { ownedPaths: ['first'] })], 1);
    expect(ids(s)).toEqual(['second']);
    integrate(s, 'second');
    expect(ids(s)).toEqual(['first']);
    expect(s.predecessors(s.get('first')!).map((p) => p.because)).toEqual(['a dependency']);
  });

  it('puts a sub-task added to the running plan after every one already planned that it overlaps', () => {
    const s = new Schedule([task('api'), task('web')], 1);
    start(s, 'api');
    const late = s.add(task('late', { ownedPaths: ['api/x.ts'] }));
    expect(s.waits(late)).toBe('waits for api: overlapping api/x.ts');
    integrate(s, 'api');
    expect(ids(s)).toEqual(['web', 'late']);
    expect(s.predecessors(late).map((p) => [p.entry.task.id, p.because])).toEqual([['api', 'it also owns api/x.ts']]);
  });
});

describe('a plan of 1,000 sub-tasks (issue 19)', () => {
  /** The leader's loop without Temporal: each event starts what fits under 256 and shows why the rest wait. */
  function drive(n: number): number {
    const tasks = Array.from({ length: n }, (_, i) =>
      task(`t${i}`, { ownedPaths: [`src/${i % (n / 2)}`], ...(i % 10 === 9 && { dependsOn: [`t${i - 1}`] }) }),
    );
    const s = new Schedule(tasks, 2);
    const running: string[] = [];
    let events = 0;
    while (!s.settled()) {
      for (let next = s.firstReady(); next && running.length < 256; next = s.firstReady()) {
        start(s, next.task.id);
        running.push(next.task.id);
      }
      for (const e of s.all()) if (e.state === 'waiting') s.waits(e);
      integrate(s, running.shift()!);
      events++;
    }
    return events;
  }

  it('settles with work per event that does not grow with the square of the plan', () => {
    const began = performance.now();
    expect(drive(1000)).toBe(1000);
    // Each event looked at every earlier sub-task of every waiting one before: minutes at 1,000.
    expect(performance.now() - began).toBeLessThan(3000);
  });
});
