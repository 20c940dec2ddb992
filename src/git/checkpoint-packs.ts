/**
 * The packs checkpoints came in, recorded per run and sub-task on this host
 * (`staging.git/flotilla/checkpoints/<run key>/<sub-task>.json`), so that a superseded checkpoint's
 * objects leave the staging repository at once instead of waiting for a gc.
 *
 * Removing a pack is safe because every import is whole (import.ts): a checkpoint's pack holds
 * every object it needs beyond its seed, and so does every other import's, so no other commit
 * needs an object that only a checkpoint's pack holds. A pack that was already in the repository
 * when the checkpoint came (the same bytes imported before) is never recorded, so never removed.
 * One worker process per data directory: the records are this process's.
 */
import { existsSync } from 'node:fs';
import { mkdir, readFile, readdir, rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { permanent } from '../contracts/failures';
import { isSubTaskWorkflowId } from '../contracts/names';
import type { ImportedPack } from './import';

/** Bytes the checkpoints of one run may take on one host, all its sub-tasks together. */
export const MAX_RUN_CHECKPOINT_BYTES = 1024 * 1024 * 1024;
/** Checkpoints one run may keep on one host (a sub-task keeps at most two: the workflow's and the newest). */
export const MAX_RUN_CHECKPOINTS = 100;

const PACK = /^pack-[0-9a-f]{40,64}$/;

/** By checkpoint commit: the pack it came in and its size. */
type Packs = { [sha: string]: { pack: string; bytes: number } };

export class CheckpointPacks {
  private readonly dir: string;

  constructor(
    private readonly stagingDir: string,
    runKey: string,
  ) {
    if (!/^[A-Za-z0-9_-]{1,100}$/.test(runKey)) throw new Error(`not a run key: ${runKey.slice(0, 100)}`);
    this.dir = checkpointRecordsOf(stagingDir, runKey);
  }

  /**
   * Refuses a checkpoint of `bytes` when the run's checkpoints on this host would pass their
   * bounds, counting only what stays: the other sub-tasks' and this one's `keep`.
   */
  async checkRoom(workerId: string, keep: string | undefined, bytes: number, what: string): Promise<void> {
    let used = bytes;
    let count = 1;
    for (const [owner, record] of await this.all()) {
      for (const [sha, entry] of Object.entries(record)) {
        if (owner === workerId && sha !== keep) continue;
        used += entry.bytes;
        count++;
      }
    }
    if (used > MAX_RUN_CHECKPOINT_BYTES)
      throw permanent(
        'TooLarge',
        `${what}: the run's checkpoints would take ${used} bytes on this host, over their limit of ${MAX_RUN_CHECKPOINT_BYTES}; the sub-task keeps its last checkpoint`,
      );
    if (count > MAX_RUN_CHECKPOINTS)
      throw permanent(
        'TooLarge',
        `${what}: the run would keep ${count} checkpoints on this host, over their limit of ${MAX_RUN_CHECKPOINTS}`,
      );
  }

  /** Records `imported` as `workerId`'s newest checkpoint and removes the packs of all its others but `keep`. */
  async replace(workerId: string, imported: ImportedPack, keep: string | undefined): Promise<void> {
    const record = await this.read(workerId);
    if (imported.fresh) record[imported.head] = { pack: imported.pack, bytes: imported.bytes };
    const kept = new Set([imported.head, keep]);
    const keptPacks = new Set(Object.entries(record).flatMap(([sha, e]) => (kept.has(sha) ? [e.pack] : [])));
    const doomed = Object.entries(record).filter(([sha]) => !kept.has(sha));
    for (const [sha, entry] of doomed) {
      if (!keptPacks.has(entry.pack)) await this.removePack(entry.pack);
      delete record[sha];
    }
    await this.write(workerId, record);
  }

  /** Removes every recorded pack of `workerId`'s checkpoints, and the record. */
  async drop(workerId: string): Promise<void> {
    for (const entry of Object.values(await this.read(workerId))) await this.removePack(entry.pack);
    await rm(this.file(workerId), { force: true });
  }

  private file(workerId: string): string {
    if (!isSubTaskWorkflowId(workerId)) throw new Error(`not a sub-task id: ${workerId.slice(0, 100)}`);
    return path.join(this.dir, `${workerId}.json`);
  }

  private async read(workerId: string): Promise<Packs> {
    const text = await readFile(this.file(workerId), 'utf8').catch(() => '{}');
    try {
      const parsed = JSON.parse(text) as Packs;
      return Object.fromEntries(Object.entries(parsed).filter(([, e]) => PACK.test(e?.pack ?? '')));
    } catch {
      return {};
    }
  }

  private async write(workerId: string, record: Packs): Promise<void> {
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
    const file = this.file(workerId);
    await writeFile(`${file}.tmp`, JSON.stringify(record), { mode: 0o600 });
    await rename(`${file}.tmp`, file);
  }

  /** Every sub-task's record of this run. */
  private async all(): Promise<[string, Packs][]> {
    const names = existsSync(this.dir) ? await readdir(this.dir) : [];
    const owners = names.flatMap((n) =>
      n.endsWith('.json') && isSubTaskWorkflowId(n.slice(0, -5)) ? [n.slice(0, -5)] : [],
    );
    return Promise.all(owners.map(async (owner): Promise<[string, Packs]> => [owner, await this.read(owner)]));
  }

  /** Removes a pack and everything beside it (its index, reverse index, bitmap), the index first. */
  private async removePack(pack: string): Promise<void> {
    const dir = path.join(this.stagingDir, 'objects', 'pack');
    const files = (await readdir(dir).catch(() => [] as string[])).filter((f) => f.startsWith(`${pack}.`));
    files.sort((a, b) => Number(b.endsWith('.idx')) - Number(a.endsWith('.idx')));
    for (const f of files) await rm(path.join(dir, f), { force: true });
  }
}

/** The directory of a run's checkpoint records, for retention to remove with the run. */
export function checkpointRecordsOf(stagingDir: string, runKey: string): string {
  return path.join(stagingDir, 'flotilla', 'checkpoints', runKey);
}
