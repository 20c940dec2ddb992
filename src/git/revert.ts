/**
 * Undoing a running agent's changes outside its paths (policy.outOfScope: revert): each path is
 * put back as the seed has it, or removed when the seed has none, in the working tree only. The
 * paths come from the host (scope.ts, on a checkpoint in staging), never from the sandbox.
 *
 * It runs beside the agent, so, like a checkpoint, it uses a scratch repository of its own (the
 * agent's objects as alternates, an index of its own): the agent's config, filters and index are
 * neither read nor touched. What the agent staged or committed there is undone by the work's
 * collection, which commits the working tree as it is.
 */
import { type Workspace, sh } from './workspace';

/** Writes the seed's version of every path in `paths` over the working tree, or removes the path. */
export async function revertPaths(ws: Workspace, c: { baseSha: string; paths: readonly string[] }): Promise<void> {
  if (c.paths.length === 0) return;
  const at = (name: string) => sh(`${ws.sb.scratch}/revert.${name}`);
  const list = `${ws.sb.scratch}/revert.paths`;
  await ws.sb.writeFile(list, c.paths.map((p) => `${p}\0`).join(''));
  await ws.script(
    `if [ -L .git ] || [ ! -d .git ]; then echo "the workspace's .git is not a directory" >&2; exit 90; fi
rm -rf ${at('git')} ${at('index')}
git init -q --bare ${at('git')}
git --git-dir=${at('git')} config core.bare false
echo "$PWD/.git/objects" > ${sh(`${ws.sb.scratch}/revert.git/objects/info/alternates`)}
export GIT_DIR=${at('git')} GIT_WORK_TREE="$PWD" GIT_INDEX_FILE=${at('index')}
git read-tree ${sh(c.baseSha)}
while IFS= read -r -d '' p; do
  if git ls-files --error-unmatch -- ":(literal)$p" >/dev/null 2>&1; then
    rm -rf -- "$p"
    git checkout-index -f -- "$p"
  else
    rm -f -- "$p"
  fi
done < ${sh(list)}
rm -rf ${at('git')} ${at('index')} ${sh(list)}`,
    'reverting paths outside the sub-task',
    { beside: true },
  );
}
