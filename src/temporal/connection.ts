/**
 * The one way Flotilla processes connect to Temporal: the CLI through connectClient(), the
 * worker through connectWorker(). Both read the same settings (src/temporal/server.ts: a temporal.toml
 * profile or TEMPORAL_* variables, else the embedded dev server) and fail with one line saying
 * which address could not be reached and why.
 */
import net from 'node:net';
import tls from 'node:tls';
import { Client, Connection } from '@temporalio/client';
import type { TLSConfig } from '@temporalio/common/lib/internal-non-workflow';
import type { NativeConnection } from '@temporalio/worker';
import { startTracing } from './telemetry';
import { type TemporalTarget, ensureTemporal } from './server';

type Target = Pick<TemporalTarget, 'address' | 'namespace' | 'uiUrl' | 'started'>;

export interface ClientSession extends Target {
  client: Client;
  close(): Promise<void>;
}

export interface WorkerSession extends Target {
  connection: NativeConnection;
  /** Closes the connection, then stops the embedded server if this process started it. */
  close(): Promise<void>;
}

/**
 * The CLI's connection: never starts a server, only reaches the configured or running one.
 * `warn` gets the lines of trouble that must not fail a command (spans a collector refused).
 */
export async function connectClient(opts: { dataDir: string; warn: (line: string) => void }): Promise<ClientSession> {
  const temporal = await ensureTemporal({ dataDir: opts.dataDir, connectOnly: true });
  const connection = await reach(temporal, () =>
    Connection.connect({ address: temporal.address, ...temporal.connection }),
  );
  // With an OTLP endpoint configured, a run's trace opens here, at `flotilla start`.
  const tracing = startTracing('flotilla-cli', opts.warn);
  return {
    ...summary(temporal),
    client: new Client({
      connection,
      namespace: temporal.namespace,
      interceptors: { workflow: tracing?.clientInterceptors },
    }),
    close: async () => {
      await tracing?.flush();
      await connection.close();
    },
  };
}

/** The worker's connection: starts the embedded dev server when no cluster is configured. */
export async function connectWorker(opts: { dataDir: string }): Promise<WorkerSession> {
  const temporal = await ensureTemporal({ dataDir: opts.dataDir });
  try {
    // Required here: the CLI connects with the client alone, and the worker's SDK takes it 0.2 s to load.
    const { NativeConnection } = require('@temporalio/worker') as typeof import('@temporalio/worker');
    const connection = await reach(temporal, () =>
      NativeConnection.connect({ address: temporal.address, ...temporal.connection }),
    );
    return {
      ...summary(temporal),
      connection,
      close: async () => {
        await connection.close();
        await temporal.stop();
      },
    };
  } catch (err) {
    await temporal.stop();
    throw err;
  }
}

function summary(t: TemporalTarget): Target {
  return { address: t.address, namespace: t.namespace, uiUrl: t.uiUrl, started: t.started };
}

async function reach<T>(temporal: TemporalTarget, open: () => Promise<T>): Promise<T> {
  try {
    return await open();
  } catch (err) {
    const from = temporal.source ? ` (${temporal.source})` : '';
    const raw = (err instanceof Error ? err.message : String(err)).replace(/\s+/g, ' ').trim();
    const tlsFailure = temporal.connection.tls
      ? await handshakeFailure(temporal.address, temporal.connection.tls)
      : undefined;
    const reason = tlsFailure
      ? `TLS handshake failed (${tlsFailure}); check the server CA (TEMPORAL_TLS_SERVER_CA_CERT_PATH or tls.server_ca_cert_path), ` +
        'the server name, and that the server speaks TLS'
      : raw;
    throw new Error(`cannot reach Temporal at ${temporal.address}${from}: ${reason}`);
  }
}

/**
 * Why a TLS handshake with these settings fails, if it does. The SDK only reports that it could
 * not connect before the deadline; a handshake of our own names the certificate problem.
 */
function handshakeFailure(address: string, settings: TLSConfig | true): Promise<string | undefined> {
  const config = settings === true ? {} : settings;
  const at = address.lastIndexOf(':');
  const host = address.slice(0, at).replace(/^\[|\]$/g, '');
  return new Promise((resolve) => {
    const socket = tls.connect({
      host,
      port: Number(address.slice(at + 1)),
      servername: config.serverNameOverride ?? (net.isIP(host) ? undefined : host),
      ca: config.serverRootCACertificate ? Buffer.from(config.serverRootCACertificate) : undefined,
      cert: config.clientCertPair ? Buffer.from(config.clientCertPair.crt) : undefined,
      key: config.clientCertPair ? Buffer.from(config.clientCertPair.key) : undefined,
      ALPNProtocols: ['h2'],
      timeout: 5000,
    });
    const done = (failure?: string) => {
      socket.destroy();
      resolve(failure);
    };
    socket.once('secureConnect', () => done());
    socket.once('error', (err) => done(err.message));
    socket.once('timeout', () => done());
  });
}
