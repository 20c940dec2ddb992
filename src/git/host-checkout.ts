/**
 * A test run's checkout in a local sandbox, made and read by the host alone, without a sandbox
 * command: the files (host-tree.ts), then a fresh `.git` beside them; and after the run, what it
 * changed, read with the host's own index. The sandbox's only command is then the test itself.
 *
 * The `.git` is written by the host's own hands, never by git pointed at the workspace (a `.git`
 * a test left could carry hooks, an fsmonitor or an include that git would obey on the host): the
 * old one is removed first, whatever it is, and the new one holds HEAD at the commit (detached),
 * Flotilla's config, the host's index, the run mirror as alternates (the base's history, read-only)
 * and one pack of what the run added to the base, written by the staging repository. No process
 * of the sandbox runs meanwhile (none outlives its command), so nothing can race these writes.
 */
import { constants as fsConstants } from 'node:fs';
import { copyFile, lchown, lstat, mkdir, open, readdir, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { HostWorkspace } from '../sandbox/types';
import { hostGitEnv } from './env';
import { hostIndex, setHostTree } from './host-tree';
import { git, nulRecords } from './spawn';

/** The repository config of a test run's checkout: the one every Flotilla workspace gets, with the integration's identity. */
const CONFIG = `[core]
\trepositoryformatversion = 0
\tfilemode = true
\tbare = false
\tlogallrefupdates = true
[commit]
\tgpgsign = false
[user]
\tname = Flotilla integration
\temail = flotilla@localhost
`;

export interface HostCheckout {
  /** The commit to check out, in the staging repository. */
  sha: string;
  /** The run's base: its history is in the run mirror, so only what lies past it is packed. */
  baseSha: string;
  /** The run mirror's objects directory as the sandbox sees it (its alternates). */
  alternates: string;
}

/**
 * Makes the workspace a fresh checkout of `c.sha`: its files exactly the commit's (writing only
 * what differs from what it holds), and a new `.git` at that commit whose index is the host's,
 * so the sandbox's git sees a clean tree without reading it.
 */
export async function checkoutOnHost(hw: HostWorkspace, stagingDir: string, c: HostCheckout): Promise<void> {
  await setHostTree(hw, stagingDir, c.sha);
  await freshGitDir(hw, stagingDir, c);
}

async function freshGitDir(hw: HostWorkspace, stagingDir: string, c: HostCheckout): Promise<void> {
  const gitDir = path.join(hw.dir, '.git');
  // Whatever the last command left there (a link, a file, hooks) goes unread.
  await rm(gitDir, { recursive: true, force: true });
  // One level at a time: a workspace that was destroyed meanwhile is not made again.
  for (const dir of ['', 'objects', 'objects/info', 'objects/pack', 'refs', 'refs/heads', 'refs/tags', 'refs/flotilla'])
    await mkdir(path.join(gitDir, dir));
  const files: [string, string][] = [
    ['HEAD', `${c.sha}\n`],
    ['config', CONFIG],
    ['objects/info/alternates', `${c.alternates}\n`],
    ['refs/flotilla/base', `${c.baseSha}\n`],
  ];
  for (const [name, text] of files) await writeFile(path.join(gitDir, name), text, { flag: 'wx' });
  if (c.sha !== c.baseSha) {
    // What the run made past the base (merges, sub-tasks' commits, their files): one pack, and its index.
    const pack = path.join(gitDir, 'objects', 'pack', 'pack');
    await git(['pack-objects', '--revs', '-q', pack], {
      repo: stagingDir,
      env: hostGitEnv(),
      input: `${c.sha}\n^${c.baseSha}\n`,
    });
  }
  await copyFile(hostIndex(hw), path.join(gitDir, 'index'));
  await handOverGitDir(hw, gitDir);
}

/** Gives the sandbox's uid the `.git` just written (its git writes its index and objects there). */
async function handOverGitDir(hw: HostWorkspace, gitDir: string): Promise<void> {
  const uid = hw.uid;
  if (uid === undefined || uid === process.getuid?.()) return;
  const walk = async (dir: string): Promise<void> => {
    await lchown(dir, uid, uid);
    for (const entry of await readdir(dir, { withFileTypes: true })) {
      const at = path.join(dir, entry.name);
      if (entry.isDirectory()) await walk(at);
      else await lchown(at, uid, uid);
    }
  };
  await walk(gitDir);
}

/** What a test run did to its checkout, as the host reads it after the run. */
export interface TestRunTrace {
  /** Where HEAD points now (a commit), or undefined when it cannot be read (`.git` gone or mangled). */
  head: string | undefined;
  /** Paths that differ from the commit checked out: untracked (not ignored), modified or deleted. */
  changed: string[];
}

/**
 * What the test run changed in the workspace, read with the host's index (which no sandbox
 * process can touch), and where it left HEAD, read from `.git` as plain files (never by git).
 */
export async function traceTestRun(hw: HostWorkspace, stagingDir: string): Promise<TestRunTrace> {
  const env = { ...hostGitEnv(), GIT_WORK_TREE: hw.dir, GIT_INDEX_FILE: hostIndex(hw) };
  const listed = await git(['ls-files', '-z', '--others', '--exclude-standard', '--modified', '--deleted'], {
    repo: stagingDir,
    env,
  });
  return { head: await headOf(hw.dir), changed: [...new Set(nulRecords(listed.stdout))].sort() };
}

const OBJECT_ID = /^[0-9a-f]{40}(?:[0-9a-f]{24})?$/;
const REF_NAME = /^refs\/(?:[A-Za-z0-9_.-]+\/)*[A-Za-z0-9_.-]+$/;

/** The commit HEAD names: detached, or through a loose branch ref (`git switch -c` at a test's hands). */
async function headOf(workspace: string): Promise<string | undefined> {
  const gitDir = path.join(workspace, '.git');
  const head = await smallFile(gitDir, 'HEAD');
  if (head === undefined) return undefined;
  if (OBJECT_ID.test(head)) return head;
  const ref = /^ref: (.+)$/.exec(head)?.[1];
  if (!ref || !REF_NAME.test(ref) || ref.split('/').includes('..')) return undefined;
  const target = await smallFile(gitDir, ref);
  return target && OBJECT_ID.test(target) ? target : undefined;
}

/**
 * The trimmed text of a small regular file at `rel` under `dir`, or undefined: every component
 * must be a real directory and the file a regular one (never a link the test planted, which
 * would have the host read some other file).
 */
async function smallFile(dir: string, rel: string): Promise<string | undefined> {
  let at = dir;
  for (const part of ['', ...rel.split('/').slice(0, -1)]) {
    at = path.join(at, part);
    const st = await lstat(at).catch(() => undefined);
    if (!st?.isDirectory()) return undefined;
  }
  const file = await open(path.join(dir, rel), fsConstants.O_RDONLY | fsConstants.O_NOFOLLOW).catch(() => undefined);
  if (!file) return undefined;
  try {
    if (!(await file.stat()).isFile()) return undefined;
    const buf = Buffer.alloc(256);
    const { bytesRead } = await file.read(buf, 0, buf.length, 0);
    return buf.subarray(0, bytesRead).toString('utf8').trim();
  } finally {
    await file.close();
  }
}
