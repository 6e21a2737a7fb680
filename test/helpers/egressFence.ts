/**
 * The egress-fence suite of issue 22 (docs/security.md, "The egress fence"), for one
 * configuration of the deployment under test: test/egress-fence.test.ts runs it on one node,
 * test/egress-fence-cluster.test.ts in a cluster. Both share this: the network of the test's own
 * (test/helpers/netns.ts), the server side (test/egress-fence.inner.ts, run in its "server"
 * namespace), the targets (test/helpers/egressTargets.ts) and the assertions.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { netnsUnavailable, startTestNetwork, type TestNetwork } from './netns.ts';
import { natsUnavailable } from './nats.ts';
import { postgresAvailable } from './postgres.ts';
import { INTERNET, networkTargets, PYTHON_ONLY, REFUSED_EVERYWHERE, serviceTargetNames, SERVICES, type Configuration } from './egressTargets.ts';
import { probeSandbox } from '../../src/runtime/sandbox.ts';
import { probeFence } from '../../src/runtime/egressFence.ts';

const INNER = path.join(import.meta.dirname, '..', 'egress-fence.inner.ts');

type Seen = Record<string, string>;
interface Results {
  PyProbe: Seen;
  JsProbe: Seen;
  /** One node only: an algorithm on a server whose ALGOHOST_NATS_URL names the internet's address. */
  deployment?: Seen;
  npmBuild: Seen | string;
  pipBuild: Seen | string;
}

/** Why `config` cannot run here, or undefined. */
function skipReason(config: Configuration): string | undefined {
  return (
    (process.env.ALGOHOST_TEST_BACKENDS ? 'makes its own network and server: runs in test:unit' : undefined) ??
    netnsUnavailable() ??
    (probeSandbox().available ? undefined : 'no sandbox here') ??
    (probeFence().available ? undefined : `no fence here: ${probeFence().reason}`) ??
    (config === 'cluster' ? (natsUnavailable() ?? postgresAvailable()) : undefined)
  );
}

export function egressFenceSuite(config: Configuration, options: { timeoutMs: number }): void {
  // Every target on the deployment's own services, in every form (test/helpers/egressTargets.ts).
  const REFUSED = [...REFUSED_EVERYWHERE, ...serviceTargetNames(config)];
  const ours = SERVICES[config].join(', ');
  let net: TestNetwork;
  let results: Results;

  /** Every one of `names` was tried by the probe and came back refused. */
  const allRefused = (seen: Seen, names: string[]) => {
    for (const t of names) assert.match(seen[t] ?? '', /^REFUSED/, `${t}: ${seen[t]}`);
  };

  describe(`the egress fence ${config === 'cluster' ? 'in a cluster' : 'on one node'}, in a network of the test's own`, { skip: skipReason(config) }, () => {
    before(async () => {
      net = await startTestNetwork();
      const r = await net.run([process.execPath, '--import', 'tsx', INNER], {
        env: { PROBE_TARGETS: JSON.stringify(networkTargets(net)), PROBE_CONFIGURATION: config },
        timeoutMs: options.timeoutMs,
      });
      const line = /^RESULTS (.*)$/m.exec(r.stdout);
      assert.ok(line, `the server side failed (exit ${r.code}):\n${r.stdout.slice(-4000)}\n${r.stderr.slice(-4000)}`);
      results = JSON.parse(line[1]!) as Results;
    });
    after(async () => {
      await net?.stop();
    });

    for (const name of ['PyProbe', 'JsProbe'] as const) {
      test(`${name === 'PyProbe' ? 'a Python' : 'a JavaScript'} algorithm with network_access "full" reaches the internet, by address and by name, TCP and UDP, and nothing of ours (${ours})`, () => {
        const seen = results[name];
        assert.equal(typeof seen, 'object', JSON.stringify(seen));
        for (const t of INTERNET) assert.match(seen[t] ?? '', /^OK INTERNET (tcp|udp) from 198\.51\.100\.2$/, `${t}: ${seen[t]}`);
        allRefused(seen, [...REFUSED, ...(name === 'PyProbe' ? PYTHON_ONLY : [])]);
        // The registry of builds is no algorithm's to reach.
        allRefused(seen, ['registry']);
      });
    }

    if (config === 'one node') {
      test("the deployment's own services are refused wherever they are: a public address named by ALGOHOST_NATS_URL", () => {
        assert.match(results.deployment?.['internet tcp'] ?? '', /^REFUSED/, JSON.stringify(results.deployment));
      });
    }

    for (const name of ['npmBuild', 'pipBuild'] as const) {
      test(`${name === 'npmBuild' ? 'an npm preinstall script' : 'a setup.py'} reaches its configured registry and nothing else, not even the internet`, () => {
        const seen = results[name];
        assert.equal(typeof seen, 'object', `the build printed no probe:\n${String(seen).slice(-3000)}`);
        const s = seen as Seen;
        assert.match(s.registry ?? '', /^OK/, `registry: ${s.registry}`);
        allRefused(s, [...REFUSED, ...INTERNET, 'a name of its own', ...(name === 'pipBuild' ? PYTHON_ONLY : [])]);
      });
    }

    test('a build asks no resolver anything: no DNS query for the names only builds tried reached the DNS server', async () => {
      const log = await net.log();
      // Algorithms' queries do arrive (through the NAT's forwarder): the log is being written.
      assert.ok(log.some((l) => /^DNS .* good\.test /.test(l)), log.join('\n'));
      assert.deepEqual(log.filter((l) => /^DNS .*exfil-/.test(l)), []);
    });

    test('no leak listener heard from anything; the internet heard from the server namespace only', async () => {
      const log = await net.log();
      assert.deepEqual(log.filter((l) => l.startsWith('LEAK')), []);
      const internet = log.filter((l) => l.startsWith('INTERNET'));
      assert.ok(internet.length >= 6, log.join('\n'));
      assert.ok(internet.every((l) => l.endsWith('from 198.51.100.2')), internet.join('\n'));
    });
  });
}
