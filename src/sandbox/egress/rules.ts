/**
 * What a sandbox's network may reach. Entries are host names on ports 80 and 443 ("name"), on
 * one port ("name:port"), or every subdomain ("*.domain"), and reachable on public addresses
 * only; the one exception is an exact host:port the worker's own configuration names (a model
 * server on loopback via ANTHROPIC_BASE_URL, an operator's FLOTILLA_EGRESS_ALLOW entry), which
 * is trusted whatever it resolves to. A request can add hostnames, never such an exception.
 */
import net from 'node:net';
import os from 'node:os';
import { setting } from '../../config/variables';

/** Who may be reached. Hostname entries: "name" (ports 80 and 443), "name:port", "*.domain" (subdomains). */
export interface EgressRules {
  /** Reachable on public addresses only. */
  hostnames: string[];
  /** Exact host:port entries named by the worker's configuration: reachable whatever they resolve to. */
  trusted: string[];
}

/** Package registries a setupCmd installs from. */
export const REGISTRY_HOSTNAMES = [
  'registry.npmjs.org',
  'registry.yarnpkg.com',
  'pypi.org',
  'files.pythonhosted.org',
  'deb.debian.org',
  'security.debian.org',
  'archive.ubuntu.com',
  'security.ubuntu.com',
  'crates.io',
  'index.crates.io',
  'static.crates.io',
  'proxy.golang.org',
  'sum.golang.org',
  'rubygems.org',
];

/** host:port of a URL (the port filled in from its scheme), or undefined for anything else. */
export function urlEndpoint(url: string | undefined): string | undefined {
  if (!url) return undefined;
  try {
    const u = new URL(url);
    if (u.protocol !== 'http:' && u.protocol !== 'https:') return undefined;
    return `${u.hostname}:${u.port || (u.protocol === 'https:' ? '443' : '80')}`;
  } catch {
    return undefined;
  }
}

/**
 * The operator's additions, from the worker's environment: FLOTILLA_EGRESS_ALLOW, entries
 * separated by commas or spaces. An entry with a port is exact and trusted (it may be on a
 * private network, it is the operator's own); one without is a public hostname on ports 80 and 443.
 */
export function operatorRules(env: NodeJS.ProcessEnv = process.env): EgressRules {
  const entries = setting('FLOTILLA_EGRESS_ALLOW', env);
  return { hostnames: entries.filter((e) => !hasPort(e)), trusted: entries.filter(hasPort).map(normalizeEntry) };
}

/** An agent's model API: its default hostnames, and the exact endpoint the worker's environment points it at. */
export function modelApiRules(
  api: { hostnames: readonly string[]; baseUrlEnv: string } | undefined,
  env: NodeJS.ProcessEnv = process.env,
): EgressRules {
  const endpoint = api && urlEndpoint(env[api.baseUrlEnv]);
  return { hostnames: [...(api?.hostnames ?? [])], trusted: endpoint ? [endpoint] : [] };
}

/** What a sandbox may reach: registries, the request's hostnames, the operator's, and a command's own grant. */
export function sandboxRules(
  requestHostnames: readonly string[] = [],
  grant?: EgressRules,
  env: NodeJS.ProcessEnv = process.env,
): EgressRules {
  const operator = operatorRules(env);
  return {
    hostnames: [...REGISTRY_HOSTNAMES, ...requestHostnames, ...operator.hostnames, ...(grant?.hostnames ?? [])].map(
      normalizeEntry,
    ),
    trusted: [...operator.trusted, ...(grant?.trusted ?? [])].map(normalizeEntry),
  };
}

/**
 * The allowlist as names for a cloud provider's firewall (E2B's allowOut), which filters by name
 * on ports 80 and 443 and cannot reach this host's loopback or private network anyway: ports
 * dropped, and local addresses left out.
 */
export function cloudAllowList(rules: EgressRules): string[] {
  const blocked = blockedAddresses();
  const names = [...rules.hostnames, ...rules.trusted].map((e) => splitEntry(e).name.replace(/^\[(.*)\]$/, '$1'));
  return [...new Set(names)].filter((n) => !net.isIP(n) || !blocked.check(n, net.isIPv6(n) ? 'ipv6' : 'ipv4'));
}

const hasPort = (entry: string) => /:\d+$/.test(entry);
/** "name:port" into its parts; an IPv6 address is in brackets, so the last colon is the port's. */
export function splitEntry(entry: string): { name: string; port?: number } {
  if (!hasPort(entry)) return { name: entry };
  const colon = entry.lastIndexOf(':');
  return { name: entry.slice(0, colon), port: Number(entry.slice(colon + 1)) };
}
export const normalizeEntry = (entry: string) =>
  entry
    .trim()
    .toLowerCase()
    .replace(/\.(?=:|$)/, '');

/** Addresses a sandbox never reaches unless trusted: this host's own, loopback, private, link-local, multicast. */
export function blockedAddresses(): net.BlockList {
  const list = new net.BlockList();
  const v4 = [
    '0.0.0.0/8',
    '10.0.0.0/8',
    '100.64.0.0/10',
    '127.0.0.0/8',
    '169.254.0.0/16',
    '172.16.0.0/12',
    '192.0.0.0/24',
    '192.168.0.0/16',
    '224.0.0.0/4',
    '240.0.0.0/4',
  ];
  // BlockList checks an IPv4-mapped address against the IPv4 rules; NAT64 and 6to4 addresses
  // embed an IPv4 address too, and are refused as a whole.
  const v6 = ['::/127', '64:ff9b::/96', '2002::/16', 'fc00::/7', 'fe80::/10', 'ff00::/8'];
  for (const cidr of v4) list.addSubnet(cidr.split('/')[0], Number(cidr.split('/')[1]), 'ipv4');
  for (const cidr of v6) list.addSubnet(cidr.split('/')[0], Number(cidr.split('/')[1]), 'ipv6');
  // A service listening on all interfaces is reachable on the host's public address too.
  for (const addrs of Object.values(os.networkInterfaces())) {
    for (const a of addrs ?? []) list.addAddress(a.address, a.family === 'IPv6' ? 'ipv6' : 'ipv4');
  }
  return list;
}
