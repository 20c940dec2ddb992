/**
 * The host uids local sandboxes run as. A worker running as root hands each sandbox key a uid of
 * its own from a range (FLOTILLA_SANDBOX_UIDS), so no sandbox can touch another's files; a worker
 * that is not root has none to hand out, and its sandboxes run as its own uid in a user namespace.
 */
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';

export interface UidRange {
  first: number;
  count: number;
}

const DEFAULT_RANGE = '200000-265535';

/** Root can hand out uids, make cgroups and mount: all of it happens before a sandbox starts. */
export const asRoot = () => process.getuid?.() === 0;

/** "first-last" as FLOTILLA_SANDBOX_UIDS gives it; undefined means the default range. */
export function parseUidRange(text: string | undefined): UidRange {
  const m = /^(\d+)-(\d+)$/.exec(text ?? DEFAULT_RANGE);
  const [first, last] = m ? [Number(m[1]), Number(m[2])] : [NaN, NaN];
  if (!(first >= 1000 && last >= first && last < 2 ** 32 - 1)) {
    throw new Error(`FLOTILLA_SANDBOX_UIDS must be "first-last" with 1000 <= first <= last (got "${text}")`);
  }
  return { first, count: last - first + 1 };
}

/** A key's uid in the range: stable, so a worker that restarts finds its files owned right. */
export function uidIn(range: UidRange, key: string): number {
  return range.first + (createHash('sha256').update(key).digest().readUInt32BE(0) % range.count);
}

/**
 * The host's passwd plus the sandbox's user, whose home is `home`, so tools that look themselves
 * up (ssh, node's os.userInfo) work.
 */
export async function passwdWith(uid: number, home: string): Promise<string> {
  const host = await readFile('/etc/passwd', 'utf8').catch(() => 'root:x:0:0:root:/root:/bin/sh\n');
  return `${host.trimEnd()}\nsandbox:x:${uid}:${uid}:Flotilla sandbox:${home}:/bin/bash\n`;
}
