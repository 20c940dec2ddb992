/** Provisions a local sandbox under argv[2], runs one command in it, prints its output (test/sandbox.netns.test.ts). */
import { LocalSandboxProvider } from '../../src/sandbox/local/provider';

(async () => {
  const provider = new LocalSandboxProvider(process.argv[2], {});
  const sb = await provider.provision('netns/one', { network: false });
  const r = await sb.exec('echo "sandbox says hi"', { timeoutMs: 20_000 });
  console.log(`exit ${r.exitCode}: ${r.output.trim()}`);
  await provider.destroy('netns/one');
})().catch((err) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
