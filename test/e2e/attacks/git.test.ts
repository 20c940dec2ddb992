/**
 * Attacks on the git boundary by the agent: hooks, config and attributes planted in the
 * workspace, unrelated history, links out of the repository, submodules, and work too large to
 * collect. Real runs: dev server, bubblewrap sandboxes, git; the shell agent attempts each attack.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { TestEnv } from '../../support/env';
import { makeRemote } from '../../support/remotes';
import { shellRequest, subTask } from '../../support/requests';

let env: TestEnv;
beforeAll(async () => {
  env = await TestEnv.start();
});

/** Commits `id/work.txt`, the sub-task's legitimate change. */
const honest = (id: string) =>
  `mkdir -p ${id} && echo 'work of ${id}' > ${id}/work.txt && git add -A && git commit -qm 'work of ${id}'`;

/** The attempts Temporal recorded for `activity` in a worker's history (1 = never retried). */
async function attempts(leaderId: string, workerId: string, activity: string): Promise<number[]> {
  const history = await env.client.workflow.getHandle(`${leaderId}/${workerId}`).fetchHistory();
  const scheduled = new Set<string>();
  const found: number[] = [];
  for (const e of history.events ?? []) {
    if (e.activityTaskScheduledEventAttributes?.activityType?.name === activity) scheduled.add(String(e.eventId));
    const started = e.activityTaskStartedEventAttributes;
    if (started && scheduled.has(String(started.scheduledEventId))) found.push(started.attempt ?? 0);
  }
  return found;
}

describe('git run by Flotilla in a workspace runs nothing the agent planted', () => {
  it('hooks, fsmonitor and filter drivers the agent left do not change what is pushed', async () => {
    const remote = await makeRemote({ 'README.md': '# attacks\n' });
    const base = (await remote.head())!;
    // On any ref update (Flotilla's own update-ref included), swap in a commit touching evil.txt.
    const swapHook = `#!/bin/bash
[ "$1" = committed ] && [ -z "$SWAPPING" ] || exit 0
export SWAPPING=1
echo pwned > evil.txt && git add evil.txt && git commit -qm swapped --no-verify && git update-ref refs/flotilla/export HEAD
`;
    const refTx = [
      honest('reftx'),
      `printf '%s' ${JSON.stringify(swapHook)} > .git/hooks/reference-transaction && chmod +x .git/hooks/reference-transaction`,
      // And an fsmonitor "daemon", which git runs on status/add.
      `printf '#!/bin/bash\\necho pwned > fsmonitor.txt\\n' > .git/fsmon && chmod +x .git/fsmon && git config core.fsmonitor "$PWD/.git/fsmon"`,
    ].join(' && ');
    // Work left uncommitted, so Flotilla commits it: a post-commit hook (found through
    // core.hooksPath) amends that commit, and a clean filter rewrites the file as it is added.
    const postCommit = [
      'mkdir -p postcommit .git/evilhooks',
      `printf '#!/bin/bash\\necho pwned > evil2.txt && git add evil2.txt && git commit -q --amend --no-edit --no-verify\\n' > .git/evilhooks/post-commit`,
      'chmod +x .git/evilhooks/post-commit && git config core.hooksPath "$PWD/.git/evilhooks"',
      `echo '* filter=evil' > postcommit/.gitattributes && git config filter.evil.clean 'echo pwned-by-filter'`,
      `echo 'work of postcommit' > postcommit/work.txt`,
    ].join(' && ');
    // A commondir makes git read its config from a directory the agent prepared, past any
    // rewrite of .git/config; that config defines the filter the file's attributes name.
    const commonDir = [
      'mkdir -p commondir && cp -r .git "$HOME/evil"',
      `git config --file "$HOME/evil/config" filter.evil.clean 'echo pwned-by-commondir'`,
      'echo "$HOME/evil" > .git/commondir',
      `echo '* filter=evil' > commondir/.gitattributes && echo 'work of commondir' > commondir/work.txt`,
    ].join(' && ');
    const end = await env.run(
      shellRequest(remote.url, [
        subTask('reftx', refTx),
        subTask('postcommit', postCommit),
        subTask('commondir', commonDir),
      ]),
    );
    expect(end.failureMessage).toBeUndefined();
    expect(end.result?.outcome).toBe('pushed');
    const files = await remote.files('main');
    expect(files.sort()).toEqual([
      'README.md',
      'commondir/.gitattributes',
      'commondir/work.txt',
      'postcommit/.gitattributes',
      'postcommit/work.txt',
      'reftx/work.txt',
    ]);
    expect(await remote.show('main', 'commondir/work.txt')).toBe('work of commondir\n');
    expect(await remote.show('main', 'postcommit/work.txt')).toBe('work of postcommit\n');
    expect(await remote.show('main', 'reftx/work.txt')).toBe('work of reftx\n');
    expect(await remote.log('main', base)).not.toContain('swapped');
  });
});

