/**
 * What the hostile probes of the egress-fence suite try (test/helpers/egressFence.ts, which
 * judges; test/egress-fence.inner.ts, which runs them), shared by both sides and both
 * configurations: one node, and a cluster (an API node, a worker node, PostgreSQL, S3, NATS).
 */
import type { TestNetwork } from './netns.ts';

export type Proto = 'tcp' | 'udp' | 'raw' | 'ping' | 'packet';

export interface Target {
  name: string;
  proto: Proto;
  host: string;
  port: number;
}

/** How the deployment under test runs inside the server namespace. */
export type Configuration = 'one node' | 'cluster';

/**
 * The deployment's own services, each on a TCP port of the server namespace's loopback (the
 * inner script makes each reachable on the server's address too, as a service listening on
 * every address would be): the API node; in a cluster also its PostgreSQL, S3 server, NATS
 * server and the worker node's /health port.
 */
export type Service = 'api' | 'postgres' | 's3' | 'nats' | 'worker health';

export const SERVICES: Record<Configuration, Service[]> = {
  'one node': ['api'],
  cluster: ['api', 'postgres', 's3', 'nats', 'worker health'],
};

/** Every way a probe tries a service of ours on `port`: each must be refused. */
export function serviceTargets(service: Service, port: number): Target[] {
  return [
    { name: `${service} on 127.0.0.1`, proto: 'tcp', host: '127.0.0.1', port },
    { name: `${service} on the server address`, proto: 'tcp', host: '198.51.100.2', port },
    { name: `${service} by a name resolving to 127.0.0.1`, proto: 'tcp', host: 'loop.test', port },
    { name: `${service} by a name resolving to the server address`, proto: 'tcp', host: 'api.test', port },
    { name: `${service} through the NAT gateway`, proto: 'tcp', host: '10.0.2.2', port },
  ];
}

/** The names of every target on the deployment's services in `config`. */
export function serviceTargetNames(config: Configuration): string[] {
  return SERVICES[config].flatMap((s) => serviceTargets(s, 0).map((t) => t.name));
}

/** What every probe tries whatever the configuration (the inner script adds the services' and the registry's ports). */
export function networkTargets(n: TestNetwork): Target[] {
  const leak = n.leakPort;
  return [
    { name: 'internet tcp', proto: 'tcp', host: n.internetAddress, port: n.ports.tcp },
    { name: 'internet udp', proto: 'udp', host: n.internetAddress, port: n.ports.udp },
    { name: 'internet by name', proto: 'tcp', host: 'good.test', port: n.ports.tcp },
    { name: 'listener on 127.0.0.1', proto: 'tcp', host: '127.0.0.1', port: leak },
    { name: 'listener on 127.0.0.1, udp', proto: 'udp', host: '127.0.0.1', port: leak },
    { name: 'listener on ::1', proto: 'tcp', host: '::1', port: leak },
    { name: 'private 10.1.2.3', proto: 'tcp', host: '10.1.2.3', port: leak },
    { name: 'private 10.1.2.3, udp', proto: 'udp', host: '10.1.2.3', port: leak },
    { name: 'metadata 169.254.169.254', proto: 'tcp', host: '169.254.169.254', port: leak },
    { name: 'metadata 169.254.169.254, udp', proto: 'udp', host: '169.254.169.254', port: leak },
    { name: 'ULA fd99::1', proto: 'tcp', host: 'fd99::1', port: leak },
    { name: 'the server address', proto: 'tcp', host: '198.51.100.2', port: leak },
    { name: 'the server address, udp', proto: 'udp', host: '198.51.100.2', port: leak },
    { name: 'the host loopback through the NAT gateway', proto: 'tcp', host: '10.0.2.2', port: leak },
    { name: 'a name resolving to 127.0.0.1', proto: 'tcp', host: 'loop.test', port: leak },
    { name: 'a name resolving to 10.1.2.3', proto: 'tcp', host: 'priv.test', port: leak },
    { name: 'a name resolving to the metadata address', proto: 'tcp', host: 'meta.test', port: leak },
    { name: 'a name resolving to the metadata address, udp', proto: 'udp', host: 'meta.test', port: leak },
    { name: 'a raw socket', proto: 'raw', host: '10.1.2.3', port: 0 },
    { name: 'a ping socket', proto: 'ping', host: '10.1.2.3', port: 0 },
    { name: 'a packet socket', proto: 'packet', host: '', port: 0 },
  ];
}

/** The internet's targets: algorithms reach them, builds do not. */
export const INTERNET = ['internet tcp', 'internet udp', 'internet by name'];

/** Of networkTargets, what must be refused to everyone (the leak listeners wherever they are). */
export const REFUSED_EVERYWHERE = [
  'listener on 127.0.0.1',
  'listener on 127.0.0.1, udp',
  'listener on ::1',
  'private 10.1.2.3',
  'private 10.1.2.3, udp',
  'metadata 169.254.169.254',
  'metadata 169.254.169.254, udp',
  'ULA fd99::1',
  'the server address',
  'the server address, udp',
  'the host loopback through the NAT gateway',
  'a name resolving to 127.0.0.1',
  'a name resolving to 10.1.2.3',
  'a name resolving to the metadata address',
  'a name resolving to the metadata address, udp',
];

/** Tried by the Python probes alone (Node has no raw sockets). */
export const PYTHON_ONLY = ['a raw socket', 'a ping socket', 'a packet socket'];
