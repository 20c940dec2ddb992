/** The plan as a graph: cycles named in order, a stable dependency order, and where owned paths overlap. */
import { describe, expect, it } from 'vitest';
import { type PlanNode, dependencyProblems, findCycle, overlapOf, planOrder } from '../../src/contracts/plan';

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
