import { connect, type NatsConnection } from '@nats-io/transport-node';
import { ConfigError, type Config } from '../config.ts';
import { redactUrl } from '../store/redact.ts';

/** What a node of a cluster needs besides NATS: the shared state (docs/deployment.md). */
export function requireCluster(config: Config, what: string): string {
  if (!config.natsUrl) throw new ConfigError(`${what} needs ALGOHOST_NATS_URL: the NATS server that joins API nodes and worker nodes (docs/cluster.md)`);
  if (!config.database || !config.blobs) {
    throw new ConfigError(`${what} needs the shared backends, ALGOHOST_DATABASE_URL and ALGOHOST_BLOBS, that every node of the cluster uses (docs/deployment.md)`);
  }
  return config.natsUrl;
}

/**
 * Connects to NATS, or fails at once with one line naming the setting. Once connected, the
 * client reconnects by itself for as long as it takes (a restarted NATS server).
 */
export async function connectNats(url: string, name: string): Promise<NatsConnection> {
  const servers = url.split(',').map((s) => s.trim());
  try {
    // noAsyncTraces: no Error (with its stack) made ahead of each request, in case it fails.
    return await connect({ servers, name, timeout: 5_000, maxReconnectAttempts: -1, reconnectTimeWait: 250, waitOnFirstConnect: false, noAsyncTraces: true });
  } catch (err) {
    throw new ConfigError(`ALGOHOST_NATS_URL (${servers.map(redactUrl).join(', ')}): no NATS server answers: ${(err as Error).message}`);
  }
}
