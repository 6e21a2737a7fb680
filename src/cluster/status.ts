import type { NatsConnection } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import { BEAT_PREFIX, BEATS, decodeBeat, type Beat } from './messages.ts';
import { ASYNC_CONSUMER, ASYNC_STREAM } from './asyncQueue.ts';
import { BEAT_MS } from './natsExecutor.ts';
import type { ClusterKey } from './seal.ts';

export interface ClusterStatus {
  nodes: Omit<Beat, 'type' | 'instance'>[];
  /** Async calls waiting for an API node, and taken but not yet answered; null without JetStream's stream. */
  async: { waiting: number; running: number } | null;
}

/**
 * What `algohost cluster status` shows: every node heard beating within `listenMs` (a beat a
 * second), and the async queue's depth from JetStream.
 */
export async function clusterStatus(nc: NatsConnection, key: ClusterKey, listenMs = BEAT_MS * 1.6): Promise<ClusterStatus> {
  const nodes = new Map<string, Omit<Beat, 'type' | 'instance'>>();
  const sub = nc.subscribe(BEATS, {
    callback: (err, msg) => {
      if (err) return;
      try {
        const { type: _type, instance: _instance, ...b } = decodeBeat(key.open(msg.subject, msg.data));
        if (msg.subject === `${BEAT_PREFIX}.${b.node}`) nodes.set(b.node, b);
      } catch {
        // Not a beat, or not sealed by this cluster: not one of its nodes.
      }
    },
  });
  let async: ClusterStatus['async'] = null;
  try {
    const jsm = await jetstreamManager(nc, { timeout: 5_000 });
    const info = await jsm.consumers.info(ASYNC_STREAM, ASYNC_CONSUMER);
    async = { waiting: info.num_pending, running: info.num_ack_pending };
  } catch {
    // No API node has made the stream yet, or JetStream is off.
  }
  await new Promise((r) => setTimeout(r, listenMs));
  sub.unsubscribe();
  const order = { api: 0, worker: 1 } as const;
  return { nodes: [...nodes.values()].sort((a, b) => order[a.role] - order[b.role] || a.host.localeCompare(b.host) || a.node.localeCompare(b.node)), async };
}

/**
 * The status as a table for a terminal; a warm build by its name in `names` (owner/name/version,
 * keyed as the beats key them), else by its key (algorithm id:build hash, shortened).
 */
export function formatStatus(s: ClusterStatus, names: ReadonlyMap<string, string> = new Map()): string {
  const rows = [['NODE', 'ROLE', 'HOST', 'RUNNING', 'FREE', 'STATE', 'WARM (algorithm ×idle)']];
  for (const n of s.nodes) {
    const warm = Object.entries(n.warm).map(([k, v]) => `${names.get(k) ?? k.replace(/:([0-9a-f]{12})[0-9a-f]*/, ':$1')} ×${v}`);
    rows.push([n.node, n.role, n.host, String(n.running), n.role === 'worker' ? String(n.free) : '-', n.draining ? 'draining' : 'up', warm.join(', ') || '-']);
  }
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  const lines = rows.map((r) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]!))).join('  '));
  const workers = s.nodes.filter((n) => n.role === 'worker');
  lines.push('');
  lines.push(`${s.nodes.length - workers.length} API node(s), ${workers.length} worker node(s), ${workers.reduce((a, w) => a + w.free, 0)} free slot(s)`);
  lines.push(s.async ? `async queue: ${s.async.waiting} waiting, ${s.async.running} running` : 'async queue: none yet (no API node has started)');
  return lines.join('\n');
}
