/** The sub-task workflow's input check: a partial input is refused naming its fields, and every recorded one passes. */
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { subTaskInputProblems } from '../../src/contracts/subtask-input';

const HISTORY = path.join(__dirname, '../history');

/** The input of every sub-task workflow in the replay fixtures, by file. */
function recordedInputs(): [string, unknown][] {
  return readdirSync(HISTORY).flatMap((release) =>
    readdirSync(path.join(HISTORY, release)).flatMap((file) => {
      const history = JSON.parse(readFileSync(path.join(HISTORY, release, file), 'utf8'));
      const started = history.events[0].workflowExecutionStartedEventAttributes;
      if (started.workflowType.name !== 'workerWorkflow') return [];
      const payload = started.input.payloads[0].data as string;
      const input: unknown = JSON.parse(Buffer.from(payload, 'base64').toString('utf8'));
      return [[`${release}/${file}`, input] as [string, unknown]];
    }),
  );
}

describe('subTaskInputProblems', () => {
  it('names every missing field of an empty input', () => {
    expect(subTaskInputProblems({})).toEqual(
      expect.arrayContaining([
        'runKey: is required',
        'task: is required',
        'agent: is required',
        'baseSha: is required',
        'workerTimeoutMs: is required',
        'progressToken: is required',
      ]),
    );
    expect(subTaskInputProblems(undefined)).toEqual(['(input): is required']);
  });

  it('names a field of the wrong type', () => {
    const [, input] = recordedInputs()[0];
    const bad = { ...(input as object), task: { id: 'a', prompt: 'p', ownedPaths: 'src', sharedPaths: [] } };
    expect(subTaskInputProblems(bad)).toEqual(['task.ownedPaths: expected array, got a string']);
    expect(subTaskInputProblems({ ...(input as object), others: 'web' })).toEqual([
      'others: expected array, got a string',
    ]);
  });

  it('passes the input of every sub-task workflow in the replay fixtures, and fields it does not know', () => {
    const inputs = recordedInputs();
    expect(inputs.length).toBeGreaterThan(10);
    for (const [file, input] of inputs) expect(subTaskInputProblems(input), file).toEqual([]);
    expect(subTaskInputProblems({ ...(inputs[0][1] as object), aFieldOfLater: 1 })).toEqual([]);
  });
});
