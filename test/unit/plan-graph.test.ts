/** The plan as a graph: cycles named in order, a stable dependency order, and where owned paths overlap. */
import { describe, expect, it } from 'vitest';
import {
  type PlanNode,
  dependencyProblems,
  earlierOverlaps,
  findCycle,
  overlapOf,
  planOrder,
} from '../../src/contracts/plan';

const node = (id: string, dependsOn: string[] = [], ownedPaths = [id]): PlanNode => ({ id, ownedPaths, dependsOn });

describe('the dependency order', () => {
  it('puts each sub-task after its dependencies, and otherwise keeps plan order', () => {
    const diamond = [node('d', ['b', 'c']), node('c', ['a']), node('b', ['a']), node('a')];
    expect(planOrder(diamond)).toEqual(['a', 'c', 'b', 'd']);
    expect(planOrder([node('x'), node('y'), node('z')])).toEqual(['x', 'y', 'z']);
  });

  it('puts a sub-task added later, which nothing depends on, after every one already planned', () => {
    const plan = [node('slow', ['base']), node('base'), node('other')];
    expect(planOrder([...plan, node('late')])).toEqual([...planOrder(plan), 'late']);
  });

  it('ignores unknown dependencies and puts the members of a cycle last', () => {
    expect(planOrder([node('a', ['ghost']), node('b')])).toEqual(['a', 'b']);
    expect(planOrder([node('a', ['b']), node('b', ['a']), node('c')])).toEqual(['c', 'a', 'b']);
  });
});

describe('cycles', () => {
  it('names the ids on the cycle in order', () => {
    expect(findCycle([node('a', ['b']), node('b', ['c']), node('c', ['a'])])).toEqual(['a', 'b', 'c', 'a']);
    expect(findCycle([node('x'), node('a', ['b']), node('b', ['a'])])).toEqual(['a', 'b', 'a']);
    expect(findCycle([node('a'), node('b', ['a']), node('c', ['a', 'b'])])).toBeUndefined();
  });

  it('reports unknown ids, self-dependencies and a cycle, each where it is', () => {
    expect(dependencyProblems([node('a', ['a', 'z']), node('b', ['c']), node('c', ['b'])])).toEqual([
      { index: 0, dep: 0, message: '"a" is this sub-task itself; it cannot depend on itself' },
      { index: 0, dep: 1, message: 'unknown sub-task "z" (known: a, b, c)' },
      { index: 1, message: 'the dependencies form a cycle: b → c → b' },
    ]);
  });
});

describe('overlapping owned paths', () => {
  it('names the deeper path where two sub-tasks overlap, or nothing when they are disjoint', () => {
    expect(overlapOf(node('api', [], ['src/routes.ts', 'src/api']), node('auth', [], ['src']))).toBe('src/routes.ts');
    expect(overlapOf(node('a', [], ['src/a']), node('b', [], ['src/a/']))).toBe('src/a');
    expect(overlapOf(node('all', [], ['.']), node('b', [], ['docs']))).toBe('docs');
    expect(overlapOf(node('a', [], ['src/a']), node('b', [], ['src/ab']))).toBeUndefined();
  });
});

describe('the graph at 1,000 sub-tasks (issue 19)', () => {
  /** The order as it was first written: the first ready sub-task in plan order, found by a scan per step. */
  function scannedOrder(tasks: PlanNode[]): string[] {
    const known = new Set(tasks.map((t) => t.id));
    const placed = new Set<string>();
    const order: string[] = [];
    const ready = (t: PlanNode) => (t.dependsOn ?? []).every((d) => placed.has(d) || !known.has(d));
    for (let next = tasks.find((t) => ready(t)); next; next = tasks.find((t) => !placed.has(t.id) && ready(t))) {
      placed.add(next.id);
      order.push(next.id);
    }
    return [...order, ...tasks.filter((t) => !placed.has(t.id)).map((t) => t.id)];
  }

  /** A deterministic plan of `n`: each sub-task depends on up to two earlier-numbered ones, some on later ones, some on itself. */
  function tangled(n: number): PlanNode[] {
    let seed = 7;
    const rand = (m: number) => (seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) % m;
    return Array.from({ length: n }, (_, i) => {
      const deps = Array.from({ length: rand(3) }, () => `t${rand(n)}`).filter((d) => d !== `t${i}` || rand(50) === 0);
      return node(`t${i}`, deps, [`src/${rand(n / 4)}`]);
    });
  }

  it('orders as the scan per step did, self-dependencies, cycles and duplicates included', () => {
    for (const n of [1, 5, 40, 300]) {
      const plan = tangled(n);
      expect(planOrder(plan)).toEqual(scannedOrder(plan));
    }
    const dup = [node('b', ['a', 'a']), node('a')];
    expect(planOrder(dup)).toEqual(scannedOrder(dup));
  });

  it("names each sub-task's earlier overlapping sub-tasks as overlapOf does, pair by pair", () => {
    const plan = [...tangled(200), node('root', [], ['.']), node('deep', [], ['src/3/x.ts'])];
    const order = planOrder(plan);
    const found = earlierOverlaps(plan, order);
    const byId = new Map(plan.map((t) => [t.id, t]));
    for (const [i, id] of order.entries()) {
      const expected = order.slice(0, i).filter((e) => overlapOf(byId.get(e)!, byId.get(id)!) !== undefined);
      expect(found.get(id)).toEqual(expected);
    }
  });

  it('orders and relates 1,000 sub-tasks in well under a second', () => {
    const plan = tangled(1000);
    const began = performance.now();
    earlierOverlaps(plan, planOrder(plan));
    expect(performance.now() - began).toBeLessThan(1000);
  });
});
