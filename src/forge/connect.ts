/**
 * The forge a run names, connected with the worker's token. Host-side only: the token comes from
 * the worker's environment and goes to the forge's API alone, never into a payload or a log.
 */
import { packageVersion, setting, tokenHosts } from '../config/settings';
import { forgeHost } from '../contracts/forge-address';
import { githubForge } from './github';
import type { Forge, ForgeAddress } from './types';

const LOOPBACK = /^(127\.\d+\.\d+\.\d+|localhost|\[::1\])(:\d+)?$/;

/**
 * The token for `forge`: FLOTILLA_FORGE_TOKEN, else FLOTILLA_GIT_TOKEN, and either only to a forge
 * whose host FLOTILLA_GIT_TOKEN_HOSTS allows, over https (plain http on loopback only, where the
 * token never leaves the machine). A request names the forge, so without this scoping anyone who
 * may start a run could send the worker's token to a host of their choosing.
 */
export function forgeToken(forge: ForgeAddress, env: NodeJS.ProcessEnv = process.env): string | undefined {
  const token = setting('FLOTILLA_FORGE_TOKEN', env) ?? setting('FLOTILLA_GIT_TOKEN', env);
  if (!token) return undefined;
  const host = forgeHost(forge);
  const secure = new URL(forge.baseUrl ?? 'https://api.github.com').protocol === 'https:' || LOOPBACK.test(host);
  return secure && tokenHosts().includes(host) ? token : undefined;
}

/**
 * The forge at `address`, with the token it may have. (Octokit is an ES module: Node loads it
 * from CommonJS since 20.19. A lazy load here would need import(), which tsx and vitest resolve
 * differently, so it is imported with the activities.)
 */
export async function connectForge(address: ForgeAddress): Promise<Forge> {
  return githubForge(address, forgeToken(address), packageVersion());
}
