import { describe, expect, it } from 'vitest';
import { pullRequestUrl, receiverSettings } from '../../src/webhooks/receiver';

describe("the worker's webhook receiver", () => {
  it('is off unless FLOTILLA_WEBHOOK_LISTEN is set, and refused without its secret', () => {
    expect(receiverSettings({})).toBeUndefined();
    expect(() => receiverSettings({ FLOTILLA_WEBHOOK_LISTEN: '0.0.0.0:8787' })).toThrow(
      /FLOTILLA_WEBHOOK_LISTEN needs FLOTILLA_WEBHOOK_SECRET/,
    );
    expect(() => receiverSettings({ FLOTILLA_WEBHOOK_LISTEN: 'http://x:1', FLOTILLA_WEBHOOK_SECRET: 's' })).toThrow(
      /FLOTILLA_WEBHOOK_LISTEN must be `host:port`/,
    );
    expect(receiverSettings({ FLOTILLA_WEBHOOK_LISTEN: '[::1]:0', FLOTILLA_WEBHOOK_SECRET: 's' })).toEqual({
      listen: '[::1]:0',
      secret: 's',
    });
  });

  it("takes the PR's page from a review's, a review comment's or an issue comment's delivery, and nothing else", () => {
    const url = 'https://github.com/acme/shop/pull/7';
    const of = (payload: unknown) => pullRequestUrl(Buffer.from(JSON.stringify(payload)));
    expect(of({ pull_request: { html_url: url } })).toBe(url);
    expect(of({ issue: { html_url: url, pull_request: { html_url: url } } })).toBe(url);
    expect(of({ issue: { html_url: 'https://github.com/acme/shop/issues/8' } })).toBeUndefined();
    expect(of({ pull_request: { html_url: 'javascript: alert(1)' } })).toBeUndefined();
    expect(of({ pull_request: { html_url: 7 } })).toBeUndefined();
    expect(of(null)).toBeUndefined();
    expect(pullRequestUrl(Buffer.from('{not json'))).toBeUndefined();
  });
});
