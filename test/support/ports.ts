/** TCP ports on loopback for servers a test starts. */
import net from 'node:net';

/** A port that nothing listens on right now, from the kernel's ephemeral range. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.listen(0, '127.0.0.1', () => {
      const port = (srv.address() as net.AddressInfo).port;
      srv.close(() => resolve(port));
    });
    srv.on('error', reject);
  });
}

/** Whether `port` can be listened on now. */
function bindable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = net.createServer();
    srv.once('error', () => resolve(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)));
  });
}

/**
 * A port for a Temporal dev server: it and the ports the server takes beside it (the HTTP API at
 * +10, the Web UI at +1000) free now. Picked below the kernel's ephemeral range (32768 and up
 * here), so no outbound connection of the suite can take one of them before the server binds it.
 */
export async function freeServerPort(): Promise<number> {
  for (let tries = 0; tries < 200; tries++) {
    const port = 20_000 + Math.floor(Math.random() * 11_000);
    const all = await Promise.all([port, port + 10, port + 1000].map(bindable));
    if (all.every(Boolean)) return port;
  }
  throw new Error('no free port for a Temporal dev server between 20000 and 32010');
}
