/** Worker settings read from the environment: each bad value is refused, naming the variable. */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { defaultDeps } from '../../src/activities/deps';
import { ConfigError, deploymentSetting, stagingUrl } from '../../src/config/settings';
import { tempDir } from '../support/temp';

afterEach(() => {
  vi.unstubAllEnvs();
});

/** The deployment setting with exactly these of FLOTILLA_DEPLOYMENT and FLOTILLA_BUILD_ID set. */
function setting(env: { FLOTILLA_DEPLOYMENT?: string; FLOTILLA_BUILD_ID?: string }) {
  vi.stubEnv('FLOTILLA_DEPLOYMENT', env.FLOTILLA_DEPLOYMENT);
  vi.stubEnv('FLOTILLA_BUILD_ID', env.FLOTILLA_BUILD_ID);
  return deploymentSetting();
}

describe('FLOTILLA_DEPLOYMENT and FLOTILLA_BUILD_ID', () => {
  it('unset means an unversioned worker; a build ID alone or a bad name is refused naming the variable', () => {
    expect(setting({})).toBeUndefined();
    expect(setting({ FLOTILLA_DEPLOYMENT: 'flotilla' })).toEqual({
      deploymentName: 'flotilla',
      buildId: undefined,
    });
    expect(setting({ FLOTILLA_DEPLOYMENT: 'flotilla', FLOTILLA_BUILD_ID: '0.1.0-abc' })).toEqual({
      deploymentName: 'flotilla',
      buildId: '0.1.0-abc',
    });
    expect(() => setting({ FLOTILLA_BUILD_ID: 'b' })).toThrow(
      /FLOTILLA_BUILD_ID is set but FLOTILLA_DEPLOYMENT is not/,
    );
    expect(() => setting({ FLOTILLA_DEPLOYMENT: 'a.b' })).toThrow(/FLOTILLA_DEPLOYMENT must be .*not "a.b"/);
    expect(() => setting({ FLOTILLA_DEPLOYMENT: 'flotilla', FLOTILLA_BUILD_ID: 'x:y' })).toThrow(
      /FLOTILLA_BUILD_ID must be .*not "x:y"/,
    );
  });
});

describe('FLOTILLA_STAGING_URL', () => {
  it('refuses a FLOTILLA_STAGING_URL it cannot use, naming the variable and the reason', () => {
    const refused = (url: string) => {
      vi.stubEnv('FLOTILLA_STAGING_URL', url);
      try {
        stagingUrl();
        return undefined;
      } catch (err) {
        expect(err).toBeInstanceOf(ConfigError);
        return (err as Error).message;
      }
    };
    expect(refused('https://user:secret@store.example.com/staging.git')).toBe(
      'FLOTILLA_STAGING_URL must not contain credentials (user:password@); the worker sends FLOTILLA_GIT_TOKEN to allowed hosts itself',
    );
    expect(refused('git://who@10.0.0.1/staging.git')).toMatch(/^FLOTILLA_STAGING_URL must not contain credentials/);
    expect(refused('ext::sh -c touch% /tmp/pwned')).toMatch(/^FLOTILLA_STAGING_URL uses the transport helper "ext::"/);
    expect(refused('http://store.example.com/staging.git')).toBe('FLOTILLA_STAGING_URL uses plain http; use https');
    for (const ok of [
      'git://10.0.0.1/staging.git',
      'file:///srv/staging.git',
      'ssh://git@store/staging.git',
      'https://store.example.com/staging.git',
    ]) {
      expect(refused(ok), ok).toBeUndefined();
    }
    vi.stubEnv('FLOTILLA_STAGING_URL', 'https://user:secret@store.example.com/staging.git');
    expect(() => defaultDeps(tempDir('data'))).toThrow(/^FLOTILLA_STAGING_URL must not contain credentials/);
  });
});
