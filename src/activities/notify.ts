/** Notifications out (request.notify): one delivery per activity, its retries bounded by the workflow. */
import { setting } from '../config/variables';
import { permanent } from '../contracts/failures';
import { type Notification, type Target, Undeliverable, deliver } from '../webhooks/deliver';

export function notifyActivities(deps: { uiUrl?: string; namespace?: string }) {
  return {
    async deliverNotification(input: { target: Target; notification: Notification }): Promise<{ status: number }> {
      const { uiUrl, namespace } = deps;
      const n = { ...input.notification };
      if (uiUrl && namespace)
        n.webUi = `${uiUrl}/namespaces/${encodeURIComponent(namespace)}/workflows/${encodeURIComponent(n.runId)}`;
      try {
        return { status: await deliver(input.target, n, setting('FLOTILLA_NOTIFY_SECRET')) };
      } catch (err) {
        if (err instanceof Undeliverable) throw permanent('Undeliverable', err.message);
        throw err;
      }
    },
  };
}
