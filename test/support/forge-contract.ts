/**
 * The forge contract: what Flotilla needs of a forge (src/forge/types.ts), as tests any
 * implementation must pass. Run against the GitHub double (test/support/github-double.ts) and
 * against real GitHub when FLOTILLA_TEST_GITHUB_TOKEN and FLOTILLA_TEST_GITHUB_REPO are set.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { FLOTILLA_MARK } from '../../src/forge/github';
import type { Forge } from '../../src/forge/types';

/** A repository on a forge, and what the people and CI around it do there. */
export interface ForgeSubject {
  forge: Forge;
  /** The branch PRs merge into. */
  base: string;
  /** A new branch with one commit the base lacks; its head sha. */
  branch(name: string): Promise<string>;
  /** A comment on a PR or issue by someone (real GitHub: the token's own user, unmarked). */
  comment(number: number, body: string): Promise<number>;
  /** A review comment on a line, and a review (the double only: GitHub will not let a user review their own PR). */
  reviewComment?(pr: number, body: string, path: string, line: number): Promise<number>;
  review?(pr: number, state: 'APPROVED' | 'CHANGES_REQUESTED', body: string): Promise<number>;
  /** A commit status of `sha` reported by CI. */
  status(sha: string, context: string, state: 'success' | 'failure'): Promise<void>;
  /** An issue to read and comment on. */
  issue(title: string, body: string): Promise<number>;
  /** How many comments and review comments on PR `number` carry Flotilla's mark. */
  marked(number: number): Promise<number>;
  /** Closes a PR and removes its branch (cleanup on a real forge). */
  close(pr: number, branch: string): Promise<void>;
}

export function forgeContract(name: string, subject: () => Promise<ForgeSubject>): void {
  describe(`forge contract: ${name}`, () => {
    const branchName = () => `flotilla-contract/${randomUUID().slice(0, 8)}`;

    it('opens exactly one PR per head branch, finds it by its head, and reads its state', async () => {
      const s = await subject();
      const head = branchName();
      const sha = await s.branch(head);
      expect(await s.forge.findPullRequest(head)).toBeUndefined();
      const pr = await s.forge.openPullRequest({ head, base: s.base, title: 'Contract', body: 'first', draft: true });
      try {
        expect(pr).toMatchObject({
          state: 'open',
          draft: true,
          head,
          headSha: sha,
          base: s.base,
          title: 'Contract',
          body: 'first',
        });
        expect(pr.url).toMatch(/^https?:\/\/.+\/pull\/\d+$/);
        expect(await s.forge.findPullRequest(head)).toMatchObject({ number: pr.number });
        // A second PR for the same head is refused: the forge itself never duplicates one.
        await expect(
          s.forge.openPullRequest({ head, base: s.base, title: 'Again', body: 'x', draft: false }),
        ).rejects.toMatchObject({ status: 422 });
        expect(await s.forge.pullRequest(pr.number)).toMatchObject({ number: pr.number, state: 'open', headSha: sha });
      } finally {
        await s.close(pr.number, head);
      }
    });

    it('updates the title, the body and the draft state', async () => {
      const s = await subject();
      const head = branchName();
      await s.branch(head);
      const pr = await s.forge.openPullRequest({ head, base: s.base, title: 'Before', body: 'old', draft: true });
      try {
        const updated = await s.forge.updatePullRequest(pr.number, { title: 'After', body: 'new', draft: false });
        expect(updated).toMatchObject({ title: 'After', body: 'new', draft: false });
        expect(await s.forge.pullRequest(pr.number)).toMatchObject({ title: 'After', body: 'new', draft: false });
      } finally {
        await s.close(pr.number, head);
      }
    });

    it('lists review activity after a cursor, leaves out its own replies, and replies', async () => {
      const s = await subject();
      const head = branchName();
      await s.branch(head);
      const pr = await s.forge.openPullRequest({ head, base: s.base, title: 'Reviewed', body: 'b', draft: false });
      try {
        const first = await s.forge.reviewActivity(pr.number);
        expect(first.comments).toEqual([]);
        const id = await s.comment(pr.number, 'please rename the function');
        const line = s.reviewComment && (await s.reviewComment(pr.number, 'typo here', 'README.md', 1));
        const changes = s.review && (await s.review(pr.number, 'CHANGES_REQUESTED', 'not yet'));
        const after = await s.forge.reviewActivity(pr.number, first.cursor);
        expect(after.comments).toContainEqual(
          expect.objectContaining({ id: `issue-comment:${id}`, body: 'please rename the function', kind: 'comment' }),
        );
        if (line)
          expect(after.comments).toContainEqual(
            expect.objectContaining({ id: `review-comment:${line}`, path: 'README.md', line: 1, kind: 'comment' }),
          );
        if (changes)
          expect(after.comments).toContainEqual(
            expect.objectContaining({ id: `review:${changes}`, kind: 'changes-requested' }),
          );
        for (const c of after.comments) await s.forge.replyToComment(pr.number, c.id, `done: ${c.id}`);
        expect(await s.marked(pr.number)).toBe(after.comments.length);
        // Sent again (an activity retried after the forge took its reply): nothing more is posted.
        for (const c of after.comments) await s.forge.replyToComment(pr.number, c.id, `done: ${c.id}`);
        expect(await s.marked(pr.number)).toBe(after.comments.length);
        // The replies carry Flotilla's mark, so they are not review activity; nothing new came in.
        const later = await s.forge.reviewActivity(pr.number, after.cursor);
        expect(later.comments).toEqual([]);
        const all = await s.forge.reviewActivity(pr.number);
        expect(all.comments.map((c) => c.id).sort()).toEqual(after.comments.map((c) => c.id).sort());
        expect(all.comments.some((c) => c.body.includes(FLOTILLA_MARK))).toBe(false);
        await expect(s.forge.replyToComment(pr.number, 'nonsense', 'x')).rejects.toThrow(/commentId/);
      } finally {
        await s.close(pr.number, head);
      }
    });

    it("reads a commit's statuses with their conclusions", async () => {
      const s = await subject();
      const head = branchName();
      const sha = await s.branch(head);
      try {
        await s.status(sha, 'contract/lint', 'failure');
        await s.status(sha, 'contract/unit', 'success');
        const checks = await s.forge.checks(sha, s.base);
        expect(checks).toContainEqual(
          expect.objectContaining({ name: 'contract/lint', status: 'completed', conclusion: 'failure' }),
        );
        expect(checks).toContainEqual(
          expect.objectContaining({ name: 'contract/unit', status: 'completed', conclusion: 'success' }),
        );
      } finally {
        await s.close(0, head);
      }
    });

    it('reads an issue and comments on it', async () => {
      const s = await subject();
      const number = await s.issue('Contract issue', 'the body\nof the issue');
      const issue = await s.forge.issue(number);
      expect(issue).toMatchObject({ number, title: 'Contract issue', body: 'the body\nof the issue', state: 'open' });
      expect(issue.url).toMatch(new RegExp(`/issues/${number}$`));
      const made = await s.forge.commentOnIssue(number, 'working on it');
      const comments = await s.forge.issueComments(number);
      expect(comments).toContainEqual(expect.objectContaining({ id: made.id }));
      expect(comments.find((c) => c.id === made.id)!.body).toContain('working on it');
    });
  });
}
