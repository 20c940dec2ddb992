/** The local provider's decisions made before any sandbox starts: its directories and limits. */
import { describe, expect, it } from 'vitest';
import { DEFAULT_LIMITS, LocalSandboxProvider, MAX_LIMITS, parseMaxLimits } from '../../src/sandbox/local/provider';
import { tempDir } from '../support/temp';

describe('the local provider', () => {
  it('keeps distinct keys that sanitize alike in distinct directories', () => {
    const provider = new LocalSandboxProvider(tempDir('dirs'));
    expect(provider.dirFor('run/a b')).not.toBe(provider.dirFor('run/a_b'));
  });

  it("takes its limits from the defaults, the request, and the worker's caps", () => {
    const capped = new LocalSandboxProvider(tempDir('limits'), { maxLimits: { memoryMiB: 512 } });
    expect(capped.limitsFor()).toEqual({ ...DEFAULT_LIMITS, memoryMiB: 512 });
    expect(capped.limitsFor({ processes: 10, memoryMiB: 100_000, tmpMiB: MAX_LIMITS.tmpMiB * 2 })).toEqual({
      ...DEFAULT_LIMITS,
      processes: 10,
      memoryMiB: 512,
      tmpMiB: MAX_LIMITS.tmpMiB,
    });
    // How an operator sets the caps: FLOTILLA_SANDBOX_MAX_LIMITS.
    expect(parseMaxLimits(' memoryMiB=8192, processes=512 ')).toEqual({ memoryMiB: 8192, processes: 512 });
    expect(parseMaxLimits(undefined)).toEqual({});
    expect(() => parseMaxLimits('memory=1')).toThrow('FLOTILLA_SANDBOX_MAX_LIMITS: unknown limit "memory"');
    expect(() => parseMaxLimits('tmpMiB=0')).toThrow(
      'FLOTILLA_SANDBOX_MAX_LIMITS: tmpMiB must be a positive whole number (got "0")',
    );
  });
});
