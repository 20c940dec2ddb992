/** The host-side git store against real repositories, with the worker's git settings in place. */
import { afterEach, describe, expect, it } from 'vitest';
import { StagingRepo, scrubSecrets } from '../src/gitstore';
import { makeRemote, tempDir } from './helpers';

const saved = { ...process.env };
afterEach(() => {
  for (const k of ['FLOTILLA_GIT_TOKEN', 'GIT_SSH_COMMAND', 'SSH_AUTH_SOCK']) {
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
    remote.cleanup();
  });

  it('masks credentials in error text', () => {
    process.env.FLOTILLA_GIT_TOKEN = 'tok-456';
    expect(scrubSecrets('fatal: https://user:tok-456@example.com/x.git: tok-456 refused')).toBe('fatal: https://***@example.com/x.git: *** refused');
  });
});
