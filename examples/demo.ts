/**
 * `npm run demo`: the whole of Flotilla on one machine. Builds a small sample project with a
 * bare "remote", starts the embedded Temporal server and a worker, runs a leader with three
 * shell-agent sub-tasks, shows progress, and prints the pushed commit and the Web UI address.
 *
 *   npm run demo             run it and stop the embedded server at the end
 *   npm run demo -- --keep   keep the server (and its Web UI) running afterwards
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { DefaultLogger, NativeConnection, Runtime } from '@temporalio/worker';
import { formatRunEnd } from '../src/cli/format/run-end';
import { awaitRun, newRunId, startRun } from '../src/client';
import { dataDir } from '../src/config/settings';
import { type LeaderRequest, parseLeaderRequest } from '../src/contracts/request';
import { ensureTemporal, workflowUrl } from '../src/temporal/server';
import { warnIfUnisolated } from '../src/temporal/preflight';
import { createFlotillaWorker } from '../src/temporal/worker';
import { type RunStatus, statusQuery } from '../src/contracts/messages';

const SAMPLE: Record<string, string> = {
  'package.json':
    JSON.stringify({ name: 'textkit', version: '1.0.0', scripts: { test: 'node --test' } }, null, 2) + '\n',
  'README.md': '# textkit\n\nSmall string helpers.\n',
  'src/index.js': "module.exports = { shout: (s) => s.toUpperCase() + '!' };\n",
  'test/index.test.js':
    "const test = require('node:test');\nconst assert = require('node:assert');\nconst { shout } = require('../src/index');\n" +
    "test('shout', () => assert.strictEqual(shout('hi'), 'HI!'));\n",
};

/** What each scripted "agent" writes: a module and its test, as a coding agent would. */
const FEATURES = [
  {
    id: 'slugify',
    prompt: 'Add src/slugify.js exporting slugify(text): lower-case words joined by "-", with a test.',
    module: "module.exports = (s) => s.trim().toLowerCase().replace(/[^a-z0-9]+/g, '-').replace(/^-|-$/g, '');\n",
    test: "assert.strictEqual(require('../src/slugify')('Hello, World!'), 'hello-world')",
  },
  {
    id: 'titlecase',
    prompt: 'Add src/titlecase.js exporting titlecase(text): every word capitalised, with a test.',
    module: 'module.exports = (s) => s.replace(/\\b\\w/g, (c) => c.toUpperCase());\n',
    test: "assert.strictEqual(require('../src/titlecase')('a tale of two cities'), 'A Tale Of Two Cities')",
  },
  {
    id: 'wordcount',
    prompt: 'Add src/wordcount.js exporting wordcount(text): the number of words, with a test.',
    module: 'module.exports = (s) => (s.match(/\\S+/g) || []).length;\n',
    test: "assert.strictEqual(require('../src/wordcount')(' one two  three '), 3)",
  },
];

function git(cwd: string, ...args: string[]): string {
  return execFileSync('git', args, { cwd, encoding: 'utf8' }).trim();
}

/** A shell command that plays the agent: writes the files, commits, and says what it did. */
function scriptedAgent(f: (typeof FEATURES)[number]): string {
  const testFile =
    "const test = require('node:test');\nconst assert = require('node:assert');\n" +
    `test('${f.id}', () => ${f.test});\n`;
  const b64 = (s: string) => Buffer.from(s).toString('base64');
  return [
    'echo "agent: reading $FLOTILLA_PROMPT_FILE"',
    `echo ${b64(f.module)} | base64 -d > src/${f.id}.js`,
    `echo ${b64(testFile)} | base64 -d > test/${f.id}.test.js`,
    'sleep 1',
    `git add -A && git commit -qm "Add ${f.id}"`,
    `echo "agent: committed src/${f.id}.js and its test"`,
  ].join(' && ');
}

function buildSample(root: string): string {
  const work = path.join(root, 'work');
  const remote = path.join(root, 'remote.git');
  for (const [file, content] of Object.entries(SAMPLE)) {
    mkdirSync(path.dirname(path.join(work, file)), { recursive: true });
    writeFileSync(path.join(work, file), content);
  }
  git(work, 'init', '-q', '-b', 'main');
  git(work, '-c', 'user.name=Demo', '-c', 'user.email=demo@example.com', 'add', '.');
  git(work, '-c', 'user.name=Demo', '-c', 'user.email=demo@example.com', 'commit', '-qm', 'textkit: initial');
  git(root, 'clone', '-q', '--bare', work, remote);
  return remote;
}

