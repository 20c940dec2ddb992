/** Which of git's errors about a remote are for good: those end a run at once, the rest are retried. */
import { describe, expect, it } from 'vitest';
import { permanentRemoteProblem } from '../../src/git/remote';

describe('permanentRemoteProblem', () => {
  it.each([
    [
      "fatal: '/etc' does not appear to be a git repository\nfatal: Could not read from remote repository.",
      "'/etc' does not appear to be a git repository",
    ],
    [
      "remote: Repository not found.\nfatal: repository 'https://github.com/a/b.git/' not found",
      'Repository not found.',
    ],
    [
      "fatal: could not read Username for 'https://git.test': terminal prompts disabled",
      "could not read Username for 'https://git.test': terminal prompts disabled",
    ],
    [
      "fatal: Authentication failed for 'https://git.test/a.git/'",
      "Authentication failed for 'https://git.test/a.git/'",
    ],
    [
      "fatal: unable to access 'https://git.test/a.git/': The requested URL returned error: 403",
      "unable to access 'https://git.test/a.git/': The requested URL returned error: 403",
    ],
    ['git@git.test: Permission denied (publickey).', 'git@git.test: Permission denied (publickey).'],
    ['Host key verification failed.', 'Host key verification failed.'],
    ["fatal: strange hostname '-oProxyCommand=x' blocked", "strange hostname '-oProxyCommand=x' blocked"],
    ["fatal: transport 'ext' not allowed", "transport 'ext' not allowed"],
  ])('%j is for good', (text, line) => expect(permanentRemoteProblem(text)).toBe(line));

  it.each([
    "fatal: unable to access 'https://git.test/a.git/': The requested URL returned error: 502",
    "fatal: unable to access 'https://git.test/a.git/': Could not resolve host: git.test",
    'ssh: connect to host git.test port 22: Connection refused\nfatal: Could not read from remote repository.',
    "fatal: unable to access 'https://git.test/a.git/': Failed to connect to git.test port 443: Connection timed out",
    'error: RPC failed; curl 56 GnuTLS recv error (-54): Error in the pull function.',
  ])('%j may pass, so it is retried', (text) => expect(permanentRemoteProblem(text)).toBeUndefined());
});
