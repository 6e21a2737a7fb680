import crypto from 'node:crypto';
import fs from 'node:fs';
import { connect, credsAuthenticator, type ConnectionOptions, type NatsConnection, type Subscription } from '@nats-io/transport-node';
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

/**
 * Where the inboxes of a node's requests are: `_INBOX_<role>.<node>.…`, or `_INBOX_<role>.…` for
 * a connection that is no node (cluster status). docs/cluster.md's permissions name them: a
 * worker node's user may read its own inboxes only, so an answer sent to one can only have
 * been asked for by that node.
 */
export function inboxPrefix(role: NatsRole, node?: string): string {
  return node === undefined ? `_INBOX_${role}` : `_INBOX_${role}.${node}`;
}

/** This node's name on the bus: ALGOHOST_NODE_NAME, else random (16 hex digits) at each start. */
export function nodeNameOf(config: Config): string {
  return config.nodeName ?? crypto.randomBytes(8).toString('hex');
}

/**
 * The connection options for ALGOHOST_NATS_URL and the files beside it: servers without their
 * credentials, which go to the client as a user and password (`user:password@`) or a token
 * (`token@`); a creds file; TLS, required with a `tls://` URL, a CA or a client certificate.
 */
export function natsOptions(url: string, auth: NatsAuthConfig, name: string, role: NatsRole, node?: string): ConnectionOptions {
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
  const options: ConnectionOptions = { servers, name, inboxPrefix: inboxPrefix(role, node) };
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
export async function connectNats(url: string, auth: NatsAuthConfig, name: string, role: NatsRole, node?: string): Promise<NatsConnection> {
  const options = natsOptions(url, auth, name, role, node);
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

/**
 * Once the NATS server has had `subscriptions` (after a flush, which it answers after any
 * refusal of them): stops the start with one line if it refused any, as it does a node whose
 * user's permissions name another node (ALGOHOST_NODE_NAME, docs/cluster.md).
 */
export function checkSubscriptions(subscriptions: Subscription[], node: string): void {
  const refused = subscriptions.filter((s) => s.isClosed()).map((s) => s.getSubject());
  if (refused.length > 0) {
    throw new ConfigError(
      `the NATS server refused this node (named ${node}) the subjects ${refused.join(', ')}: its NATS user's permissions name another node, or none; set ALGOHOST_NODE_NAME to the name they give it (docs/cluster.md)`,
    );
  }
}
