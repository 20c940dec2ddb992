/**
 * The egress proxy's decision for one connection. It lets a connection through only to a hostname on
 * the allowlist, and only when every address the name resolves to is public: the check is on the
 * resolved address, and the connection goes to that very address, so a name that resolves to
 * loopback or a private range (DNS rebinding) gets nowhere. A trusted entry (see rules.ts) is
 * reached whatever it resolves to.
 */
import dns from 'node:dns/promises';
import net from 'node:net';
import { type EgressRules, blockedAddresses, normalizeEntry, splitEntry } from './rules';

export type Decision = { address: string } | { refused: string };

export class EgressPolicy {
  private readonly blocked = blockedAddresses();

  constructor(private readonly rules: EgressRules) {}

  private listed(host: string, port: number): boolean {
    return this.rules.hostnames.some((entry) => {
      const { name, port: entryPort } = splitEntry(entry);
      const portOk = entryPort === undefined ? port === 443 || port === 80 : port === entryPort;
      const nameOk = name.startsWith('*.') ? host.endsWith(name.slice(1)) : host === name;
      return portOk && nameOk;
    });
  }

  /** Where to connect for host:port, resolved once here so the address checked is the one used. */
  async decide(rawHost: string, port: number): Promise<Decision> {
    const host = normalizeEntry(rawHost.replace(/^\[(.*)\]$/, '$1'));
    // Entries write an IPv6 address in brackets, as URLs do.
    const name = net.isIPv6(host) ? `[${host}]` : host;
    const trusted = this.rules.trusted.includes(`${name}:${port}`);
    if (!trusted && !this.listed(name, port)) return { refused: `${name}:${port} is not on the sandbox's allowlist` };
    let addresses: { address: string; family: number }[];
    try {
      addresses = net.isIP(host) ? [{ address: host, family: net.isIP(host) }] : await dns.lookup(host, { all: true });
    } catch (err) {
      return { refused: `${host} does not resolve (${(err as NodeJS.ErrnoException).code ?? 'error'})` };
    }
    if (addresses.length === 0) return { refused: `${host} does not resolve` };
    if (!trusted) {
      const bad = addresses.find((a) => this.blocked.check(a.address, a.family === 6 ? 'ipv6' : 'ipv4'));
      if (bad)
        return { refused: `${host} resolves to ${bad.address}, a loopback, private, link-local or local address` };
    }
    return { address: addresses[0].address };
  }
}
