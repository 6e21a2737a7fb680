import { AppError } from './errors.ts';
import { blobDriver } from './data/blobBackends.ts';
import type { Services } from './services.ts';
import type { BackendHealth, Health } from '../client/src/types.ts';

const HEALTH_TIMEOUT_MS = 2_000;

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** Each backend answers a trivial request within a bound, or the report says which does not. */
async function backend(driver: string, location: string, ping: () => Promise<void>): Promise<BackendHealth> {
  const t0 = performance.now();
  try {
    await withTimeout(ping(), HEALTH_TIMEOUT_MS);
    return { driver, location, ok: true, ms: Math.round((performance.now() - t0) * 10) / 10 };
  } catch (err) {
    return { driver, location, ok: false, error: err instanceof AppError ? err.message : (err as Error).message };
  }
}

/**
 * `GET /health` of any node (docs/deployment.md): the sandbox, and whether each backend it uses
 * answers (the metadata store, the file store, and in a cluster the NATS server). 200 when all
 * do, 503 when one does not: a load balancer or process manager takes the node out of rotation.
 */
export async function healthReport(services: Services, extra: Pick<Health, 'role' | 'running' | 'free'> = {}): Promise<{ status: number; body: Health }> {
  const checks = [
    backend(services.store.dialect, services.store.location, () => services.store.ping()),
    backend(blobDriver(services.config), services.blobs.location, () => services.blobs.ping()),
  ];
  const bus = services.bus;
  if (bus) checks.push(backend('nats', bus.location(), () => bus.ping()));
  const [metadata, blobs, nats] = (await Promise.all(checks)) as [BackendHealth, BackendHealth, BackendHealth?];
  const ok = metadata.ok && blobs.ok && (nats?.ok ?? true);
  // Ready means serving; the sandbox line says loudly whether algorithms would be contained.
  const { kind } = services.sandbox;
  const sandbox: Health['sandbox'] = services.sandbox.available
    ? { enabled: true, kind }
    : kind === 'gvisor'
      ? { enabled: false, kind, warning: `gVisor cannot run here: ${services.sandbox.reason}` }
      : { enabled: false, warning: `algorithms are NOT sandboxed: ${services.sandbox.reason}` };
  const warning = networkWarning(services, extra.role === 'api');
  const network: Health['network'] = { mode: services.network.mode, ...(warning ? { warning } : {}) };
  return { status: ok ? 200 : 503, body: { status: ok ? 'ok' : 'unavailable', ...extra, sandbox, network, metadata, blobs, ...(nats ? { nats } : {}) } };
}

/**
 * What a node says at start and in /health about its sandboxes' network, when it is not the safe
 * default working. `apiNode`: its calls run on worker nodes (which give the network as their own
 * fence can), so only its builds are at stake here.
 */
export function networkWarning(services: Pick<Services, 'network' | 'config'>, apiNode = false): string | undefined {
  const { network, config } = services;
  if (network.mode === 'host') return 'ALGOHOST_ALGORITHM_NETWORK=host: algorithms with network access, and builds, share this host\'s network: they can reach its loopback services, its network and cloud metadata addresses';
  if (network.fenceProblem === undefined) return undefined;
  if (apiNode) {
    return `the egress fence cannot be made here (${network.fenceProblem}): builds on this API node have this host's network, and can reach its services (install nftables and slirp4netns); algorithms run on worker nodes, each behind its own fence`;
  }
  const algorithms = config.algorithmNetwork === 'nat' ? 'algorithms that ask for the network are refused it, and ' : '';
  return `the egress fence cannot be made here (${network.fenceProblem}): ${algorithms}builds have this host's network`;
}
