/**
 * The server side of the egress-fence suite (test/helpers/egressFence.ts), run inside the
 * test's "server" network namespace (never on its own): the deployment under test, with its
 * default ALGOHOST_ALGORITHM_NETWORK=nat, and a stand-in npm registry on this namespace's
 * 127.0.0.1; hostile algorithms (Python and JavaScript) and hostile builds (an npm preinstall, a
 * setup.py) try every target, and what each saw is printed as one JSON line for the outer test
 * to judge.
 *
 * The deployment, by PROBE_CONFIGURATION:
 * - "one node": an all-in-one server in this process (test/helpers/server.ts);
 * - "cluster": as docs/cluster.md runs one, each a process of its own on this namespace's
 *   loopback: PostgreSQL (test/helpers/postgres.ts), s3rver (test/helpers/s3.ts), a secure
 *   nats-server (test/helpers/nats.ts: TLS, a user per role), an API node (`serve --role api`,
 *   where builds run) and a worker node (`algohost worker --port 0`, where algorithms run,
 *   answering /health on its port), all with ALGOHOST_CLUSTER_SECRET. Each is stopped by its
 *   pid (PostgreSQL by pg_ctl stop) whatever happens.
 * Every service of the deployment listens on 127.0.0.1 only; a relay puts each of their ports on
 * the server's address (198.51.100.2) too, as a service listening on every address would be, so
 * that a probe refused there was refused by the fence, not by nobody listening.
 *
 * Environment: PROBE_TARGETS (JSON: [{ name, proto, host, port }]), PROBE_CONFIGURATION.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { api, json, startServer, tempHome } from './helpers/server.ts';
import { callAlgo, createAlgorithm, release, upload } from './helpers/algorithms.ts';
import { serviceTargets, type Configuration, type Service, type Target } from './helpers/egressTargets.ts';
import { createDatabase, startPostgres } from './helpers/postgres.ts';
import { S3RVER_KEY, startS3 } from './helpers/s3.ts';
import { startNats } from './helpers/nats.ts';
import { startWorker, stopWorker } from './helpers/cluster.ts';
import { runCli, startServerProcess, within } from './helpers/process.ts';

const targets = JSON.parse(process.env.PROBE_TARGETS!) as Target[];
const configuration = process.env.PROBE_CONFIGURATION as Configuration;
const SERVER_ADDRESS = '198.51.100.2';
/** Longest a node of the cluster, or the admin CLI, may take to start or stop (another suite's builds may load the machine). */
const NODE_MS = 60_000;
/** Longest the whole of this script may take to stop once done (a connection left open must not hold it). */
const EXIT_MS = 10_000;

/** Tries each target: a TCP connection or a UDP datagram, each waiting at most 2 s for an answer. */
const PY_PROBE = `import json, socket
def probe(targets):
    out = {}
    for t in targets:
        host, port = t["host"], t["port"]
        try:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            if t["proto"] in ("raw", "ping", "packet"):
                # A raw IP socket, an ICMP "ping" socket, a packet socket: none is the sandbox's to make.
                kind = {"raw": (socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP), "ping": (socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP), "packet": (socket.AF_PACKET, socket.SOCK_RAW, 0)}[t["proto"]]
                s = socket.socket(*kind)
                s.settimeout(2)
                if t["proto"] != "packet":
                    s.sendto(b"\\x08\\x00\\xf7\\xff\\x00\\x00\\x00\\x00", (host, 0))
                out[t["name"]] = "OK made a " + t["proto"] + " socket"
            elif t["proto"] == "tcp":
                s = socket.create_connection((host, port), timeout=2)
                # Connected is reached, whatever the other end then says (PostgreSQL closes on this).
                try:
                    s.settimeout(2)
                    s.sendall(b"GET / HTTP/1.0\\r\\n\\r\\n")
                    out[t["name"]] = "OK " + (s.recv(200).decode(errors="replace").strip().split("\\n")[0].strip() or "connected, closed without an answer")
                except Exception as e:
                    out[t["name"]] = "OK connected, then " + type(e).__name__
            else:
                infos = socket.getaddrinfo(host, port, 0, socket.SOCK_DGRAM)
                s = socket.socket(infos[0][0], socket.SOCK_DGRAM)
                s.settimeout(2)
                s.sendto(b"hello", infos[0][4])
                out[t["name"]] = "OK " + s.recv(200).decode(errors="replace").strip()
            s.close()
        except Exception as e:
            out[t["name"]] = "REFUSED " + type(e).__name__ + " " + str(e)
    return out
`;