/**
 * Every attack runs to its own refusal: one failure does not cancel the others (onFailure:
 * continue), and a refused attempt is not tried again (the agent would only repeat it).
 */
const REPORT_EACH = { onFailure: 'continue', limits: { retries: 0 } } as const;

describe('the staging repository refuses what the policy does not allow', () => {
  it('unrelated history, an amended base commit, a symlink out of the repository, a submodule and a corrupt tree each fail their worker, saying why', async () => {
    const remote = await makeRemote({ 'README.md': '# attacks\n' });
    const base = await remote.head();
    const unrelated = [
      honest('unrelated'),
      'b=$(git branch --show-current)',
      'git checkout -q --orphan stolen && git rm -rqf . && echo secret > stolen.txt && git add stolen.txt && git commit -qm "unrelated root"',
      'git checkout -q "$b" && git merge -q -s ours --allow-unrelated-histories -m "merge it in" stolen',
    ].join(' && ');
    // The base itself rewritten (its file changed, its message too): work that no longer descends from it.
    const amended = `${honest('amended')} && git reset -q --soft HEAD~1 && echo rewritten >> README.md && git add -A && git commit -q --amend -m 'the base, rewritten'`;
    const symlink = `${honest('symlink')} && ln -s /etc/shadow symlink/shadow && git add -A && git commit -qm link`;
    const gitlink = `${honest('gitlink')} && mkdir gitlink/sub && (cd gitlink/sub && git init -q && git -c user.name=x -c user.email=x@x commit -q --allow-empty -m inner) && git add gitlink/sub && git commit -qm sub`;
    // A tree with two entries of the same name, written with --literally, under an honest commit.
    const corrupt = [
      honest('corrupt'),
      'blob=$(echo hi | git hash-object -w --stdin)',
      "bin=$(echo $blob | sed 's/../\\\\x&/g')",
      'bad=$(printf "100644 a\\0${bin}100644 a\\0${bin}" | git hash-object -t tree -w --stdin --literally)',
      'git update-ref HEAD $(git commit-tree $bad -p HEAD -m corrupt)',
    ].join(' && ');
    const end = await env.run(
      shellRequest(
        remote.url,
        [
          subTask('unrelated', unrelated),
          subTask('amended', amended),
          subTask('symlink', symlink),
          subTask('gitlink', gitlink),
          subTask('corrupt', corrupt),
        ],
        REPORT_EACH,
      ),
    );
    expect(end.result?.outcome).not.toBe('pushed');
    const reason = (id: string) => end.result?.workers.find((w) => w.workerId === id);
    expect(reason('unrelated')?.status).toBe('failed');
    expect(reason('unrelated')?.reason).toMatch(/unrelated history: root commit [0-9a-f]{12} \("unrelated root"\)/);
    expect(reason('amended')?.status).toBe('failed');
    expect(reason('amended')?.reason).toMatch(/not descend from/);
    expect(reason('symlink')?.reason).toContain(
      '"symlink/shadow" is a symbolic link to "/etc/shadow", outside the repository',
    );
    expect(reason('gitlink')?.reason).toContain('"gitlink/sub" is a submodule');
    expect(reason('corrupt')?.reason).toContain("the worker's commits: the bundle failed git's integrity check");
    expect(reason('corrupt')?.reason).toContain('duplicateEntries');
    expect(await remote.head()).toBe(base);
  });

  it('a file over the size limit and more files than the limit fail once, not retried, with the reason', async () => {
    const remote = await makeRemote({ 'README.md': '# attacks\n' });
    const base = await remote.head();
    const big = `mkdir big && head -c 5000 /dev/zero > big/blob.bin && git add -A && git commit -qm big`;
    // Backdated, so only the host's check of the imported commits can catch it.
    const hidden = `mkdir hidden && head -c 5000 /dev/zero > hidden/blob.bin && touch -d 2001-01-01 hidden/blob.bin && git add -A && git commit -qm big`;
    const many = `mkdir many && for i in $(seq 1 60); do echo $i > many/f$i; done`;
    const end = await env.run(
      shellRequest(remote.url, [subTask('big', big), subTask('hidden', hidden), subTask('many', many)], {
        ...REPORT_EACH,
        policy: { maxFileBytes: 1000, maxChangedFiles: 50 },
      }),
    );
    expect(end.result?.outcome).not.toBe('pushed');
    const worker = (id: string) => end.result?.workers.find((w) => w.workerId === id);
    expect(worker('big')?.reason).toContain(
      '"big/blob.bin" is 5000 bytes, over the limit of 1000 bytes (policy.maxFileBytes)',
    );
    expect(worker('hidden')?.reason).toContain(
      '"hidden/blob.bin" is 5000 bytes, over the limit of 1000 bytes (policy.maxFileBytes)',
    );
    expect(worker('many')?.reason).toContain('change more than 50 files (policy.maxChangedFiles)');
    for (const id of ['big', 'hidden', 'many']) expect(await attempts(end.workflowId, id, 'collectWork')).toEqual([1]);
    expect(await remote.head()).toBe(base);
  });
});
