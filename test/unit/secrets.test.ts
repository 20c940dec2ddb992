/** Secrets masked in text that leaves the host: git errors and agents' output streams. */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { scrubSecrets } from '../../src/git/remote';
import { StreamRedactor } from '../../src/store/secrets';

// Built from pieces, as test/e2e/attacks/secrets.test.ts does.
const API_KEY = 'sk-ant-api03-' + 'Zq8mXw4TestOnlyKey';

afterEach(() => {
  vi.unstubAllEnvs();
});

describe('the git token', () => {
  it('masks credentials in error text', () => {
    vi.stubEnv('FLOTILLA_GIT_TOKEN', 'tok-456');
    expect(scrubSecrets('fatal: https://user:tok-456@example.com/x.git: tok-456 refused')).toBe(
      'fatal: https://***@example.com/x.git: *** refused',
    );
  });
});

describe("agents' API keys", () => {
  it('are redacted from a stream however its chunks split them', () => {
    const text = `a ${API_KEY} b ${API_KEY}${API_KEY} c`;
    for (let size = 1; size <= text.length; size += 3) {
      const r = new StreamRedactor([API_KEY]);
      let out = '';
      for (let i = 0; i < text.length; i += size) out += r.push(text.slice(i, i + size));
      expect(out + r.end()).toBe('a [redacted] b [redacted][redacted] c');
    }
  });
});