const JS_PROBE = `const net = require('node:net');
const dgram = require('node:dgram');
const dns = require('node:dns/promises');
function tcp(host, port) {
  return new Promise((resolve) => {
    // Connected is reached, whatever the other end then says (PostgreSQL closes on this).
    let connected = false;
    const s = net.connect({ host, port, timeout: 2000 }, () => { connected = true; s.write('GET / HTTP/1.0\\r\\n\\r\\n'); });
    const done = (what) => { resolve(what); s.destroy(); };
    s.once('data', (d) => done('OK ' + d.toString().split('\\n')[0].trim()));
    s.once('timeout', () => done(connected ? 'OK connected, no answer' : 'REFUSED timeout'));
    s.once('error', (e) => done((connected ? 'OK connected, then ' : 'REFUSED ') + (e.code || e.message)));
    s.once('close', () => done(connected ? 'OK connected, closed without an answer' : 'REFUSED closed'));
  });
}
async function udp(host, port) {
  let address = host;
  try { address = net.isIP(host) ? host : (await dns.lookup(host)).address; } catch (e) { return 'REFUSED ' + (e.code || e.message); }
  return new Promise((resolve) => {
    const s = dgram.createSocket(net.isIPv6(address) ? 'udp6' : 'udp4');
    const t = setTimeout(() => { resolve('REFUSED timeout'); s.close(); }, 2000);
    s.once('message', (d) => { clearTimeout(t); resolve('OK ' + d.toString().trim()); s.close(); });
    s.once('error', (e) => { clearTimeout(t); resolve('REFUSED ' + (e.code || e.message)); s.close(); });
    s.send('hello', port, address, (e) => { if (e) { clearTimeout(t); resolve('REFUSED ' + (e.code || e.message)); s.close(); } });
  });
}
async function probe(targets) {
  const out = {};
  for (const t of targets) if (t.proto === 'tcp' || t.proto === 'udp') out[t.name] = t.proto === 'tcp' ? await tcp(t.host, t.port) : await udp(t.host, t.port);
  return out;
}
module.exports = { probe };
`;

/** The deployment under test, as its clients and the probes see it. */
interface Deployment {
  /** Where clients call: the API node. */
  url: string;
  /** Creates a user; its API key. */
  user(name: string): Promise<string>;
  /** Each of the deployment's own services: its TCP port on this namespace's 127.0.0.1. */
  ports: Partial<Record<Service, number>>;
  close(): Promise<void>;
}

/** An all-in-one server in this process. */
async function oneNode(env: Record<string, string>): Promise<Deployment> {
  const s = await startServer({ env });
  return { url: s.url, user: (name) => s.user(name), ports: { api: Number(new URL(s.node).port) }, close: () => s.close() };
}

