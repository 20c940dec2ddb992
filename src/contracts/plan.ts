/**
 * The plan as a graph: explicit dependencies (`dependsOn`), and overlaps of owned paths, which
 * are scheduled one after the other rather than refused. Both follow one order, the topological
 * order of the dependencies with plan order breaking ties, so the two kinds of wait can never
 * form a cycle. Pure: the request's validation and the leader's scheduling both use it.
 */
import { normalizeRepoPath, pathIsUnder } from './names';

/** What the graph needs of a sub-task. */
export interface PlanNode {
  id: string;
  ownedPaths: string[];
  dependsOn?: string[];
}

/**
 * The ids of a dependency cycle in the order they depend on each other, the first repeated at
 * the end ("a → b → a" is `['a', 'b', 'a']`); undefined when there is none. Dependencies on
 * unknown ids are left out: they are refused on their own.
 */
export function findCycle(tasks: readonly PlanNode[]): string[] | undefined {
  const byId = new Map(tasks.map((t) => [t.id, t]));
  const state = new Map<string, 'open' | 'done'>();
  const path: string[] = [];
  const visit = (id: string): string[] | undefined => {
    if (state.get(id) === 'done') return undefined;
    if (state.get(id) === 'open') return [...path.slice(path.indexOf(id)), id];
    state.set(id, 'open');
    path.push(id);
    for (const dep of byId.get(id)?.dependsOn ?? []) {
      if (!byId.has(dep)) continue;
      const cycle = visit(dep);
      if (cycle) return cycle;
    }
    path.pop();
    state.set(id, 'done');
    return undefined;
  };
  for (const t of tasks) {
    const cycle = visit(t.id);
    if (cycle) return cycle;
  }
  return undefined;
}

/**
 * The sub-tasks' ids in dependency order: each after everything it depends on, and otherwise in
 * plan order (the ready sub-task earliest in the plan goes first). A sub-task added later, which
 * nothing depends on, therefore comes after every sub-task already planned. Members of a cycle
 * (refused by validation) and their dependents come last, in plan order.
 */
export function planOrder(tasks: readonly PlanNode[]): string[] {
  const index = new Map(tasks.map((t, i) => [t.id, i]));
  // Kahn's algorithm, taking the ready sub-task earliest in the plan each time: linear in the
  // plan's size rather than a scan of the whole plan per placed sub-task.
  const waitingOn = tasks.map((t) => new Set((t.dependsOn ?? []).filter((d) => index.has(d))).size);
  const dependents = tasks.map(() => [] as number[]);
  tasks.forEach((t, i) => new Set(t.dependsOn ?? []).forEach((d) => index.has(d) && dependents[index.get(d)!].push(i)));
  const placed = new Array<boolean>(tasks.length).fill(false);
  const order: string[] = [];
  let from = 0;
  for (;;) {
    let next = from;
    while (next < tasks.length && (placed[next] || waitingOn[next] > 0)) next++;
    if (next >= tasks.length) break;
    placed[next] = true;
    order.push(tasks[next].id);
    from = next + 1;
    for (const d of dependents[next]) if (--waitingOn[d] === 0 && d < from) from = d;
  }
  return [...order, ...tasks.filter((_, i) => !placed[i]).map((t) => t.id)];
}

/**
 * For each sub-task, the ids of the sub-tasks before it in `order` whose owned paths overlap its
 * own, in that order. Computed once per plan: asked per sub-task and per event, it made the
 * leader's work grow with the square of the plan (issue 19).
 */
export function earlierOverlaps(tasks: readonly PlanNode[], order: readonly string[]): Map<string, string[]> {
  const byId = new Map(tasks.map((t) => [t.id, t.ownedPaths.map(normalizeRepoPath)]));
  const overlaps = (a: string[], b: string[]) =>
    a.some((pa) => b.some((pb) => pathIsUnder(pb, pa) || pathIsUnder(pa, pb)));
  const found = new Map<string, string[]>();
  order.forEach((id, i) => {
    const own = byId.get(id)!;
    const earlier: string[] = [];
    for (let j = 0; j < i; j++) if (overlaps(byId.get(order[j])!, own)) earlier.push(order[j]);
    found.set(id, earlier);
  });
  return found;
}

/**
 * Where two sub-tasks' owned paths overlap: the deeper of the first two paths that do ("src" and
 * "src/routes.ts" overlap in "src/routes.ts"; "." in whatever the other owns). Undefined when
 * they are disjoint.
 */
export function overlapOf(a: PlanNode, b: PlanNode): string | undefined {
  for (const pa of a.ownedPaths.map(normalizeRepoPath)) {
    for (const pb of b.ownedPaths.map(normalizeRepoPath)) {
      if (pathIsUnder(pb, pa)) return pb || '.';
      if (pathIsUnder(pa, pb)) return pa || '.';
    }
  }
  return undefined;
}

/** Problems with the dependencies of `tasks` (unknown ids, a sub-task depending on itself, a cycle), by where they are. */
export function dependencyProblems(tasks: readonly PlanNode[]): { index: number; dep?: number; message: string }[] {
  const known = new Set(tasks.map((t) => t.id));
  const problems: { index: number; dep?: number; message: string }[] = [];
  tasks.forEach((t, index) => {
    const seen = new Set<string>();
    (t.dependsOn ?? []).forEach((d, dep) => {
      if (d === t.id)
        problems.push({ index, dep, message: `"${d}" is this sub-task itself; it cannot depend on itself` });
      else if (!known.has(d))
        problems.push({ index, dep, message: `unknown sub-task "${d}" (known: ${listIds(known)})` });
      else if (seen.has(d)) problems.push({ index, dep, message: `"${d}" is listed twice` });
      seen.add(d);
    });
  });
  const cycle = findCycle(tasks.map((t) => ({ ...t, dependsOn: t.dependsOn?.filter((d) => d !== t.id) })));
  if (cycle) {
    const index = tasks.findIndex((t) => t.id === cycle[0]);
    problems.push({ index, message: `the dependencies form a cycle: ${cycle.join(' → ')}` });
  }
  return problems;
}

function listIds(ids: Set<string>): string {
  const all = [...ids];
  return all.length > 10 ? `${all.slice(0, 10).join(', ')} and ${all.length - 10} more` : all.join(', ');
}
