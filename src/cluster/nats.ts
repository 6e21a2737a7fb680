import fs from 'node:fs';
import { connect, credsAuthenticator, type ConnectionOptions, type NatsConnection } from '@nats-io/transport-node';
import { ConfigError, type Config, type NatsAuthConfig } from '../config.ts';
import { redactUrl } from '../store/redact.ts';
import { ClusterKey } from './seal.ts';

/** A NATS URL for messages: without its password, or its token (a user name alone is one). */
export function redactNatsUrl(url: string): string {
  const shown = redactUrl(url);
  try {
    const u = new URL(shown);
    if (u.username !== '' && u.password === '') u.username = '***';
    return u.toString();
  } catch {
    return shown;
  }
}

/** The roles a connection is made for: each has its own inbox prefix, so NATS permissions can keep one role out of another's answers. */
export type NatsRole = 'api' | 'worker' | 'admin';

/** What a node of a cluster needs besides NATS: the shared state and the cluster's key (docs/deployment.md). */
export function requireCluster(config: Config, what: string): { url: string; key: ClusterKey } {
  if (!config.natsUrl) throw new ConfigError(`${what} needs ALGOHOST_NATS_URL: the NATS server that joins API nodes and worker nodes (docs/cluster.md)`);
  if (!config.database || !config.blobs) {
    throw new ConfigError(`${what} needs the shared backends, ALGOHOST_DATABASE_URL and ALGOHOST_BLOBS, that every node of the cluster uses (docs/deployment.md)`);
  }
  return { url: config.natsUrl, key: requireClusterKey(config, what) };
}

/** The cluster's key, from ALGOHOST_CLUSTER_SECRET, or one line saying it is needed. */
export function requireClusterKey(config: Config, what: string): ClusterKey {
  if (!config.clusterSecret) {
    throw new ConfigError(`${what} needs ALGOHOST_CLUSTER_SECRET: the secret, the same on every node, that messages between nodes are sealed with (openssl rand -hex 32; docs/cluster.md)`);
  }
  return new ClusterKey(config.clusterSecret);
}

/** Where the inboxes of a role's requests are: `_INBOX_<role>.…` (docs/cluster.md's permissions name them). */
export function inboxPrefix(role: NatsRole): string {
  return `_INBOX_${role}`;
}

/**
 * The connection options for ALGOHOST_NATS_URL and the files beside it: servers without their
 * credentials, which go to the client as a user and password (`user:password@`) or a token
 * (`token@`); a creds file; TLS, required with a `tls://` URL, a CA or a client certificate.
 */
export function natsOptions(url: string, auth: NatsAuthConfig, name: string, role: NatsRole): ConnectionOptions {
  const servers: string[] = [];
  let credentials: { user: string; pass: string } | undefined;
  let tls = false;
  const decode = (part: string) => {
    try {
      return decodeURIComponent(part);
    } catch {
      throw new ConfigError('ALGOHOST_NATS_URL: a user name or password in it is not valid percent-encoding');
    }
  };
  for (const [i, one] of url.split(',').map((s) => s.trim()).entries()) {
    const u = new URL(one);
    const these = { user: decode(u.username), pass: decode(u.password) };
    if (these.user === '' && these.pass !== '') throw new ConfigError('ALGOHOST_NATS_URL: a password needs a user name (user:password@), or give a token alone (token@)');
    if (i > 0 && (credentials?.user !== these.user || credentials.pass !== these.pass)) throw new ConfigError('ALGOHOST_NATS_URL: every server must be given the same credentials');
    credentials = these;
    tls ||= u.protocol === 'tls:';
    servers.push(`${u.protocol}//${u.host}`);
  }
  const options: ConnectionOptions = { servers, name, inboxPrefix: inboxPrefix(role) };
  const given = credentials !== undefined && credentials.user !== '';
  if (given) {
    // A user name alone is a token (nats://TOKEN@host), as nats-server's own tools read it.
    if (credentials!.pass === '') options.token = credentials!.user;
    else Object.assign(options, credentials);
  }
  if (auth.creds) {
    if (given) throw new ConfigError('ALGOHOST_NATS_CREDS and credentials in ALGOHOST_NATS_URL: give one or the other');
    options.authenticator = credsAuthenticator(fs.readFileSync(auth.creds));
  }
  if (tls || auth.ca || auth.cert) options.tls = { ...(auth.ca ? { caFile: auth.ca } : {}), ...(auth.cert ? { certFile: auth.cert, keyFile: auth.key } : {}) };
  return options;
}

/**
 * Connects to NATS, or fails at once with one line naming the setting. Once connected, the
 * client reconnects by itself for as long as it takes (a restarted NATS server).
 */
export async function connectNats(url: string, auth: NatsAuthConfig, name: string, role: NatsRole): Promise<NatsConnection> {
  const options = natsOptions(url, auth, name, role);
  const shown = url.split(',').map((s) => redactNatsUrl(s.trim())).join(', ');
  try {
    // noAsyncTraces: no Error (with its stack) made ahead of each request, in case it fails.
    return await connect({ ...options, timeout: 5_000, maxReconnectAttempts: -1, reconnectTimeWait: 250, waitOnFirstConnect: false, noAsyncTraces: true });
  } catch (err) {
    const message = (err as Error).message;
    if (/authoriz|authentic/i.test(message)) {
      throw new ConfigError(`ALGOHOST_NATS_URL (${shown}): the NATS server refused this node's credentials (${message}); check the user, password, token or ALGOHOST_NATS_CREDS`);
    }
    throw new ConfigError(`ALGOHOST_NATS_URL (${shown}): no NATS server answers: ${message}`);
  }
}
