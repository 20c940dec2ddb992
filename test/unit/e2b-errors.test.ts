/** How the E2B provider classifies the SDK's errors: retried, or failed for good. */
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
import { classifyE2BError } from '../../src/sandbox/e2b/provider';

describe('classifyE2BError', () => {
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
