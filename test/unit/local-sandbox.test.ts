/** The local provider's decisions made before any sandbox starts: its directories. */
import { describe, expect, it } from 'vitest';
import { LocalSandboxProvider } from '../../src/sandbox/local/provider';
import { tempDir } from '../support/temp';

describe('the local provider', () => {
  it('keeps distinct keys that sanitize alike in distinct directories', () => {
    const provider = new LocalSandboxProvider(tempDir('dirs'));
    expect(provider.dirFor('run/a b')).not.toBe(provider.dirFor('run/a_b'));
  });
});
