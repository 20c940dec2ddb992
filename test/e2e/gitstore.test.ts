/** The host-side git store against real repositories, with the worker's git settings in place. */
import { existsSync, rmSync } from 'node:fs';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { defaultDeps } from '../../src/activities/deps';
import { StagingRepo, artifactRef, runRef } from '../../src/git/staging';
import { type ServedStore, fileStore, serveStore } from '../support/git-daemon';
import { CLI, run } from '../support/processes';
import { makeRemote } from '../support/remotes';
import { tempDir } from '../support/temp';

const saved = { ...process.env };
afterEach(() => {
  for (const k of ['FLOTILLA_GIT_TOKEN', 'GIT_SSH_COMMAND', 'SSH_AUTH_SOCK', 'FLOTILLA_STAGING_URL']) {
    if (saved[k] === undefined) delete process.env[k];
    else process.env[k] = saved[k];
  }
});

describe('StagingRepo', () => {
  it('fetches and pushes with a token, an ssh command and an agent socket configured', async () => {
    process.env.FLOTILLA_GIT_TOKEN = 'tok-123';
    process.env.GIT_SSH_COMMAND = 'ssh -o BatchMode=yes';
    process.env.SSH_AUTH_SOCK = '/nonexistent/agent.sock';
    const remote = await makeRemote({ 'a.txt': 'a\n' });
    const staging = await StagingRepo.open(tempDir('staging'));
    const head = await remote.head();
    expect(await staging.remoteBranchSha(remote.url, 'main')).toBe(head);
    expect(await staging.fetchBranch(remote.url, 'main', 'refs/flotilla/t/base')).toBe(head);
    // Pushing what the remote already has at that branch is a success, not a second push.
    expect(await staging.push(remote.url, 'main', head!, head)).toEqual({ outcome: 'pushed', remoteSha: head });
    // A lease on a SHA the branch no longer has is a race, and nothing is pushed.
    const theirs = await remote.advance('a.txt', 'b\n');
    expect(await staging.push(remote.url, 'main', head!, head)).toMatchObject({ outcome: 'raced', remoteSha: theirs });
    expect(await remote.head()).toBe(theirs);
  });
});

describe('StagingRepo with a shared store', () => {
  let served: ServedStore;
  let file: ServedStore;
  beforeAll(async () => {
    [served, file] = await Promise.all([serveStore(), fileStore()]);
  });

  it.each([
    ['git daemon', () => served],
    ['file://', () => file],
  ])('publishes every ref it writes and pulls a run from another host (%s)', async (_name, store) => {
    const { url, refs } = store();
    const remote = await makeRemote({ 'a.txt': 'a\n' });
    const a = await StagingRepo.open(tempDir('host-a'), url);
    const b = await StagingRepo.open(tempDir('host-b'), url);
    const base = await a.fetchBranch(remote.url, 'main', runRef('run-1', 'base'));
    await a.setRef(runRef('run-1', 'integrated'), base);
    await a.setRef(runRef('run-2', 'base'), base);
    // A commit no ref names (a merge computed on A) reaches B through share().
    const tree = (await a.raw(['rev-parse', `${base}^{tree}`])).trim();
    // The staging repository's git reads no user configuration, so the identity is given here.
    const identity = ['-c', 'user.name=Test', '-c', 'user.email=test@example.com'];
    const merge = (await a.raw([...identity, 'commit-tree', tree, '-p', base, '-m', 'merged on A'])).trim();
    await a.share('run-1', merge);

    expect(await b.revParse(runRef('run-1', 'base')), 'nothing before the pull').toBeNull();
    await b.pull('run-1');
    expect(await b.revParse(runRef('run-1', 'base'))).toBe(base);
    expect(await b.revParse(runRef('run-1', 'integrated'))).toBe(base);
    expect(await b.revParse(merge)).toBe(merge);
    expect(await b.revParse(runRef('run-2', 'base')), "another run's refs stay where they are").toBeNull();

    await a.deleteRef(runRef('run-1', 'integrated'));
    expect(await a.revParse(runRef('run-1', 'integrated'))).toBeNull();
    expect(await refs('refs/flotilla/run-1/')).toEqual([runRef('run-1', 'base'), runRef('run-1', `commits/${merge}`)]);
    expect(await a.sharedRefs('refs/flotilla/run-2/')).toEqual([runRef('run-2', 'base')]);
    // Deleting what is gone already is no error (a retried gc, another host's cache).
    await b.deleteRefs([runRef('run-1', 'integrated'), runRef('run-2', 'base')]);
    expect(await refs('refs/flotilla/run-2/')).toEqual([]);
  });

  it('two hosts storing the same log at once both succeed: the one that loses the ref lock finds it published', async () => {
    const hosts = Array.from({ length: 4 }, () => defaultDeps(tempDir('host'), { stagingUrl: served.url }));
    for (let round = 0; round < 5; round++) {
      const content = `the same output, round ${round}\n`;
      const refs = await Promise.all(hosts.map((h) => h.artifacts.put(content)));
      expect(new Set(refs).size).toBe(1);
      expect(await served.refs(artifactRef(refs[0].slice(7)))).toEqual([artifactRef(refs[0].slice(7))]);
    }
  });

  it('makes an artifact written on one host readable on another, streamed through the store', async () => {
    const dataA = tempDir('host-a');
    const dataB = tempDir('host-b');
    const a = defaultDeps(dataA, { stagingUrl: served.url });
    const b = defaultDeps(dataB, { stagingUrl: served.url });
    const put = await a.artifacts.put('a log line\n');
    const writer = await a.artifacts.writer();
    writer.write('streamed ');
    writer.write('output\n');
    const streamed = await writer.close();
    await a.artifacts.publish(streamed);
    rmSync(dataA, { recursive: true, force: true });

    expect((await b.artifacts.get(put)).toString()).toBe('a log line\n');
    expect((await b.artifacts.get(streamed)).toString()).toBe('streamed output\n');
    expect(existsSync(b.artifacts.pathOf(streamed)), "kept in the reading host's cache").toBe(true);
    expect(await served.refs('refs/flotilla/artifacts/')).toEqual(
      expect.arrayContaining([artifactRef(put.slice(7)), artifactRef(streamed.slice(7))]),
    );
    const missing = `sha256:${'0'.repeat(64)}`;
    await expect(b.artifacts.get(missing)).rejects.toThrow(
      `artifact ${missing} is neither on this host nor in the shared store`,
    );
  });

  it('a worker started with a bad FLOTILLA_STAGING_URL stops at once, saying why, without echoing the secret', async () => {
    const r = await run(CLI[0], [...CLI.slice(1), 'worker'], {
      FLOTILLA_HOME: tempDir('data'),
      FLOTILLA_STAGING_URL: 'https://user:secret@store.example.com/staging.git',
      TEMPORAL_ADDRESS: '127.0.0.1:1',
    });
    expect(r.code).not.toBe(0);
    expect(r.err).toContain('FLOTILLA_STAGING_URL must not contain credentials');
    expect(r.err + r.out).not.toContain('secret');
  });
});
