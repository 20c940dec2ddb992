/** How every bench script runs: its body, and on a failure the message, its scratch directory removed, exit 1. */
import { rmSync } from 'node:fs';

export function runBench(name: string, root: string, body: () => Promise<void>): void {
  body().catch((err) => {
    console.error(`${name} failed: ${err instanceof Error ? (err.stack ?? err.message) : err}`);
    rmSync(root, { recursive: true, force: true });
    process.exit(1);
  });
}
