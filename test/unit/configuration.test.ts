/**
 * Every environment variable in one place: the table in src/config/variables.ts is what the code
 * reads and what docs/configuration.md says, and nothing in src/ reads around it.
 */
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { MODEL_APIS, harnessFor } from '../../src/agents';
import { CONFIGURATION_DOC, renderConfiguration } from '../../src/config/docs';
import { ConfigError } from '../../src/config/error';
import { checkSettings } from '../../src/config/settings';
import { DIRECT_READS, VARIABLES, type VariableName, readersOf, setting } from '../../src/config/variables';
import type { AgentSpec } from '../../src/contracts/request';

const SRC = path.join(__dirname, '../../src');

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? sourceFiles(path.join(dir, e.name)) : e.name.endsWith('.ts') ? [path.join(dir, e.name)] : [],
  );
}

/** Every line of src/ outside src/config/ that matches `pattern`, as "file:line: text". */
function linesMatching(pattern: RegExp): string[] {
  return sourceFiles(SRC)
    .filter((f) => !f.startsWith(path.join(SRC, 'config') + path.sep))
    .flatMap((f) =>
      readFileSync(f, 'utf8')
        .split('\n')
        .map((text, i) => ({ where: `${path.relative(SRC, f)}:${i + 1}`, text }))
        .filter((l) => pattern.test(l.text))
        .map((l) => `${l.where}: ${l.text.trim()}`),
    );
}

describe('docs/configuration.md', () => {
  it('is what `npm run docs:config` writes from the table', () => {
    expect(readFileSync(CONFIGURATION_DOC, 'utf8'), 'run `npm run docs:config` and commit the result').toBe(
      renderConfiguration(),
    );
  });

  it('documents every variable of the table', () => {
    const doc = renderConfiguration();
    for (const name of Object.keys(VARIABLES)) expect(doc).toContain(`| \`${name}\` |`);
  });
});

