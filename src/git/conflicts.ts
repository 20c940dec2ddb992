/**
 * A conflicting merge as the resolver gets it: computed on the host (merge.ts), committed as a
 * commit that is never pushed so a sandbox can check it out, with the files the incoming sub-task
 * touched (all the resolver may change) and the conflicting hunks for its prompt.
 */
import { conflictHunks } from '../contracts/prompts';
import { changedPaths, commitTree, listTree, mergeBase, mergeTrees, readBlob } from './merge';

export type MergeToResolve =
  | { clean: true; tree: string }
  | {
      clean: false;
      /** A commit on `intoSha` whose tree holds the conflicted files, with their markers. */
      conflicted: string;
      files: string[];
      /** What the incoming sub-task changed since the merge base. */
      touched: Set<string>;
      hunks: string;
    };

/** Merges `headSha` into `intoSha` in the repository `dir`; a conflict comes with what a resolver needs. */
export async function mergeToResolve(
  dir: string,
  c: { intoSha: string; headSha: string; at: number },
): Promise<MergeToResolve> {
  const merged = await mergeTrees(dir, c.intoSha, c.headSha);
  if (merged.clean) return merged;
  const conflicted = await commitTree(dir, {
    tree: merged.tree,
    parents: [c.intoSha],
    message: 'conflicted merge (never pushed)',
    at: c.at,
  });
  const touched = new Set(await changedPaths(dir, await mergeBase(dir, c.intoSha, c.headSha), c.headSha));
  const entries = new Map((await listTree(dir, merged.tree)).map((e) => [e.path, e.oid]));
  const hunks: string[] = [];
  for (const file of merged.files) {
    const oid = entries.get(file);
    hunks.push(
      oid ? conflictHunks(file, (await readBlob(dir, oid)).toString('utf8')) : `--- ${file}\n(deleted on one side)`,
    );
  }
  return { clean: false, conflicted, files: merged.files, touched, hunks: hunks.join('\n') };
}
