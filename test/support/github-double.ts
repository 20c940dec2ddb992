/**
 * A stand-in for GitHub's REST API (and the two GraphQL mutations that change a PR's draft
 * state): a real HTTP server on loopback that the real Octokit client talks to, written from
 * GitHub's documented REST shapes (docs.github.com/rest: pulls, issues, checks, commit statuses,
 * branch protection). It keeps one repository's pull requests, comments, reviews, checks and
 * issues in memory, and behaves as GitHub does where Flotilla depends on it:
 *
 * - every request must carry the token (`Authorization: token …` or `Bearer …`): 401 otherwise;
 * - creating a second open PR for the same head is refused with 422, as is a head branch that
 *   does not exist (when the double can see the branches: `branchSha`);
 * - a PR's head sha follows its branch; `merged_at` is set once it is merged;
 * - lists come in one page (no Link header), so Octokit's paginate stops after it.
 *
 * `hold` makes the next request matching a route wait until released: a test kills the worker
 * while GitHub has done the work but its answer has not arrived.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { releaseAtEnd } from './cleanup';

interface User {
  login: string;
  id: number;
  type: 'User';
}

export interface DoublePull {
  id: number;
  node_id: string;
  number: number;
  state: 'open' | 'closed';
  draft: boolean;
  merged_at: string | null;
  title: string;
  body: string | null;
  head: { ref: string; sha: string; label: string };
  base: { ref: string; sha: string; label: string };
  labels: { name: string }[];
  requested_reviewers: User[];
  requested_teams: { slug: string }[];
  created_at: string;
}

interface DoubleComment {
  id: number;
  body: string;
  user: User;
  created_at: string;
  path?: string;
  line?: number;
  in_reply_to_id?: number;
  issue: number;
}

interface DoubleReview {
  id: number;
  body: string;
  state: 'APPROVED' | 'CHANGES_REQUESTED' | 'COMMENTED';
  user: User;
  submitted_at: string;
  pull: number;
}

export interface DoubleCheck {
  name: string;
  status: 'queued' | 'in_progress' | 'completed';
  conclusion?: string;
  summary?: string;
  details_url?: string;
}

export interface DoubleStatus {
  context: string;
  state: 'pending' | 'success' | 'failure' | 'error';
  description?: string;
  target_url?: string;
}

export interface RecordedCall {
  method: string;
  path: string;
  authorized: boolean;
  body: unknown;
}

export interface GitHubDoubleOptions {
  owner?: string;
  name?: string;
  token: string;
  /** The sha of a branch of the repository (null: no such branch); by default every branch exists. */
  branchSha?: (branch: string) => Promise<string | null>;
  /** The login the token belongs to. */
  login?: string;
}

type Handler = (
  m: RegExpMatchArray,
  body: any,
  query: URLSearchParams,
) => Promise<[number, unknown]> | [number, unknown];

export class GitHubDouble {
  readonly calls: RecordedCall[] = [];
  readonly pulls: DoublePull[] = [];
  readonly issues = new Map<number, { title: string; body: string; state: 'open' | 'closed' }>();
  readonly comments: DoubleComment[] = [];
  readonly reviewComments: DoubleComment[] = [];
  readonly reviews: DoubleReview[] = [];
  readonly checkRuns = new Map<string, DoubleCheck[]>();
  readonly statuses = new Map<string, DoubleStatus[]>();
  /** Required checks of protected branches; a branch not here is unprotected (404). */
  readonly protection = new Map<string, string[]>();
  /** Requests answered 403 on branch protection (a token that may not read it). */
  protectionForbidden = false;
  /**
   * CI: the check runs and statuses of a commit that `checkRuns` and `statuses` hold none for,
   * made when they are read (a test's CI that looks at what was pushed).
   */
  ci?: (sha: string) => Promise<{ checkRuns?: DoubleCheck[]; statuses?: DoubleStatus[] }>;
  private nextId = 1000;
  private held?: { route: RegExp; reached: () => void; release: Promise<void> };
  readonly owner: string;
  readonly name: string;
  readonly login: string;
  private readonly routes: [string, RegExp, Handler][];

  private constructor(
    private readonly server: Server,
    readonly url: string,
    private readonly options: GitHubDoubleOptions,
  ) {
    this.owner = options.owner ?? 'acme';
    this.name = options.name ?? 'widgets';
    this.login = options.login ?? 'flotilla-bot';
    this.routes = this.table();
  }

  /** A double on a free loopback port, stopped when the test (or file) ends. */
  static async start(options: GitHubDoubleOptions): Promise<GitHubDouble> {
    let double: GitHubDouble | undefined;
    const server = createServer((req, res) => void double!.serve(req, res));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    double = new GitHubDouble(server, url, options);
    releaseAtEnd(() => double!.stop());
    return double;
  }

