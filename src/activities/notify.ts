/** Notifications out (request.notify): one delivery per activity, its retries bounded by the workflow. */
import { Context } from '@temporalio/activity';
import { setting } from '../config/variables';
import { permanent } from '../contracts/failures';
import { type Notification, type Target, Undeliverable, deliver } from '../webhooks/deliver';

export function notifyActivities(deps: {
  workflowLink?: (namespace: string, workflowId: string) => string | undefined;
}) {
  return {
    async deliverNotification(input: { target: Target; notification: Notification }): Promise<{ status: number }> {
      const n = { ...input.notification };
      const webUi = deps.workflowLink?.(Context.current().info.workflowNamespace ?? 'default', n.runId);
      if (webUi) n.webUi = webUi;
      try {
        return { status: await deliver(input.target, n, setting('FLOTILLA_NOTIFY_SECRET')) };
      } catch (err) {
        if (err instanceof Undeliverable) throw permanent('Undeliverable', err.message);
        throw err;
      }
    },
  };
}
