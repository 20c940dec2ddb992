// A screenshot of a page once it shows some text, through headless Chromium's DevTools protocol
// (Node 20's WebSocket, no browser-automation dependency). The Web UI is a single-page app that
// keeps long-polling a running workflow, so Chromium's own --screenshot either fires before the
// data arrives or never: this waits for what the picture is meant to show.
//
//   node --experimental-websocket scripts/screenshot.mjs <chromium> <url> <out.png> [--click <label>] <text>...
//
// --click: once the page is up, click the link or tab with that label (a tab of the run's page).
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const [chromium, url, out, ...rest] = process.argv.slice(2);
const click = rest[0] === '--click' ? rest[1] : undefined;
const texts = click ? rest.slice(2) : rest;
const profile = mkdtempSync(path.join(os.tmpdir(), 'flotilla-chromium-'));
// --no-sandbox: Chromium refuses to start its sandbox as root. It renders only our own local
// Web UI here, with a throwaway profile.
const browser = spawn(
  chromium,
  [
    '--headless',
    '--no-sandbox',
    '--disable-gpu',
    '--hide-scrollbars',
    `--user-data-dir=${profile}`,
    '--window-size=1440,1000',
    '--remote-debugging-port=0',
    'about:blank',
  ],
  { stdio: ['ignore', 'ignore', 'pipe'] },
);
const stop = (code, message) => {
  if (message) console.error(message);
  // The profile goes once Chromium has stopped writing to it.
  browser.once('exit', () => {
    rmSync(profile, { recursive: true, force: true });
    process.exit(code);
  });
  browser.kill();
};
setTimeout(async () => {
  // What the page showed instead, to see why.
  const shot = await send('Page.captureScreenshot', { format: 'png' }).catch(() => undefined);
  if (shot?.result) writeFileSync(`${out}.timeout.png`, Buffer.from(shot.result.data, 'base64'));
  stop(
    1,
    `timed out waiting for ${texts.join(', ')} on ${url}${shot?.result ? ` (what it showed: ${out}.timeout.png)` : ''}`,
  );
}, 60_000).unref();

const port = await new Promise((resolve) => {
  let seen = '';
  browser.stderr.on('data', (chunk) => {
    seen += chunk;
    const m = /DevTools listening on ws:\/\/[^:]+:(\d+)\//.exec(seen);
    if (m) resolve(m[1]);
  });
});
const targets = await (await fetch(`http://127.0.0.1:${port}/json/list`)).json();
const socket = new WebSocket(targets.find((t) => t.type === 'page').webSocketDebuggerUrl);
await new Promise((resolve) => socket.addEventListener('open', resolve, { once: true }));
let next = 0;
const pending = new Map();
socket.addEventListener('message', (event) => {
  const msg = JSON.parse(event.data);
  pending.get(msg.id)?.(msg);
  pending.delete(msg.id);
});
const send = (method, params = {}) =>
  new Promise((resolve) => {
    const id = ++next;
    pending.set(id, resolve);
    socket.send(JSON.stringify({ id, method, params }));
  });

/** Evaluates `expression` in the page until it is true. */
const until = async (expression) => {
  for (;;) {
    const { result } = await send('Runtime.evaluate', { expression, returnByValue: true });
    if (result?.result?.value === true) return;
    await new Promise((r) => setTimeout(r, 250));
  }
};
await send('Page.navigate', { url });
if (click) {
  const label = JSON.stringify(click);
  await until(
    `(() => { const e = [...document.querySelectorAll('a, button, [role=tab]')].find((x) => x.innerText.trim() === ${label}); if (e) e.click(); return !!e; })()`,
  );
}
// The Web UI renders markdown (summaries, details) in same-origin frames: their text counts too.
const pageText = `[document, ...[...document.querySelectorAll('iframe')].map((f) => f.contentDocument)].map((d) => d?.body?.innerText ?? '').join('\\n')`;
await until(`[${texts.map((t) => JSON.stringify(t)).join(',')}].every((t) => (${pageText}).includes(t))`);
// Let the last requests paint (icons, badges) once the text is there.
await new Promise((r) => setTimeout(r, 1000));
const shot = await send('Page.captureScreenshot', { format: 'png' });
writeFileSync(out, Buffer.from(shot.result.data, 'base64'));
console.log(`wrote ${out}`);
stop(0);