  /** The repository's address for Flotilla: `forge: { kind: github, repo, baseUrl }`. */
  get forge() {
    return { kind: 'github' as const, repo: `${this.owner}/${this.name}`, baseUrl: this.url };
  }

  /** The host:port the token must be allowed for (FLOTILLA_GIT_TOKEN_HOSTS). */
  get host(): string {
    return new URL(this.url).host;
  }

  stop(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }

  // ---- What a test does as the people and CI around the repository ----

  addIssue(number: number, title: string, body: string): string {
    this.issues.set(number, { title, body, state: 'open' });
    return `${this.url}/${this.owner}/${this.name}/issues/${number}`;
  }

  /** A review comment on a line of a file, by `login`. */
  addReviewComment(pull: number, login: string, body: string, path: string, line: number): number {
    const c = { id: this.id(), body, user: user(login), created_at: now(), path, line, issue: pull };
    this.reviewComments.push(c);
    return c.id;
  }

  addComment(issue: number, login: string, body: string): number {
    const c = { id: this.id(), body, user: user(login), created_at: now(), issue };
    this.comments.push(c);
    return c.id;
  }

  addReview(pull: number, login: string, state: DoubleReview['state'], body = ''): number {
    const r = { id: this.id(), body, state, user: user(login), submitted_at: now(), pull };
    this.reviews.push(r);
    return r.id;
  }

  merge(number: number): void {
    Object.assign(this.pull(number)!, { state: 'closed', merged_at: now() });
  }

  /** Closed without merging. */
  close(number: number): void {
    this.pull(number)!.state = 'closed';
  }

  /**
   * The next request whose "METHOD path" matches `route` waits until the returned release is
   * called; `reached` resolves once it has arrived (and, for a write, been done).
   */
  hold(route: RegExp): { reached: Promise<void>; release: () => void } {
    let release!: () => void;
    let reached!: () => void;
    const arrived = new Promise<void>((r) => (reached = r));
    this.held = { route, reached, release: new Promise<void>((r) => (release = r)) };
    return { reached: arrived, release };
  }

  pull(number: number): DoublePull | undefined {
    return this.pulls.find((p) => p.number === number);
  }

  // ---- The API ----