/** A cluster as docs/cluster.md runs one: its backends, an API node and a worker node, as processes; all stopped by close(), or here if one fails to start. */
async function cluster(extra: Record<string, string>): Promise<Deployment> {
  const stops: Array<() => unknown> = [];
  const close = async () => {
    for (const stop of stops.reverse()) await Promise.resolve().then(stop).catch((err: unknown) => process.stderr.write(`stopping the cluster: ${String(err)}\n`));
  };
  /** `p`, its `stop` kept as soon as it has started. */
  const kept = <T>(p: Promise<T>, stop: (started: T) => unknown) => p.then((started) => (stops.push(() => stop(started)), started));
  try {
    const backends = [kept(startPostgres(), (pg) => pg.stop()), kept(startS3(['egress']), (s3) => s3.stop()), kept(startNats({ secure: true }), (nats) => nats.stop())] as const;
    await Promise.allSettled(backends); // each one that started is kept, whichever failed
    const [pg, s3, nats] = await Promise.all(backends);
    const env = {
      ALGOHOST_DATABASE_URL: await createDatabase(pg.adminUrl, 'egress'),
      ALGOHOST_BLOBS: `s3://egress/e?endpoint=${encodeURIComponent(s3.endpoint)}&force_path_style=true`,
      AWS_ACCESS_KEY_ID: S3RVER_KEY.access_key_id,
      AWS_SECRET_ACCESS_KEY: S3RVER_KEY.secret_access_key,
      ALGOHOST_NATS_CA: nats.ca!,
      ALGOHOST_CLUSTER_SECRET: crypto.randomBytes(32).toString('hex'),
      ...extra,
    };
    const homes = [tempHome('algohost-egress-api-'), tempHome('algohost-egress-cli-')] as const;
    stops.push(() => homes.forEach((h) => fs.rmSync(h, { recursive: true, force: true })));
    const apiNode = await startServerProcess({ home: homes[0], env: { ...env, ALGOHOST_NATS_URL: nats.urlFor('api') }, args: ['--role', 'api'], timeoutMs: NODE_MS });
    stops.push(() => apiNode.kill('SIGTERM', NODE_MS).catch(() => apiNode.kill('SIGKILL')));
    const worker = await startWorker({ ...env, ...nats.nextWorker() }, ['--port', '0']);
    stops.push(async () => {
      worker.child.kill('SIGTERM');
      await within(worker.exited, NODE_MS, 'the worker node did not stop').catch(() => undefined);
      await stopWorker(worker); // SIGKILL if it is still there, and its home removed
    });
    const health = /\/health at http:\/\/127\.0\.0\.1:(\d+)/.exec(worker.output());
    if (!health) throw new Error(`the worker node did not say where its /health is:\n${worker.output()}`);
    return {
      url: apiNode.url,
      async user(name) {
        const r = await runCli(['user', 'create', name], homes[1], NODE_MS, env);
        if (r.code !== 0) throw new Error(`user create ${name}: ${r.code} ${r.stderr}`);
        return (JSON.parse(r.stdout) as { api_key: string }).api_key;
      },
      ports: { api: Number(new URL(apiNode.url).port), postgres: pg.port, s3: Number(new URL(s3.endpoint).port), nats: nats.port, 'worker health': Number(health[1]) },
      close,
    };
  } catch (err) {
    await close();
    throw err;
  }
}

/** Each of `ports` of 127.0.0.1 on the server's address too, by a relay passing bytes untouched; close() closes it and its connections. */
async function onServerAddress(ports: number[]): Promise<{ close(): void }> {
  const sockets = new Set<net.Socket>();
  const track = (s: net.Socket) => (sockets.add(s), s.once('close', () => sockets.delete(s)));
  const relays = await Promise.all(
    ports.map(
      (port) =>
        new Promise<net.Server>((resolve, reject) => {
          const relay = net.createServer((client) => {
            const upstream = net.connect({ host: '127.0.0.1', port });
            track(client);
            track(upstream);
            client.on('error', () => upstream.destroy());
            upstream.on('error', () => client.destroy());
            client.pipe(upstream).pipe(client);
          });
          relay.once('error', reject);
          relay.listen(port, SERVER_ADDRESS, () => resolve(relay));
        }),
    ),
  );
  return {
    close() {
      for (const r of relays) r.close();
      for (const s of sockets) s.destroy();
    },
  };
}

