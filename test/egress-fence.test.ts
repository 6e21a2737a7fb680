/**
 * The egress fence holds on one node (issue 22; docs/security.md, "The egress fence"): in a
 * network of the test's own (test/helpers/netns.ts), a real all-in-one server runs in the
 * "server" namespace (test/egress-fence.inner.ts) with the default
 * ALGOHOST_ALGORITHM_NETWORK=nat, and hostile Python and JavaScript algorithms, an npm
 * preinstall script and a setup.py try, by TCP, UDP, IPv6 and names that resolve to loopback,
 * to reach: the API node's port (on 127.0.0.1, on the server's address, by names, through the
 * NAT gateway), a listener on the server's 127.0.0.1, 10.1.2.3 (private), 169.254.169.254
 * (metadata), ::1 and a ULA, and the stand-in internet at 198.51.100.1. Algorithms reach the
 * internet and nothing else; builds reach their configured registry (a stand-in on the
 * server's loopback) and nothing else; no leak listener hears from any of them.
 *
 * The targets and assertions are shared with the cluster's run (test/egress-fence-cluster.test.ts):
 * test/helpers/egressFence.ts, test/helpers/egressTargets.ts.
 */
import { egressFenceSuite } from './helpers/egressFence.ts';

egressFenceSuite('one node', { timeoutMs: 480_000 });