describe('reading the environment', () => {
  it('src/ reads process.env only through the table, or where DIRECT_READS says why', () => {
    const unexplained = linesMatching(/process\.env/).filter((l) => !DIRECT_READS.some((d) => d.pattern.test(l)));
    expect(unexplained).toEqual([]);
  });

  it('no module reads a variable from an environment object itself (writing one for a child is fine)', () => {
    expect(linesMatching(/\benv\.[A-Z][A-Z0-9_]+\b(?!\s*=[^=])/).filter((l) => !/process\.env\./.test(l))).toEqual([]);
  });

  it('the table holds every variable an agent harness passes into its sandbox, and every model API base URL', () => {
    const kinds: AgentSpec[] = [{ kind: 'shell', command: 'true' }, { kind: 'claude-code' }, { kind: 'codex' }];
    const passed = kinds.flatMap((spec) => harnessFor(spec).passEnv);
    for (const name of [...passed, ...MODEL_APIS.map((api) => api.baseUrlEnv)])
      expect(Object.keys(VARIABLES), name).toContain(name);
  });

  it('every variable has a default that parses: unset is always a valid setting', () => {
    for (const name of Object.keys(VARIABLES) as VariableName[]) expect(() => setting(name, {}), name).not.toThrow();
  });

  it('a value that cannot be used is refused with an error naming the variable', () => {
    const refused: [VariableName, string][] = [
      ['FLOTILLA_TEMPORAL_PORT', '70000'],
      ['FLOTILLA_HOST_ID', 'a host'],
      ['FLOTILLA_STAGING_URL', 'https://user:secret@store.test/x.git'],
      ['FLOTILLA_DEPLOYMENT', 'a.b'],
      ['FLOTILLA_BUILD_ID', 'a:b'],
      ['FLOTILLA_SANDBOX_UIDS', '5-10'],
      ['FLOTILLA_SANDBOX_MAX_LIMITS', 'memory=1'],
      ['FLOTILLA_RETENTION', 'a week'],
      ['FLOTILLA_RETENTION_INTERVAL', '0'],
      ['FLOTILLA_LOG_LEVEL', 'loud'],
      ['FLOTILLA_LOG_FORMAT', 'xml'],
      ['OTEL_EXPORTER_OTLP_ENDPOINT', 'localhost:4318'],
      ['FLOTILLA_EGRESS_ALLOW', '*'],
      ['FLOTILLA_EGRESS_ALLOW', 'a.test, 10.0.0.0/8'],
      ['FLOTILLA_EGRESS_ALLOW', 'https://mirror.test/'],
      ['FLOTILLA_EGRESS_ALLOW', 'fd00::5'],
      ['FLOTILLA_EGRESS_ALLOW', 'a.test:70000'],
      ['FLOTILLA_GIT_TOKEN_HOSTS', 'https://github.com'],
      ['FLOTILLA_GIT_TOKEN_HOSTS', '*.github.com'],
      ['FLOTILLA_GIT_TOKEN_HOSTS', 'github.com/'],
      ['FLOTILLA_GIT_TOKEN_HOSTS', 'github.com:443'],
      ['FLOTILLA_GIT_TOKEN_HOSTS', 'git hub.com'],
      ['FLOTILLA_ISOLATION', 'garbage'],
      ['FLOTILLA_ISOLATION', 'NONE'],
      ['FLOTILLA_HOME', '/dev/null'],
      ['FLOTILLA_HOME', '/dev/null/flotilla'],
      ['FLOTILLA_TASK_QUEUE', ''],
      ['FLOTILLA_TASK_QUEUE', '  '],
      ['TEMPORAL_UI_URL', 'javascript:alert(1)'],
      ['TEMPORAL_UI_URL', 'ftp://temporal.test'],
    ];
    for (const [name, value] of refused) {
      expect(() => setting(name, { [name]: value }), `${name}=${value}`).toThrow(ConfigError);
      expect(() => setting(name, { [name]: value }), `${name}=${value}`).toThrow(name);
    }
  });

  it('says why, in one line, for the values operators got wrong', () => {
    const why = (name: VariableName, value: string) => {
      try {
        setting(name, { [name]: value });
      } catch (err) {
        return (err as Error).message;
      }
      return 'accepted';
    };
    expect(why('FLOTILLA_EGRESS_ALLOW', '10.0.0.0/8')).toBe(
      'FLOTILLA_EGRESS_ALLOW: "10.0.0.0/8" is not a host name, host:port, *.domain or [IPv6 address]:port (wildcards alone, CIDR ranges and URLs are not matched)',
    );
    expect(why('FLOTILLA_GIT_TOKEN_HOSTS', 'https://github.com')).toBe(
      'FLOTILLA_GIT_TOKEN_HOSTS: "https://github.com" can never match a host; give host or host:port, such as github.com or git.corp:8443',
    );
    expect(why('FLOTILLA_GIT_TOKEN_HOSTS', 'GitHub.com:443')).toBe(
      'FLOTILLA_GIT_TOKEN_HOSTS: "GitHub.com:443" can never match a host, since https URLs leave out port 443; give github.com',
    );
    expect(why('FLOTILLA_ISOLATION', 'garbage')).toBe(
      'FLOTILLA_ISOLATION must be "none" (agents run unisolated) or unset (bubblewrap), not "garbage"',
    );
    expect(why('FLOTILLA_HOME', '/dev/null')).toBe(
      'FLOTILLA_HOME must be a directory, and /dev/null is a file or a device, not a directory',
    );
    expect(why('FLOTILLA_HOME', '/dev/null/x')).toBe(
      'FLOTILLA_HOME must be a directory, and /dev/null/x: /dev/null is a file or a device, not a directory',
    );
    expect(why('FLOTILLA_TASK_QUEUE', '')).toBe(
      'FLOTILLA_TASK_QUEUE must not be empty; unset it for the default "flotilla"',
    );
    expect(why('TEMPORAL_UI_URL', 'javascript:alert(1)')).toBe(
      'TEMPORAL_UI_URL must be an http:// or https:// URL (the Web UI), such as https://temporal.example.com; not "javascript:alert(1)"',
    );
  });

  it('every variable is read by the worker, the CLI or both, and each checks all of its own at start', () => {
    for (const name of Object.keys(VARIABLES) as VariableName[]) expect(readersOf(name), name).not.toEqual([]);
    expect(() => checkSettings('cli', { FLOTILLA_EGRESS_ALLOW: '*' })).not.toThrow();
    expect(() => checkSettings('worker', { FLOTILLA_EGRESS_ALLOW: '*' })).toThrow(/^FLOTILLA_EGRESS_ALLOW: /);
    expect(() => checkSettings('cli', { TEMPORAL_UI_URL: 'javascript:x' })).toThrow(/^TEMPORAL_UI_URL /);
    expect(() => checkSettings('worker', { FLOTILLA_BUILD_ID: 'b' })).toThrow(/^FLOTILLA_BUILD_ID is set but/);
    for (const reader of ['cli', 'worker'] as const) {
      expect(() => checkSettings(reader, {}), reader).not.toThrow();
      expect(() => checkSettings(reader, { FLOTILLA_HOME: '/dev/null' }), reader).toThrow(/^FLOTILLA_HOME /);
    }
  });

  it('parses what operators write', () => {
    expect(setting('FLOTILLA_EGRESS_ALLOW', { FLOTILLA_EGRESS_ALLOW: 'a.test, 10.0.0.5:3000  b.test' })).toEqual([
      'a.test',
      '10.0.0.5:3000',
      'b.test',
    ]);
    expect(setting('FLOTILLA_GIT_TOKEN_HOSTS', { FLOTILLA_GIT_TOKEN_HOSTS: ' GitHub.com, git.corp:8443,' })).toEqual([
      'github.com',
      'git.corp:8443',
    ]);
    expect(setting('FLOTILLA_GIT_TOKEN_HOSTS', {})).toEqual(['github.com']);
    expect(setting('FLOTILLA_SANDBOX_UIDS', { FLOTILLA_SANDBOX_UIDS: '300000-300009' })).toEqual({
      first: 300000,
      count: 10,
    });
    expect(setting('FLOTILLA_RETENTION', { FLOTILLA_RETENTION: ' 12h ' })).toEqual({ text: '12h', ms: 43_200_000 });
    expect(setting('FLOTILLA_TEMPORAL_PORT', { FLOTILLA_TEMPORAL_PORT: '' })).toBe(7233);
    expect(setting('FLOTILLA_ISOLATION', { FLOTILLA_ISOLATION: 'none' })).toBe('none');
    expect(setting('FLOTILLA_ISOLATION', { FLOTILLA_ISOLATION: 'bubblewrap' })).toBeUndefined();
    expect(setting('FLOTILLA_ISOLATION', { FLOTILLA_ISOLATION: '' })).toBeUndefined();
    expect(
      setting('FLOTILLA_EGRESS_ALLOW', {
        FLOTILLA_EGRESS_ALLOW: '*.corp.test [fd00::5]:3000 203.0.113.7 Mirror.Test.',
      }),
    ).toEqual(['*.corp.test', '[fd00::5]:3000', '203.0.113.7', 'Mirror.Test.']);
    expect(setting('FLOTILLA_GIT_TOKEN_HOSTS', { FLOTILLA_GIT_TOKEN_HOSTS: 'localhost:8443,[::1]:9443' })).toEqual([
      'localhost:8443',
      '[::1]:9443',
    ]);
    expect(setting('FLOTILLA_HOME', { FLOTILLA_HOME: '/tmp/not/yet/made' })).toBe('/tmp/not/yet/made');
    expect(setting('TEMPORAL_UI_URL', { TEMPORAL_UI_URL: 'https://temporal.test:8233' })).toBe(
      'https://temporal.test:8233',
    );
    expect(setting('NO_COLOR', { NO_COLOR: '' })).toBe(false);
    expect(setting('NO_COLOR', { NO_COLOR: '0' })).toBe(true);
  });
});
