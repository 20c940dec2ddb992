/** The review phase and the notifications, as `flotilla status`, `watch` and a run's end show them. */
import type { NotificationsReport } from '../../contracts/messages';
import type { ReviewReport, ReviewRound } from '../../contracts/review';
import { usd } from './units';

export function formatReview(review: ReviewReport | undefined): string[] {
  if (!review) return [];
  const taken = `${review.rounds.length} of ${review.maxRounds} round(s) taken`;
  const state = review.waiting
    ? `waiting for comments on ${review.headSha} (${taken})`
    : review.endedBy
      ? `ended by ${review.endedBy}: ${review.ended ?? ''} (${taken})`
      : `a round runs (${taken})`;
  const lines = [`review:    ${state}`];
  if (review.waiting) for (const c of review.commands ?? []) lines.push(`  ${c}`);
  for (const r of review.rounds) lines.push(...roundLines(r));
  return lines;
}

function roundLines(r: ReviewRound): string[] {
  const head = `  round ${r.round} by ${r.by}: ${r.outcome ?? 'running'}${r.message ? ` — ${r.message}` : ''}`;
  const did = r.subTasks.map(
    (s) =>
      `    ${s.subTaskId} (${s.attemptId}): ${s.state}, ${s.filesChanged} file(s), ${usd(s.costUsd)}${s.reason ? ` — ${s.reason}` : ''}`,
  );
  const replies = r.replies.map((p) => `    reply to ${p.commentId}${p.path ? ` on ${p.path}` : ''}: ${p.reply}`);
  return [head, ...did, ...replies];
}

export function formatNotifications(n: NotificationsReport | undefined): string[] {
  if (!n) return [];
  const latest = n.failed.at(-1);
  const failed = latest
    ? `; not delivered: ${n.failed.length} (latest: ${latest.event} to ${latest.to}: ${latest.reason})`
    : '';
  return [`notified:  ${n.sent} sent${failed}`];
}

/** The review phase and notifications as [key, line] facts (see statusFacts). */
export function reviewFacts(review: ReviewReport | undefined, n: NotificationsReport | undefined): [string, string][] {
  const facts: [string, string][] = [];
  if (review)
    facts.push([
      'review',
      formatReview({ ...review, rounds: [] })
        .join('; ')
        .trim(),
    ]);
  for (const r of review?.rounds ?? []) facts.push([`review round ${r.round}`, roundLines(r).join('; ').trim()]);
  const notified = formatNotifications(n)[0];
  if (notified) facts.push(['notified', notified]);
  return facts;
}
