/** Integration: merging each worker's commits onto the base in a sandbox of its own. */
import { BUNDLE_REF, runRef } from '../gitstore';
import { type ActivityDeps, type SandboxRef, openSandbox } from './deps';
import { script, sh } from './exec';

const WORKER_TRAILER = 'Flotilla-Worker';

export type MergeOutcome =
  | { status: 'merged' }
  | { status: 'conflict'; files: string[]; conflictsWith: string[] };

export function integrateActivities(deps: ActivityDeps) {
  return {
    /**
     * Merges one worker's commits into the integration branch with a 3-way merge. A worker that
     * is already merged is left alone, so a retry never merges twice. On conflict the merge is
     * aborted and the report names the files and the earlier workers that changed them.
     */
    async mergeWorker(input: {
      sandbox: SandboxRef;
      runKey: string;
      workerId: string;
      ref: string;
      headSha: string;
      baseSha: string;
      title: string;
    }): Promise<MergeOutcome> {
      const sb = await openSandbox(deps, input.sandbox);
      const already = await sb.exec(`git merge-base --is-ancestor ${sh(input.headSha)} HEAD`, { timeoutMs: 60_000 });
      if (already.exitCode === 0) return { status: 'merged' };
      const staging = await deps.staging();
      const bundle = `${sb.scratch}/${input.workerId}.bundle`;
      await sb.writeFile(bundle, await staging.createBundle(input.ref, input.baseSha));
      const message = `${input.title}\n\n${WORKER_TRAILER}: ${input.workerId}\nFlotilla-Run: ${input.runKey}`;
      const out = await script(
        sb,
        `git fetch -q ${sh(bundle)} ${sh(`${input.ref}:refs/flotilla/workers/${input.workerId}`)}
rm -f ${sh(bundle)}
if git merge -q --no-ff --no-verify -m ${sh(message)} ${sh(`refs/flotilla/workers/${input.workerId}`)} >/dev/null 2>&1; then
  echo MERGED
else
  git -c core.quotepath=off diff --name-only --diff-filter=U | sed 's/^/FILE /'
  git merge --abort
fi`,
        `merging worker ${input.workerId}`,
      );
      if (out.includes('MERGED')) return { status: 'merged' };
      const files = out.split('\n').filter((l) => l.startsWith('FILE ')).map((l) => l.slice(5));
      const owners = await script(
        sb,
        `git log --first-parent --format='%(trailers:key=${WORKER_TRAILER},valueonly)' ${sh(input.baseSha)}..HEAD -- ${files.map(sh).join(' ')}`,
        'finding the workers that touched the conflicting files',
      );
      const conflictsWith = [...new Set(owners.split('\n').map((l) => l.trim()).filter(Boolean))];
      return { status: 'conflict', files, conflictsWith };
    },

    /**
     * Copies the integration branch into the staging repository; returns the integrated SHA and
     * a diffstat (at most 40 lines) for the people who approve the push.
     */
    async exportIntegrated(input: { sandbox: SandboxRef; runKey: string; baseSha: string }): Promise<{
      sha: string;
      ref: string;
      diffstat: string;
    }> {
      const sb = await openSandbox(deps, input.sandbox);
      const bundle = `${sb.scratch}/integrated.bundle`;
      const base = sh(input.baseSha);
      const out = await script(
        sb,
        `git rev-parse HEAD
git diff --stat=100 ${base} HEAD | { head -n 39; tail -n 1; } | awk '!seen[$0]++'`,
        'reading the integrated commit',
      );
      const [head, ...stat] = out.trimEnd().split('\n');
      // The last line is the summary ("3 files changed, ..."); keep it when cutting a long list.
      const diffstat = (stat.length > 40 ? [...stat.slice(0, 38), '...', stat[stat.length - 1]] : stat).join('\n');
      const staging = await deps.staging();
      const ref = runRef(input.runKey, 'integrated');
      if (head === input.baseSha) {
        await staging.setRef(ref, head);
        return { sha: head, ref, diffstat };
      }
      await script(sb, `git update-ref ${BUNDLE_REF} HEAD\ngit bundle create -q ${sh(bundle)} ${BUNDLE_REF} ^${base}`, 'bundling the integrated commits');
      const sha = await staging.importBundle(await sb.readFile(bundle), ref);
      return { sha, ref, diffstat };
    },
  };
}
