/**
 * The pure parts of the E2B provider: which SDK errors are worth a retry, and how a command and
 * its environment are packed into the variables its wrapper unpacks. (The provider itself runs
 * the sandbox contract against the SDK double in test/e2e/sandbox.e2b.test.ts.)
 */
import { spawnSync } from 'node:child_process';
import {
  AuthenticationError,
  FileNotFoundError,
  InvalidArgumentError,
  NotEnoughSpaceError,
  RateLimitError,
  SandboxError,
  SandboxNotFoundError,
  ServiceBusyError,
  TemplateError,
  TimeoutError,
} from 'e2b';
import { describe, expect, it } from 'vitest';
import { WRAPPER, commandEnv } from '../../src/sandbox/e2b/command';
import { classifyE2BError } from '../../src/sandbox/e2b/errors';

describe('E2B errors', () => {
  it('classifies SDK errors as retryable or fatal', () => {
    const withStatus = (statusCode: number) => Object.assign(new SandboxError(`${statusCode}: x`), { statusCode });
    const fatal = [
      new AuthenticationError('Unauthorized, please check your credentials.'),
      new TemplateError('You need to update the template to use the new SDK.'),
      new InvalidArgumentError("cwd '/nope' does not exist"),
      new SandboxNotFoundError('Paused sandbox abc not found'),
      new FileNotFoundError("path '/x' does not exist"),
      new NotEnoughSpaceError('no space left'),
      withStatus(400),
      withStatus(403),
      withStatus(404),
    ];
    const retryable = [
      new RateLimitError('Rate limit exceeded, please try again later'),
      new ServiceBusyError('Service temporarily unavailable, please retry'),
      new TimeoutError('[unavailable] sandbox timeout'),
      withStatus(409),
      withStatus(500),
      withStatus(502),
      new TypeError('fetch failed'),
      new SandboxError('Process exited without a result'),
    ];
    expect(fatal.map(classifyE2BError)).toEqual(fatal.map(() => 'fatal'));
    expect(retryable.map(classifyE2BError)).toEqual(retryable.map(() => 'retryable'));
  });
});

describe('commands in an E2B sandbox', () => {
  it('travel with their environment under a prefix, and refuse names bash could not pass on', () => {
    expect(commandEnv('echo "$A"', { A: '1', _B2: 'two words' })).toEqual({
      __FLOTILLA_CMD: 'echo "$A"',
      __FLOTILLA_ENV_A: '1',
      __FLOTILLA_ENV__B2: 'two words',
    });
    for (const name of ['NOT-AN-IDENTIFIER', '1A', 'A B', ''])
      expect(() => commandEnv('true', { [name]: 'x' }), name).toThrow(
        expect.objectContaining({
          nonRetryable: true,
          type: 'InvalidEnvName',
          message: `environment variable ${JSON.stringify(name)} cannot be passed into an E2B sandbox`,
        }),
      );
  });

  it('get exactly the environment sent, whatever the login shell has, and keep their exit status', () => {
    // The wrapper as envd runs it: a login shell with variables of its own beside ours.
    const r = spawnSync('bash', ['-c', WRAPPER], {
      env: {
        PATH: process.env.PATH,
        ENVD_ONLY: 'leaked',
        ...commandEnv('env; exit 3', { GIVEN: 'yes', PATH: '/usr/bin:/bin' }),
      },
      encoding: 'utf8',
    });
    expect(r.status).toBe(3);
    const names = r.stdout
      .split('\n')
      .filter(Boolean)
      .map((line) => line.split('=')[0]);
    expect(names.sort()).toEqual(['GIVEN', 'PATH', 'PWD', 'SHLVL', '_']);
    expect(r.stdout).toContain('GIVEN=yes\n');
    expect(r.stdout).not.toContain('leaked');
  });
});
