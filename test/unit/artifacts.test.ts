/** The artifact store's claims against gc, on a real directory, with the race made to happen. */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ArtifactStore } from '../../src/store/artifacts';
import { tempDir } from '../support/temp';

describe('artifact claims', () => {
  it('a log a run claimed after gc chose it, or stores while gc has it hidden, is kept', async () => {
    const dir = path.join(tempDir('claims'), 'artifacts');
    const written = async (store: ArtifactStore, runKey: string, text: string) => {
      const w = await store.writer(runKey);
      w.write(text);
      return (await w.close()).slice('sha256:'.length);
    };
    // A run claims the log between prune hiding it and re-reading the claims: it comes back.
    let late: (() => Promise<unknown>) | undefined;
    class Racing extends ArtifactStore {
      async claims() {
        await late?.();
        late = undefined;
        return super.claims();
      }
    }
    const store = new Racing(dir);
    const shared = await written(store, 'old-run', 'the same output\n');
    const reused = await written(store, 'old-run', 'output a new run repeats\n');
    const own = await written(store, 'old-run', 'only the old run wrote this\n');
    // A new run stored this after gc read the claims (the file was there, so it wrote nothing).
    await written(new ArtifactStore(dir), 'new-run', 'output a new run repeats\n');
    late = () => written(new ArtifactStore(dir), 'new-run', 'the same output\n');
    expect(await store.prune([shared, reused, own], new Set(['old-run']))).toMatchObject({ removed: 1 });
    expect((await new ArtifactStore(dir).get(`sha256:${shared}`)).toString()).toBe('the same output\n');
    expect((await new ArtifactStore(dir).get(`sha256:${reused}`)).toString()).toBe('output a new run repeats\n');
    expect(existsSync(store.pathOf(`sha256:${own}`))).toBe(false);
    expect([...(await new ArtifactStore(dir).claims()).keys()]).toEqual(['new-run']);
  });
});
