/**
 * The lost-host classifier: what makes a workflow move a sandbox to another host, and what does
 * not. (test/hosts.test.ts classifies the failure a real lost host produced, from its history.)
 */
import { ActivityFailure, ApplicationFailure, CancelledFailure, RetryState, TimeoutFailure } from '@temporalio/common';
import { describe, expect, it } from 'vitest';
import { permanent } from '../../src/contracts/failures';
import { hostLost } from '../../src/workflows/host-affinity';

const activity = (cause: Error, type = 'runAgent') =>
  new ActivityFailure('Activity task failed', type, '7', RetryState.NON_RETRYABLE_FAILURE, 'worker@host-a', cause);

describe('hostLost', () => {
  it('a host that did not pick up its work in time is lost', () => {
    const failure = activity(new TimeoutFailure('activity ScheduleToStart timeout', undefined, 'SCHEDULE_TO_START'));
    expect(hostLost(failure)).toBe('its host did not pick up runAgent in time');
  });

  it('a host that answers without the sandbox (it lost its data directory) is lost', () => {
    const failure = activity(
      ApplicationFailure.nonRetryable('sandbox run/worker/a does not exist (was it destroyed?)', 'SandboxMissing'),
      'collectWork',
    );
    expect(hostLost(failure)).toBe('its host no longer has the sandbox (collectWork)');
  });

  it.each([
    ['a heartbeat timeout (retried on the same host first)', new TimeoutFailure('heartbeat', undefined, 'HEARTBEAT')],
    ['a start-to-close timeout', new TimeoutFailure('too long', undefined, 'START_TO_CLOSE')],
    [
      "a schedule-to-close timeout (the activity's own time bound spent)",
      new TimeoutFailure('bound', undefined, 'SCHEDULE_TO_CLOSE'),
    ],
    ['a permanent failure of the work itself', permanent('TooLarge', 'too big')],
    ['a cancellation', new CancelledFailure('cancelled')],
  ])('%s is not', (_, cause) => {
    expect(hostLost(activity(cause))).toBeUndefined();
  });

  it('nothing but an activity failure is', () => {
    expect(hostLost(new TimeoutFailure('timer', undefined, 'SCHEDULE_TO_START'))).toBeUndefined();
    expect(hostLost(new Error('SandboxMissing'))).toBeUndefined();
    expect(hostLost(undefined)).toBeUndefined();
  });
});
