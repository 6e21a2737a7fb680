/**
 * The egress fence holds in a cluster (issue 22; docs/security.md, "The egress fence"): the
 * suite of test/egress-fence.test.ts (test/helpers/egressFence.ts), with the server namespace
 * holding a cluster as docs/cluster.md runs one instead of one node: a throwaway PostgreSQL, an
 * S3 server (s3rver), a secure nats-server (TLS, a user per role), an API node
 * (`serve --role api`) and a worker node (`algohost worker --port 0`) as processes, on the
 * namespace's loopback, with ALGOHOST_CLUSTER_SECRET set (test/egress-fence.inner.ts). The
 * algorithms run on the worker node, the builds on the API node; the probes also try the
 * PostgreSQL, S3 and NATS ports and the worker's /health port, on 127.0.0.1, on the server's
 * address, by names resolving to either and through the NAT gateway: every one is refused,
 * while the internet still answers the algorithms.
 */
import { egressFenceSuite } from './helpers/egressFence.ts';

egressFenceSuite('cluster', { timeoutMs: 480_000 });
