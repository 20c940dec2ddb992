/**
 * The egress policy's decisions, host by host: what the allowlist matches, and which addresses
 * no name on it may lead to. (The proxy and the sandbox around it are attacked for real in
 * test/e2e/attacks/network.test.ts.)
 */
import os from 'node:os';
import { describe, expect, it } from 'vitest';
import { EgressPolicy } from '../../src/sandbox/egress/policy';
import { parseAuthority } from '../../src/sandbox/egress/proxy';
import { cloudAllowList, operatorRules, sandboxRules, urlEndpoint } from '../../src/sandbox/egress/rules';

const notListed = (target: string) => ({ refused: `${target} is not on the sandbox's allowlist` });
const local = (name: string, address: string) => ({
  refused: `${name} resolves to ${address}, a loopback, private, link-local or local address`,
});

describe('the egress policy', () => {
  it('matches names exactly, wildcards on subdomains only, and ports 80 and 443 unless an entry names one', async () => {
    const policy = new EgressPolicy({ hostnames: ['*.example.test', 'exact.test', 'api.test:8443'], trusted: [] });
    expect(await policy.decide('evilexample.test', 443)).toEqual(notListed('evilexample.test:443'));
    expect(await policy.decide('example.test', 443)).toEqual(notListed('example.test:443'));
    expect(await policy.decide('exact.test', 22)).toEqual(notListed('exact.test:22'));
    expect(await policy.decide('api.test', 443)).toEqual(notListed('api.test:443'));
    // Listed: then the name must resolve (these do not, offline), which is the next check.
    for (const [host, port] of [
      ['a.b.example.test', 443],
      ['EXACT.test.', 80],
      ['api.test', 8443],
    ] as const) {
      expect(await policy.decide(host, port)).toMatchObject({ refused: expect.stringMatching(/ does not resolve/) });
    }
  });

  it('refuses every local address a listed name or literal leads to', async () => {
    const ownAddress = Object.values(os.networkInterfaces())
      .flat()
      .find((a) => a && a.family === 'IPv4' && !a.internal)?.address;
    const literals = [
      '127.0.0.1',
      '0.0.0.0',
      '10.1.2.3',
      '172.31.0.1',
      '192.168.1.1',
      '100.64.0.1',
      '169.254.169.254',
      '::1',
      '::ffff:127.0.0.1',
      'fd00::1',
      'fe80::1',
      '64:ff9b::7f00:1',
      ...(ownAddress ? [ownAddress] : []),
    ];
    const policy = new EgressPolicy({
      hostnames: ['localhost', ...literals.map((a) => (a.includes(':') ? `[${a}]:443` : a))],
      trusted: [],
    });
    expect(await policy.decide('localhost', 443)).toEqual(local('localhost', '127.0.0.1'));
    for (const address of literals) {
      expect(await policy.decide(address.includes(':') ? `[${address}]` : address, 443), address).toEqual(
        local(address, address),
      );
    }
  });

  it('lets an exact trusted endpoint through on a local address, and nothing next to it', async () => {
    const policy = new EgressPolicy({ hostnames: [], trusted: ['127.0.0.1:8080', '[::1]:9090', 'localhost:7000'] });
    expect(await policy.decide('127.0.0.1', 8080)).toEqual({ address: '127.0.0.1' });
    expect(await policy.decide('[::1]', 9090)).toEqual({ address: '::1' });
    expect(await policy.decide('localhost', 7000)).toMatchObject({
      address: expect.stringMatching(/^(127\.0\.0\.1|::1)$/),
    });
    expect(await policy.decide('127.0.0.1', 8081)).toEqual(notListed('127.0.0.1:8081'));
    expect(await policy.decide('localhost', 8080)).toEqual(notListed('localhost:8080'));
  });
});

describe('egress rules', () => {
  it('trusts only the exact endpoints the worker names: base URLs and operator entries with a port', () => {
    expect(urlEndpoint('http://127.0.0.1:4000/v1')).toBe('127.0.0.1:4000');
    expect(urlEndpoint('https://gateway.test')).toBe('gateway.test:443');
    expect(urlEndpoint('file:///etc/passwd')).toBeUndefined();
    expect(operatorRules({ FLOTILLA_EGRESS_ALLOW: 'mirror.test, 10.0.0.5:3000 *.corp.test' })).toEqual({
      hostnames: ['mirror.test', '*.corp.test'],
      trusted: ['10.0.0.5:3000'],
    });
    // A request's hosts are never trusted, whatever they name.
    const rules = sandboxRules(['127.0.0.1:7233'], undefined, {});
    expect(rules.trusted).toEqual([]);
    expect(rules.hostnames).toContain('registry.npmjs.org');
  });

  it('gives a cloud firewall names and public addresses only', () => {
    expect(
      cloudAllowList({
        hostnames: ['pypi.org', 'api.test:8443', '*.corp.test', '8.8.8.8'],
        trusted: ['127.0.0.1:4000', 'gateway.test:443', '[::1]:9'],
      }),
    ).toEqual(['pypi.org', 'api.test', '*.corp.test', '8.8.8.8', 'gateway.test']);
  });
});

describe('CONNECT targets', () => {
  it('are host:port, an IPv6 address in brackets, and nothing else', () => {
    expect(parseAuthority('api.test:443')).toEqual({ host: 'api.test', port: 443 });
    expect(parseAuthority('[::1]:8080')).toEqual({ host: '[::1]', port: 8080 });
    for (const bad of ['api.test', 'api.test:0', 'api.test:65536', 'user@api.test:443', 'a/b:443', '::1:443', ''])
      expect(parseAuthority(bad), bad).toBeUndefined();
  });
});