function demoRequest(remote: string): LeaderRequest {
  return parseLeaderRequest({
    objective: 'Grow textkit by three string helpers, each with tests',
    repo: { url: remote, baseRef: 'main' },
    testCmd: 'node --test',
    subTasks: FEATURES.map((f) => ({
      id: f.id,
      prompt: f.prompt,
      ownedPaths: [`src/${f.id}.js`, `test/${f.id}.test.js`],
      agent: { kind: 'shell', command: scriptedAgent(f) },
    })),
    limits: { maxParallel: 3 },
  });
}

/** Prints each change of phase and sub-task state, once. */
function progressPrinter() {
  const seen = new Map<string, string>();
  return (s: RunStatus) => {
    const report = (key: string, value: string, line: string) => {
      if (seen.get(key) === value) return;
      seen.set(key, value);
      console.log(line);
    };
    for (const w of s.workers) {
      const detail =
        w.state === 'done' ? `: ${w.commits} commit(s), ${w.filesChanged} file(s)` : w.reason ? `: ${w.reason}` : '';
      report(`w:${w.id}`, w.state, `[sub-task ${w.id}] ${w.state}${detail}`);
    }
    report('phase', s.phase, `[run] ${s.phase}${s.baseSha ? ` (base ${s.baseSha.slice(0, 12)})` : ''}`);
  };
}

async function main(): Promise<void> {
  const keep = process.argv.includes('--keep');
  // The demo prints its own progress; the SDK's routine lifecycle logs would drown it.
  Runtime.install({ logger: new DefaultLogger('WARN') });
  const home = dataDir();
  const root = path.join(home, 'demo', newRunId());
  mkdirSync(root, { recursive: true });
  console.log(`Flotilla demo — data in ${home}`);
  const remote = buildSample(root);
  console.log(`Sample project "textkit" with a bare remote at ${remote}`);

  const temporal = await ensureTemporal({ dataDir: home });
  console.log(
    temporal.started
      ? `Started the embedded Temporal dev server at ${temporal.address}`
      : `Using Temporal at ${temporal.address}`,
  );
  warnIfUnisolated();
  const taskQueue = `flotilla-demo-${process.pid}`;
  const nativeConnection = await NativeConnection.connect({ address: temporal.address });
  const worker = await createFlotillaWorker({
    connection: nativeConnection,
    namespace: temporal.namespace,
    taskQueue,
    dataDir: home,
  });
  const connection = await Connection.connect({ address: temporal.address });
  const client = new Client({ connection, namespace: temporal.namespace });

  let exitCode = 1;
  await worker.runUntil(async () => {
    const handle = await startRun(client, demoRequest(remote), { taskQueue });
    console.log(`Started run ${handle.workflowId} with ${FEATURES.length} sub-tasks`);
    const url = workflowUrl(temporal.uiUrl, temporal.namespace, handle.workflowId);
    if (url) console.log(`Watch it: ${url}`);
    const print = progressPrinter();
    const ended = awaitRun(handle);
    let done = false;
    void ended.finally(() => (done = true));
    while (!done) {
      await handle.query(statusQuery).then(print, () => undefined);
      await new Promise((r) => setTimeout(r, 300));
    }
    await handle.query(statusQuery).then(print, () => undefined);
    const end = await ended;
    console.log('');
    console.log(formatRunEnd(end));
    if (end.result?.pushedSha) {
      console.log('\nThe remote now holds:');
      console.log(git(remote, 'log', '--oneline', '--graph', '-n', '12', 'main'));
      console.log(`\nPushed commit: ${end.result.pushedSha}`);
      exitCode = 0;
    }
    if (url) console.log(`Web UI: ${url}`);
  });
  await connection.close();
  await nativeConnection.close();
  if (keep && temporal.started) {
    console.log(`The Temporal server keeps running (Web UI ${temporal.uiUrl}); press Ctrl-C to stop it.`);
    await new Promise<void>((resolve) => process.once('SIGINT', () => resolve()));
  } else if (temporal.started) {
    console.log(
      'Stopping the embedded Temporal server (use `npm run demo -- --keep` to browse the Web UI afterwards).',
    );
  }
  await temporal.stop();
  process.exitCode = exitCode;
}

main().catch((err) => {
  console.error(`demo failed: ${err instanceof Error ? (err.stack ?? err.message) : err}`);
  process.exit(1);
});
