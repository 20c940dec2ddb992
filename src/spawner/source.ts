/**
 * The spawner's program: a small Node process that starts programs for the worker (see
 * index.ts). Kept as source text run with `node -e`, so the same spawner starts from the built
 * package and from the TypeScript sources alike, with nothing loaded but Node's own modules.
 *
 * It listens on a Unix socket in a directory of mode 0700, which only the worker's user may enter
 * (and which no sandbox sees: test/e2e/attacks/sandbox.test.ts). For each program the worker
 * sends a request over the IPC channel and connects one socket per piped stdio entry, each
 * opening with a fixed-width header (the request's id and the entry's index). Once a request has
 * all its sockets, the spawner starts the program with those sockets as its stdio and closes its
 * own copies: the program's output goes straight to the worker, and the spawner only reports the
 * pid, the exit and errors. It reads nothing past a header: the worker writes a program's stdin
 * only once the spawner said it started.
 */
export const HEADER_BYTES = 16;

export const SPAWNER_SOURCE = String.raw`
const net = require('net'), fs = require('fs'), path = require('path'), { spawn } = require('child_process');
const HEADER = ${HEADER_BYTES};
const [sockPath] = process.argv.slice(1);
const pending = new Map();   // id -> { req, socks: [] }
const running = new Map();   // id -> ChildProcess
const send = (m) => process.connected && process.send(m);

function entry(id) {
  let e = pending.get(id);
  if (!e) pending.set(id, (e = { socks: [] }));
  return e;
}

function ready(id) {
  const e = pending.get(id);
  if (!e || !e.req || e.socks.filter(Boolean).length < e.req.piped) return;
  pending.delete(id);
  const { file, args, options, stdio } = e.req;
  // Node made these sockets non-blocking, a mode the program would share: a read with nothing yet
  // written would fail (EAGAIN) instead of waiting, as bwrap's --block-fd must wait (bwrap.ts).
  for (const s of e.socks) if (s) s._handle.readStop(), s._handle.setBlocking(true);
  const child = spawn(file, args, { ...options, stdio: stdio.map((s, i) => (s === 'pipe' ? e.socks[i] : s)) });
  for (const s of e.socks) if (s) s.destroy();
  if (e.kill) child.kill(e.kill);
  child.on('error', (err) => {
    running.delete(id);
    send({ id, error: { message: err.message, code: err.code, errno: err.errno, syscall: err.syscall, path: err.path } });
  });
  if (child.pid === undefined) return;
  running.set(id, child);
  send({ id, pid: child.pid });
  child.on('exit', (code, signal) => {
    running.delete(id);
    send({ id, exit: [code, signal] });
  });
}

process.on('message', (m) => {
  if (m.kill !== undefined) {
    const child = running.get(m.id);
    if (child) child.kill(m.kill);
    else if (pending.has(m.id)) pending.get(m.id).kill = m.kill;
    return;
  }
  entry(m.id).req = m;
  ready(m.id);
});
// The worker is gone: so is the spawner (the programs it started are the worker's to have killed).
process.on('disconnect', () => {
  fs.rmSync(path.dirname(sockPath), { recursive: true, force: true });
  process.exit(0);
});

const server = net.createServer({ pauseOnConnect: true }, (sock) => {
  sock.on('error', () => undefined);
  let head = Buffer.alloc(0);
  const onReadable = () => {
    let chunk;
    while (head.length < HEADER && (chunk = sock.read(HEADER - head.length)) !== null) head = Buffer.concat([head, chunk]);
    if (head.length < HEADER) return;
    sock.off('readable', onReadable);
    sock.pause();
    const [id, index] = head.toString().trim().split(':').map(Number);
    entry(id).socks[index] = sock;
    ready(id);
  };
  sock.on('readable', onReadable);
});
server.listen(sockPath, () => send({ listening: true }));
`;
