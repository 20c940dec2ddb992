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

/** Root can hand out uids, make cgroups and mount: all of it happens before a sandbox starts. */
export const asRoot = () => process.getuid?.() === 0;

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
