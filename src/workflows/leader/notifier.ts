/**
 * Notifications out (request.notify): each event a person should hear of is POSTed to every
 * webhook that wants it, by an activity with short, bounded retries, off the run's critical path.
 * A delivery that fails is a note in the status, never a failure of the run.
 */
import { CancellationScope, proxyActivities } from '@temporalio/workflow';
import type { Activities } from '../../activities';
import type { RunStatus } from '../../contracts/messages';
import type { NotifyEvent, NotifySpec } from '../../contracts/request';
import { rootMessage } from '../../contracts/failures';
import { clip } from '../../contracts/text';

/** The latest failed deliveries the status keeps. */
const FAILURES_KEPT = 10;

const { deliverNotification } = proxyActivities<Activities>({
  startToCloseTimeout: '15 seconds',
  scheduleToCloseTimeout: '2 minutes',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumAttempts: 3 },
});

export class Notifier {
  private readonly pending = new Set<Promise<void>>();

  constructor(
    private readonly runId: string,
    private readonly specs: NotifySpec[],
    private readonly status: RunStatus,
  ) {}

  /** Sends `event` to every webhook that wants it; returns at once. */
  send(event: NotifyEvent, title: string, commands: string[] = []): void {
    const notification = { event, runId: this.runId, title, commands, phase: this.status.phase, at: Date.now() };
    for (const spec of this.specs) {
      if (spec.events && !spec.events.includes(event)) continue;
      const target = { url: spec.url, urlEnv: spec.urlEnv, format: spec.format };
      const notes = (this.status.notifications ??= { sent: 0, failed: [] });
      // In the root scope, not the caller's: a handler or a round that ends does not cancel it.
      const sent = CancellationScope.nonCancellable(() => deliverNotification({ target, notification })).then(
        () => void notes.sent++,
        (err: unknown) => {
          const reason = clip(rootMessage(err), 300);
          const to = spec.urlEnv ? `$${spec.urlEnv}` : originOf(spec.url!);
          notes.failed = [...notes.failed, { event, to, reason, at: Date.now() }].slice(-FAILURES_KEPT);
        },
      );
      this.pending.add(sent);
      void sent.finally(() => this.pending.delete(sent));
    }
  }

  /** Waits for every delivery under way (the run's end waits for its own notification). */
  async drain(): Promise<void> {
    await Promise.all([...this.pending]);
  }
}

/** A webhook URL as the status shows it: its origin only (a path may be the secret). */
function originOf(url: string): string {
  return `${/^[a-z]+:\/\/[^/?#]*/i.exec(url)?.[0] ?? 'a webhook'}/…`;
}