async function main(): Promise<void> {
  // The stand-in registry: anything on 127.0.0.1:<port> of this namespace, named in ALGOHOST_BUILD_NPM_REGISTRY and _PIP_INDEX_URL.
  const registry = http.createServer((_req, res) => res.end('REGISTRY'));
  await new Promise<void>((r) => registry.listen(0, '127.0.0.1', r));
  const registryPort = (registry.address() as net.AddressInfo).port;
  const env = { ALGOHOST_BUILD_NPM_REGISTRY: `http://127.0.0.1:${registryPort}/`, ALGOHOST_BUILD_PIP_INDEX_URL: `http://127.0.0.1:${registryPort}/simple/` };
  const d = await (configuration === 'cluster' ? cluster(env) : oneNode(env));
  const results: Record<string, unknown> = {};
  let relays: { close(): void } | undefined;
  try {
    relays = await onServerAddress(Object.values(d.ports));
    // What only this side knows: the ports of the deployment's services and of the registry.
    const all: Target[] = [
      ...targets,
      ...Object.entries(d.ports).flatMap(([service, port]) => serviceTargets(service as Service, port)),
      { name: 'registry', proto: 'tcp', host: '127.0.0.1', port: registryPort },
    ];
    const alice = api(d.url, await d.user('alice'));
    const settings = { network_access: 'full' };
    await release(alice, 'alice', 'PyProbe', { 'src/PyProbe.py': `${PY_PROBE}\ndef apply(targets):\n    return probe(targets)\n` }, { settings: { ...settings, language: 'python3' } });
    await release(alice, 'alice', 'JsProbe', { 'src/probe.js': JS_PROBE, 'src/index.js': "const { probe } = require('./probe.js');\nexports.apply = (targets) => probe(targets);\n", 'package.json': '{"type":"commonjs"}' }, { settings: { ...settings, language: 'javascript' } });
    for (const name of ['PyProbe', 'JsProbe']) {
      const r = await json(await callAlgo(alice, `alice/${name}`, JSON.stringify(all), 'application/json', '?timeout=120'));
      results[name] = r.result ?? r;
    }
    // An algorithm on a server whose deployment names 198.51.100.1 among its own services
    // (ALGOHOST_NATS_URL): that address is refused too, public as it is.
    if (configuration === 'one node') results.deployment = await deploymentRefused(all.filter((t) => t.name === 'internet tcp'));

    // Builds: an npm preinstall script and a setup.py try every target while installing, and a
    // name no one else asks for: a build has no DNS, so no query for it may reach a resolver
    // (the outer test reads the stand-in DNS server's log).
    const forBuild = (tag: string): Target[] => [...all, { name: 'a name of its own', proto: 'tcp', host: `exfil-${tag}.test`, port: 80 }];
    const jsBuild = { 'package.json': JSON.stringify({ name: 'hostile', version: '1.0.0', dependencies: { dummy: 'file:./dummy' }, scripts: { preinstall: 'node probe-run.js' } }), 'probe.js': JS_PROBE, 'probe-run.js': `require('./probe.js').probe(${JSON.stringify(forBuild('npm'))}).then((r) => console.log('PROBE ' + JSON.stringify(r)));\n`, 'dummy/package.json': '{"name":"dummy","version":"1.0.0"}', 'src/index.js': 'exports.apply = () => 1;\n' };
    results.npmBuild = await buildLog(alice, 'NpmBuild', 'javascript', jsBuild);
    const pyBuild = { 'src/PyBuild.py': 'def apply(x):\n    return 1\n', 'requirements.txt': './pkg\n', 'pkg/setup.py': `${PY_PROBE}\nimport json\n# pip shows a setup.py's output only when it fails: it fails, saying what it reached.\nraise SystemExit("PROBE " + json.dumps(probe(${JSON.stringify(forBuild('pip'))})))\n` };
    results.pipBuild = await buildLog(alice, 'PyBuild', 'python3', pyBuild);
  } finally {
    relays?.close();
    await d.close();
    registry.close();
  }
  process.stdout.write(`RESULTS ${JSON.stringify(results)}\n`);
}

/** The PROBE line a build printed (what its install step reached), or its whole log. */
async function buildLog(alice: ReturnType<typeof api>, name: string, language: string, files: Record<string, string>): Promise<unknown> {
  await createAlgorithm(alice, 'alice', name, { language });
  const up = await upload(alice, 'alice', name, files);
  if (up.status !== 200) return `upload: ${up.status} ${await up.text()}`;
  const body = await json(await alice(`/v1/algorithms/alice/${name}/compile`, { method: 'POST' }));
  const log = String(body.compilation?.output ?? JSON.stringify(body));
  const line = /PROBE (\{.*\})/.exec(log);
  return line ? JSON.parse(line[1]!) : log;
}

async function deploymentRefused(internet: Target[]): Promise<unknown> {
  const s = await startServer({ env: { ALGOHOST_NATS_URL: 'nats://198.51.100.1:4222' } });
  try {
    const bob = api(s.url, await s.user('bob'));
    await release(bob, 'bob', 'PyProbe', { 'src/PyProbe.py': `${PY_PROBE}\ndef apply(targets):\n    return probe(targets)\n` }, { settings: { network_access: 'full', language: 'python3' } });
    return (await json(await callAlgo(bob, 'bob/PyProbe', JSON.stringify(internet), 'application/json'))).result;
  } finally {
    await s.close();
  }
}

main()
  .catch((err: unknown) => {
    process.stdout.write(`FAILED ${(err as Error).stack ?? String(err)}\n`);
    process.exitCode = 1;
  })
  .finally(() => setTimeout(() => process.exit(), EXIT_MS).unref());