  private async serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', this.url);
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const text = Buffer.concat(chunks).toString('utf8');
    const body = text ? JSON.parse(text) : undefined;
    const auth = req.headers.authorization ?? '';
    const authorized = auth === `token ${this.options.token}` || auth === `Bearer ${this.options.token}`;
    const key = `${req.method} ${url.pathname}`;
    this.calls.push({ method: req.method ?? '', path: url.pathname, authorized, body });
    const [status, payload] = authorized
      ? await this.route(key, body, url.searchParams)
      : [401, { message: 'Bad credentials', documentation_url: 'https://docs.github.com/rest' }];
    const held = this.held;
    if (held && held.route.test(key)) {
      this.held = undefined;
      held.reached();
      await held.release;
    }
    res.writeHead(status, { 'content-type': 'application/json; charset=utf-8' });
    res.end(payload === undefined ? '' : JSON.stringify(payload));
  }

  private async route(key: string, body: any, query: URLSearchParams): Promise<[number, unknown]> {
    for (const [method, pattern, handler] of this.routes) {
      if (!key.startsWith(`${method} `)) continue;
      const m = key.slice(method.length + 1).match(pattern);
      if (m) return handler(m, body, query);
    }
    return [404, { message: 'Not Found' }];
  }

  private table(): [string, RegExp, Handler][] {
    const repo = `^/repos/${this.owner}/${this.name}`;
    const r = (tail: string) => new RegExp(`${repo}${tail}$`);
    return [
      ['GET', r('/pulls'), (_m, _b, q) => [200, this.listPulls(q).map((p) => this.pullJson(p))]],
      ['POST', r('/pulls'), (_m, b) => this.createPull(b)],
      ['GET', r('/pulls/(\\d+)'), (m) => this.withPull(m, (p) => [200, this.pullJson(p)])],
      ['PATCH', r('/pulls/(\\d+)'), (m, b) => this.withPull(m, (p) => this.updatePull(p, b))],
      ['POST', r('/pulls/(\\d+)/requested_reviewers'), (m, b) => this.withPull(m, (p) => this.requestReviewers(p, b))],
      [
        'GET',
        r('/pulls/(\\d+)/comments'),
        (m) => [200, this.reviewComments.filter((c) => c.issue === +m[1]).map(reviewCommentJson)],
      ],
      ['POST', r('/pulls/(\\d+)/comments/(\\d+)/replies'), (m, b) => this.reply(m, b)],
      ['GET', r('/pulls/(\\d+)/reviews'), (m) => [200, this.reviews.filter((x) => x.pull === +m[1]).map(reviewJson)]],
      ['POST', r('/issues/(\\d+)/labels'), (m, b) => this.withPull(m, (p) => this.label(p, b))],
      [
        'GET',
        r('/issues/(\\d+)/comments'),
        (m) => [200, this.comments.filter((c) => c.issue === +m[1]).map(commentJson)],
      ],
      ['POST', r('/issues/(\\d+)/comments'), (m, b) => this.comment(+m[1], b)],
      ['GET', r('/issues/(\\d+)'), (m) => this.issueJson(+m[1])],
      ['GET', r('/commits/([^/]+)/check-runs'), async (m) => [200, this.checkRunsJson(m[1], await this.ranCi(m[1]))]],
      ['GET', r('/commits/([^/]+)/status'), async (m) => [200, this.statusJson(m[1], await this.ranCi(m[1]))]],
      [
        'GET',
        r('/branches/(.+)/protection/required_status_checks'),
        (m) => this.protectionJson(decodeURIComponent(m[1])),
      ],
      ['POST', /^\/graphql$/, (_m, b) => this.graphql(b)],
    ];
  }

  private id(): number {
    return ++this.nextId;
  }

  private listPulls(q: URLSearchParams): DoublePull[] {
    const state = q.get('state') ?? 'open';
    const head = q.get('head');
    return this.pulls.filter(
      (p) => (state === 'all' || p.state === state) && (!head || `${this.owner}:${p.head.ref}` === head),
    );
  }

  private async headSha(branch: string): Promise<string | null> {
    return this.options.branchSha ? this.options.branchSha(branch) : '0'.repeat(40);
  }

  private async createPull(b: any): Promise<[number, unknown]> {
    if (typeof b?.head !== 'string' || typeof b?.base !== 'string' || typeof b?.title !== 'string')
      return validation('PullRequest', 'missing_field');
    const sha = await this.headSha(b.head);
    if (sha === null) return validation('PullRequest', 'invalid', 'head');
    if (this.pulls.some((p) => p.state === 'open' && p.head.ref === b.head))
      return [
        422,
        {
          message: 'Validation Failed',
          errors: [
            {
              resource: 'PullRequest',
              code: 'custom',
              message: `A pull request already exists for ${this.owner}:${b.head}.`,
            },
          ],
        },
      ];
    const number = this.nextNumber();
    const label = (ref: string) => `${this.owner}:${ref}`;
    const pull: DoublePull = {
      id: this.id(),
      node_id: `PR_${number}`,
      number,
      state: 'open',
      draft: b.draft === true,
      merged_at: null,
      title: b.title,
      body: b.body ?? null,
      head: { ref: b.head, sha, label: label(b.head) },
      base: { ref: b.base, sha: (await this.headSha(b.base)) ?? '0'.repeat(40), label: label(b.base) },
      labels: [],
      requested_reviewers: [],
      requested_teams: [],
      created_at: now(),
    };
    this.pulls.push(pull);
    return [201, this.pullJson(pull)];
  }

  /** Pull requests and issues share their numbers, as on GitHub. */
  private nextNumber(): number {
    return Math.max(0, ...this.pulls.map((p) => p.number), ...this.issues.keys()) + 1;
  }

  private async withPull(m: RegExpMatchArray, act: (p: DoublePull) => [number, unknown] | Promise<[number, unknown]>) {
    const p = this.pull(+m[1]);
    if (!p) return [404, { message: 'Not Found' }] as [number, unknown];
    p.head.sha = (await this.headSha(p.head.ref)) ?? p.head.sha;
    return act(p);
  }

  private updatePull(p: DoublePull, b: any): [number, unknown] {
    if (typeof b?.title === 'string') p.title = b.title;
    if (typeof b?.body === 'string') p.body = b.body;
    if (b?.state === 'closed' || b?.state === 'open') p.state = b.state;
    return [200, this.pullJson(p)];
  }

  private requestReviewers(p: DoublePull, b: any): [number, unknown] {
    for (const login of b?.reviewers ?? []) p.requested_reviewers.push(user(login));
    for (const slug of b?.team_reviewers ?? []) p.requested_teams.push({ slug });
    return [201, this.pullJson(p)];
  }

  private label(p: DoublePull, b: any): [number, unknown] {
    for (const name of b?.labels ?? []) if (!p.labels.some((l) => l.name === name)) p.labels.push({ name });
    return [200, p.labels.map((l) => ({ name: l.name, color: 'ededed' }))];
  }

  private reply(m: RegExpMatchArray, b: any): [number, unknown] {
    const to = this.reviewComments.find((c) => c.id === +m[2] && c.issue === +m[1]);
    if (!to) return [404, { message: 'Not Found' }];
    const c = {
      id: this.id(),
      body: String(b?.body ?? ''),
      user: user(this.login),
      created_at: now(),
      path: to.path,
      line: to.line,
      in_reply_to_id: to.id,
      issue: to.issue,
    };
    this.reviewComments.push(c);
    return [201, reviewCommentJson(c)];
  }

  private comment(issue: number, b: any): [number, unknown] {
    if (!this.issues.has(issue) && !this.pull(issue)) return [404, { message: 'Not Found' }];
    if (typeof b?.body !== 'string') return validation('IssueComment', 'missing_field', 'body');
    const c = { id: this.id(), body: b.body, user: user(this.login), created_at: now(), issue };
    this.comments.push(c);
    return [201, commentJson(c)];
  }

  private issueJson(number: number): [number, unknown] {
    const issue = this.issues.get(number);
    const pull = this.pull(number);
    if (!issue && !pull) return [404, { message: 'Not Found' }];
    const html_url = `${this.url}/${this.owner}/${this.name}/${issue ? 'issues' : 'pull'}/${number}`;
    const fields = issue ?? { title: pull!.title, body: pull!.body, state: pull!.state };
    return [
      200,
      {
        id: number,
        number,
        html_url,
        ...fields,
        user: user('someone'),
        ...(pull && { pull_request: { url: html_url } }),
      },
    ];
  }

  /** What `ci` says of `sha`, for what the maps do not hold. */
  private async ranCi(sha: string) {
    return (this.checkRuns.has(sha) && this.statuses.has(sha)) || !this.ci ? {} : await this.ci(sha);
  }

  private checkRunsJson(sha: string, ci: { checkRuns?: DoubleCheck[] }) {
    const runs = (this.checkRuns.get(sha) ?? ci.checkRuns ?? []).map((c, i) => ({
      id: i + 1,
      name: c.name,
      head_sha: sha,
      status: c.status,
      conclusion: c.conclusion ?? null,
      details_url: c.details_url ?? null,
      output: { title: null, summary: c.summary ?? null, text: null },
    }));
    return { total_count: runs.length, check_runs: runs };
  }

  private statusJson(sha: string, ci: { statuses?: DoubleStatus[] }) {
    const statuses = (this.statuses.get(sha) ?? ci.statuses ?? []).map((s, i) => ({
      id: i + 1,
      context: s.context,
      state: s.state,
      description: s.description ?? null,
      target_url: s.target_url ?? null,
    }));
    const state = statuses.some((s) => s.state === 'failure' || s.state === 'error')
      ? 'failure'
      : statuses.some((s) => s.state === 'pending')
        ? 'pending'
        : 'success';
    return { sha, state, total_count: statuses.length, statuses };
  }

  private protectionJson(branch: string): [number, unknown] {
    if (this.protectionForbidden) return [403, { message: 'Resource not accessible by integration' }];
    const contexts = this.protection.get(branch);
    if (!contexts) return [404, { message: 'Branch not protected' }];
    return [200, { strict: false, contexts, checks: contexts.map((context) => ({ context, app_id: null })) }];
  }

  private graphql(b: any): [number, unknown] {
    const query = String(b?.query ?? '');
    const p = this.pulls.find((x) => x.node_id === b?.variables?.id);
    const mutation = query.match(/(markPullRequestReadyForReview|convertPullRequestToDraft)/)?.[1];
    if (!p || !mutation)
      return [200, { data: null, errors: [{ type: 'NOT_FOUND', message: 'Could not resolve to a node' }] }];
    p.draft = mutation === 'convertPullRequestToDraft';
    return [200, { data: { [mutation]: { clientMutationId: null } } }];
  }

  private pullJson(p: DoublePull) {
    const html_url = `${this.url}/${this.owner}/${this.name}/pull/${p.number}`;
    return {
      ...p,
      url: `${this.url}/repos/${this.owner}/${this.name}/pulls/${p.number}`,
      html_url,
      merged: p.merged_at !== null,
      user: user(this.login),
    };
  }
}

function user(login: string): User {
  return { login, id: login.length, type: 'User' };
}

function now(): string {
  return new Date().toISOString();
}

function validation(resource: string, code: string, field?: string): [number, unknown] {
  return [422, { message: 'Validation Failed', errors: [{ resource, code, ...(field && { field }) }] }];
}

function commentJson(c: DoubleComment) {
  return { id: c.id, body: c.body, user: c.user, created_at: c.created_at, updated_at: c.created_at };
}

function reviewCommentJson(c: DoubleComment) {
  return {
    ...commentJson(c),
    path: c.path,
    line: c.line ?? null,
    ...(c.in_reply_to_id && { in_reply_to_id: c.in_reply_to_id }),
  };
}

function reviewJson(r: DoubleReview) {
  return { id: r.id, body: r.body, state: r.state, user: r.user, submitted_at: r.submitted_at };
}
