/**
 * Events of changes made through algohost to connected storage (issue 23; docs/events.md,
 * "Connected storage"): against a real server and real stand-ins on loopback (s3rver for
 * objstore://, rclone's WebDAV server and the Dropbox stand-in for filehost://), read through
 * the live stream and a webhook receiver. Each change is one event of its account's owner, with
 * the canonical subject `<protocol>+<label>://<path>` whatever alias the request used, and the
 * size and ETag the file is served with; a recursive delete tells of each file and directory;
 * another user hears nothing of it; path filters on the connected schemes; a refused or failed
 * change raises nothing, and a change whose event cannot be recorded says so.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Readable } from 'node:stream';
import { Webhook } from 'standardwebhooks';
import { api, json, startServer, type TestServer } from './helpers/server.ts';
import { connectAccount, dataPath } from './helpers/connectors.ts';
import { release } from './helpers/algorithms.ts';
import { triggerDispatch } from './helpers/triggers.ts';
import { S3RVER_KEY, startS3, type S3Server } from './helpers/s3.ts';
import { rcloneMissing, startWebDav, type WebDavServer } from './helpers/webdav.ts';
import { startDropboxStandIn, type DropboxStandIn } from './helpers/dropboxStandIn.ts';
import { ExternalConnector } from '../src/data/connectors/external.ts';
import { S3Storage } from '../src/data/connectors/s3.ts';
import { MarkerCodec } from '../src/data/marker.ts';
import { isAppError } from '../src/errors.ts';
import { FULL_PERMISSIONS } from '../src/auth/permissions.ts';
import type { NewEvent } from '../src/events/outbox.ts';

const DROPBOX_TOKEN = 'sl.events-test-token';
/** Small, so that a chunked upload past it fails part-way (the limit is counted as bytes arrive). */
const MAX_UPLOAD = 64 * 1024;

let s3: S3Server;
let dav: WebDavServer | undefined;
let dropbox: DropboxStandIn;
let s: TestServer;
let alice: ReturnType<typeof api>;
let aliceKey: string;
let bob: ReturnType<typeof api>;
let bobKey: string;

const noDav = rcloneMissing() ?? false;

before(async () => {
  s3 = await startS3(['bkt']);
  if (!noDav) dav = await startWebDav();
  dropbox = await startDropboxStandIn({ token: DROPBOX_TOKEN });
  s = await startServer({
    env: {
      ALGOHOST_CONNECTOR_NETWORK: 'any',
      ALGOHOST_MAX_UPLOAD_BYTES: String(MAX_UPLOAD),
      ALGOHOST_CONNECTOR_TIMEOUT_MS: '5000',
      ALGOHOST_DROPBOX_API_URL: dropbox.apiUrl,
      ALGOHOST_DROPBOX_CONTENT_URL: dropbox.contentUrl,
    },
  });
  aliceKey = await s.user('alice');
  bobKey = await s.user('bob');
  alice = api(s.url, aliceKey);
  bob = api(s.url, bobKey);
  const creds = { endpoint: s3.endpoint, ...S3RVER_KEY, force_path_style: true };
  // Labels in mixed case: subjects name them in lower case, as the data API answers URIs.
  await connectAccount(s, 'alice', aliceKey, { label: 'Store', protocol: 'objstore', writeable: true, cred_data: creds });
  await connectAccount(s, 'alice', aliceKey, { label: 'ro', protocol: 'objstore', cred_data: creds });
  if (dav) await connectAccount(s, 'alice', aliceKey, { label: 'Dav', protocol: 'filehost', provider: 'webdav', writeable: true, cred_data: { url: dav.url } });
  await connectAccount(s, 'alice', aliceKey, { label: 'box', protocol: 'filehost', provider: 'dropbox', writeable: true, cred_data: { access_token: DROPBOX_TOKEN } });
  // Bob's own account, with alice's label, on the same server and bucket.
  await connectAccount(s, 'bob', bobKey, { label: 'store', protocol: 'objstore', writeable: true, cred_data: creds });
});
after(async () => {
  await s?.close();
  await s3?.stop();
  await dav?.stop();
  await dropbox?.stop();
});

interface CloudEventJson {
  specversion: string;
  id: string;
  source: string;
  type: string;
  subject: string;
  sequence: string;
  data: Record<string, unknown>;
}

/** A live stream read as an EventSource would: each message's CloudEvent. */
async function stream(user: string, key: string, query = '') {
  const controller = new AbortController();
  const res = await fetch(`${s.url}/v1/users/${user}/events${query}`, { headers: { authorization: `Simple ${key}` }, signal: controller.signal });
  const events: CloudEventJson[] = [];
  let done: Promise<void> = Promise.resolve();
  if (res.status === 200) {
    done = (async () => {
      const decoder = new TextDecoder();
      let text = '';
      try {
        for await (const chunk of res.body!) {
          text += decoder.decode(chunk as Uint8Array, { stream: true });
          let at: number;
          while ((at = text.indexOf('\n\n')) >= 0) {
            const block = text.slice(0, at);
            text = text.slice(at + 2);
            const data = block
              .split('\n')
              .filter((l) => l.startsWith('data: '))
              .map((l) => l.slice(6))
              .join('');
            if (data) events.push(JSON.parse(data) as CloudEventJson);
          }
        }
      } catch {
        // Aborted.
      }
    })();
  }
  return {
    res,
    events,
    async until(n: number, ms = 10_000) {
      const end = Date.now() + ms;
      while (events.length < n && Date.now() < end) await new Promise((r) => setTimeout(r, 10));
      return events;
    },
    /** Waits a little longer for anything that should not come. */
    async settle(ms = 400) {
      await new Promise((r) => setTimeout(r, ms));
      return events;
    },
    async close() {
      controller.abort();
      await done;
    },
  };
}

const streamOf = (query: string) => stream('alice', aliceKey, query);
const pathQuery = (pattern: string) => `?path=${encodeURIComponent(pattern)}`;

/** Sends a data request to a URI (`objstore+store://bkt/x`), expecting `status`; answers the body. */
async function call(who: ReturnType<typeof api>, uri: string, init: RequestInit = {}, status = 200, query = '') {
  const r = await who(dataPath(uri) + query, init);
  const body = init.method === 'HEAD' ? undefined : await json(r);
  assert.equal(r.status, status, `${init.method ?? 'GET'} ${uri}: ${JSON.stringify(body)}`);
  return { r, body };
}
const put = (uri: string, body: string, who = alice, status = 200) => call(who, uri, { method: 'PUT', body }, status);
const mkdir = (parent: string, name: string, who = alice, status = 200) =>
  call(who, parent, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name }) }, status);
const del = (uri: string, force = false, status = 200) => call(alice, uri, { method: 'DELETE' }, status, force ? '?force=true' : '');
async function etagOf(uri: string): Promise<string> {
  const r = await alice(dataPath(uri), { method: 'HEAD' });
  assert.equal(r.status, 200, uri);
  return r.headers.get('etag')!;
}

/** A connected account as the tests use it. */
interface Backend {
  name: string;
  skip: string | false;
  /** What requests name (a label in another case than the account's), ending in "/". */
  uri: string;
  /** Another spelling of the same account: the default's, or the original service's. */
  alias: string;
  /** What events name: the protocol and the label in lower case. */
  canonical: string;
}

const BACKENDS: Backend[] = [
  { name: 'objstore (S3)', skip: false, uri: 'objstore+STORE://bkt/', alias: 's3://bkt/', canonical: 'objstore+store://bkt/' },
  { name: 'filehost (WebDAV)', skip: noDav, uri: 'filehost+DAV://', alias: 'dropbox://', canonical: 'filehost+dav://' },
  { name: 'filehost (Dropbox)', skip: false, uri: 'dropbox+Box://', alias: 'filehost+box://', canonical: 'filehost+box://' },
];

/** A directory's URI without its trailing slash (an account's root keeps its "://"). */
const parentOf = (uri: string) => (uri.endsWith('://') ? uri : uri.replace(/\/$/, ''));

for (const b of BACKENDS) {
  describe(`events of ${b.name}`, { skip: b.skip }, () => {
    test('each change is one event of the account\'s owner, with the canonical subject, whatever spelling the request used, and what changed', async () => {
      const st = await streamOf('');
      try {
        await mkdir(parentOf(b.uri), 'life');
        const written = await put(`${b.alias}life/a.txt`, 'hello');
        // The answer keeps the request's spelling; the event names the account.
        assert.equal(written.body.result, `${b.alias}life/a.txt`);
        const first = await etagOf(`${b.uri}life/a.txt`);
        await put(`${b.uri}life/a.txt`, 'hello again');
        const second = await etagOf(`${b.uri}life/a.txt`);
        assert.notEqual(first, second);
        await del(`${b.uri}life/a.txt`);
        await del(`${b.alias}life`);
        const got = await st.until(5);
        await st.settle();
        assert.deepEqual(
          st.events.map((e) => [e.type, e.subject]),
          [
            ['data.directory.created', `${b.canonical}life`],
            ['data.file.created', `${b.canonical}life/a.txt`],
            ['data.file.updated', `${b.canonical}life/a.txt`],
            ['data.file.deleted', `${b.canonical}life/a.txt`],
            ['data.directory.deleted', `${b.canonical}life`],
          ],
        );
        for (const e of got) {
          assert.equal(e.specversion, '1.0');
          assert.equal(e.source, '/v1/users/alice');
          assert.equal(e.data.by, 'alice');
        }
        const seqs = got.map((e) => Number(e.sequence));
        for (let i = 1; i < seqs.length; i++) assert.equal(seqs[i], seqs[i - 1]! + 1);
        assert.deepEqual(got[0]!.data, { by: 'alice' });
        // The size, the content type and the ETag the file is then served with.
        assert.deepEqual(got[1]!.data, { size: 5, content_type: 'text/plain; charset=utf-8', etag: first, by: 'alice' });
        assert.deepEqual(got[2]!.data, { size: 11, content_type: 'text/plain; charset=utf-8', etag: second, by: 'alice' });
        // What was removed.
        assert.deepEqual(got[3]!.data, { size: 11, etag: second, by: 'alice' });
        assert.deepEqual(got[4]!.data, { by: 'alice' });
      } finally {
        await st.close();
      }
    });

    test('a recursive delete tells of every file, then every directory, deepest first, the one named last', async () => {
      await mkdir(parentOf(b.uri), 'tree');
      await mkdir(`${b.uri}tree`, 'sub');
      await mkdir(`${b.uri}tree/sub`, 'deeper');
      await mkdir(`${b.uri}tree`, 'empty');
      const files: Record<string, string> = { 'tree/a.txt': '1', 'tree/sub/b.txt': '22', 'tree/sub/deeper/c.txt': '333' };
      const etags: Record<string, string> = {};
      for (const [p, body] of Object.entries(files)) {
        await put(`${b.uri}${p}`, body);
        etags[p] = await etagOf(`${b.uri}${p}`);
      }
      const st = await streamOf(pathQuery(`${b.alias}tree/**`));
      try {
        const { body } = await del(`${b.uri}tree`, true);
        assert.deepEqual(body, { result: { deleted: 3 } });
        const got = await st.until(7);
        await st.settle();
        assert.equal(st.events.length, 7, JSON.stringify(st.events.map((e) => e.subject)));
        const fileEvents = got.slice(0, 3);
        assert.ok(fileEvents.every((e) => e.type === 'data.file.deleted'));
        assert.deepEqual(
          fileEvents.map((e) => [e.subject, e.data]).sort(),
          Object.entries(files)
            .map(([p, content]) => [`${b.canonical}${p}`, { size: content.length, etag: etags[p], by: 'alice' }])
            .sort(),
        );
        assert.deepEqual(
          got.slice(3).map((e) => [e.type, e.subject]),
          [
            ['data.directory.deleted', `${b.canonical}tree/sub/deeper`],
            ['data.directory.deleted', `${b.canonical}tree/empty`],
            ['data.directory.deleted', `${b.canonical}tree/sub`],
            ['data.directory.deleted', `${b.canonical}tree`],
          ],
        );
      } finally {
        await st.close();
      }
    });
  });
}

describe('who hears of it', () => {
  test('another user hears nothing of alice\'s connected storage, not even through a filter or an account of the same label', async () => {
    const alices = await streamOf('');
    const bobs = await stream('bob', bobKey);
    const bobsFiltered = await stream('bob', bobKey, pathQuery('objstore://bkt/**'));
    try {
      await put('objstore://bkt/private/x.txt', 'alice only');
      await mkdir('objstore://bkt/private', 'inner');
      await del('objstore://bkt/private/x.txt');
      await put('objstore+store://bkt/bobs/y.txt', 'bob only', bob);
      await alices.until(3);
      await bobs.until(1);
      await bobsFiltered.until(1);
      await alices.settle();
      for (const st of [bobs, bobsFiltered]) {
        assert.deepEqual(
          st.events.map((e) => [e.type, e.subject, e.source, e.data.by]),
          [['data.file.created', 'objstore+store://bkt/bobs/y.txt', '/v1/users/bob', 'bob']],
        );
      }
      assert.deepEqual(
        alices.events.map((e) => [e.type, e.subject, e.source]),
        [
          ['data.file.created', 'objstore+store://bkt/private/x.txt', '/v1/users/alice'],
          ['data.directory.created', 'objstore+store://bkt/private/inner', '/v1/users/alice'],
          ['data.file.deleted', 'objstore+store://bkt/private/x.txt', '/v1/users/alice'],
        ],
      );
    } finally {
      await Promise.all([alices.close(), bobs.close(), bobsFiltered.close()]);
    }
  });
});

describe('triggers on storage two users share', () => {
  /** A trigger's runs once the dispatcher has read the outbox to its end and none is queued or running (bounded). */
  async function settledRuns(who: ReturnType<typeof api>, user: string, id: string): Promise<{ status: string; depth: number }[]> {
    const db = s.services.store.db;
    const end = Date.now() + 60_000;
    for (;;) {
      // Where the dispatchers stand first, then the runs (helpers/triggers.ts says why).
      const { caughtUp, cursor, last } = await triggerDispatch(db);
      const runs = (await json(await who(`/v1/users/${user}/triggers/${id}/runs`))).results as { status: string; depth: number }[];
      if (caughtUp && runs.every((r) => r.status === 'succeeded' || r.status === 'failed')) return runs;
      if (Date.now() > end) assert.fail(`not settled: ${JSON.stringify(runs)}, cursor ${cursor} of ${last}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  test("a loop through one bucket, each user's trigger writing where the other's watches, cannot close: a write is its writer's event only", async () => {
    await release(alice, 'alice', 'Relay', { 'src/index.js': 'exports.apply = (x) => `relayed ${x}`;\n' }, { settings: { language: 'javascript' } });
    const trigger = async (who: ReturnType<typeof api>, user: string, watch: string, write: string) => {
      const r = await who(`/v1/users/${user}/triggers`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ types: ['data.file.created'], path: `objstore+store://bkt/${watch}/**`, algorithm: 'alice/Relay', input: '{{name}}', output: `objstore+store://bkt/${write}/{{run}}` }) });
      const t = await json(r);
      assert.equal(r.status, 201, JSON.stringify(t));
      return t.id as string;
    };
    const alicesTrigger = await trigger(alice, 'alice', 'ping', 'pong');
    const bobsTrigger = await trigger(bob, 'bob', 'pong', 'ping');
    try {
      // Alice's upload: her run writes pong/, where bob's trigger watches the same bucket.
      await put('objstore+store://bkt/ping/seed', 'seed');
      assert.deepEqual((await settledRuns(alice, 'alice', alicesTrigger)).map((r) => [r.status, r.depth]), [['succeeded', 1]]);
      assert.deepEqual(await settledRuns(bob, 'bob', bobsTrigger), [], 'bob hears nothing of what alice\'s run wrote');
      // Bob's upload the other way: his run writes ping/, which alice's trigger watches.
      await put('objstore+store://bkt/pong/seed', 'seed', bob);
      assert.deepEqual((await settledRuns(bob, 'bob', bobsTrigger)).map((r) => [r.status, r.depth]), [['succeeded', 1]]);
      assert.equal((await settledRuns(alice, 'alice', alicesTrigger)).length, 1, 'alice hears nothing of what bob\'s run wrote');
    } finally {
      await alice(`/v1/users/alice/triggers/${alicesTrigger}`, { method: 'DELETE' });
      await bob(`/v1/users/bob/triggers/${bobsTrigger}`, { method: 'DELETE' });
    }
  });
});

describe('path filters on connected schemes', () => {
  test('a label (any case, either spelling) names one account; no label, every account of that protocol; hosted patterns match none of them', async () => {
    const anyObjstore = await streamOf(pathQuery('s3://bkt/in/**'));
    const labelled = await streamOf(pathQuery('objstore+STORE://bkt/in/*'));
    const otherLabel = await streamOf(pathQuery('objstore+ro://bkt/**'));
    const hosted = await streamOf(pathQuery('data://.my/**'));
    const filehost = noDav ? undefined : await streamOf(pathQuery('filehost://filtered/**'));
    try {
      await put('objstore://bkt/in/1.txt', '1');
      await put('objstore://bkt/out/2.txt', '2');
      await put('objstore://bkt/in/deep/3.txt', '3');
      if (filehost) {
        await mkdir('filehost://', 'filtered');
        await put('filehost+dav://filtered/4.txt', '4');
        await put('filehost+dav://elsewhere.txt', '5');
      }
      await anyObjstore.until(2);
      await labelled.until(1);
      await filehost?.until(2);
      await anyObjstore.settle();
      assert.deepEqual(anyObjstore.events.map((e) => e.subject), ['objstore+store://bkt/in/1.txt', 'objstore+store://bkt/in/deep/3.txt']);
      assert.deepEqual(labelled.events.map((e) => e.subject), ['objstore+store://bkt/in/1.txt']);
      assert.deepEqual(otherLabel.events, []);
      assert.deepEqual(hosted.events, []);
      if (filehost) assert.deepEqual(filehost.events.map((e) => [e.type, e.subject]), [['data.directory.created', 'filehost+dav://filtered'], ['data.file.created', 'filehost+dav://filtered/4.txt']]);
    } finally {
      await Promise.all([anyObjstore.close(), labelled.close(), otherLabel.close(), hosted.close(), filehost?.close()]);
    }
  });

  test('a pattern that cannot name connected storage is refused, saying how to write it', async () => {
    for (const [pattern, message] of [
      ['objstore://.my/bkt/**', /your own already.*objstore:\/\/bkt\/\*\* \(no \.my\)/],
      ['ftp://bkt/**', /no data source/],
      ['data+store://.my/**', /hosted data has no labels/],
    ] as const) {
      const st = await streamOf(pathQuery(pattern));
      assert.equal(st.res.status, 400, pattern);
      assert.match((await json(st.res)).error.message, message);
    }
  });

  test('a webhook with a path on a connected scheme receives the matching changes, signed', async () => {
    const got: { headers: http.IncomingHttpHeaders; body: string }[] = [];
    const rx = http.createServer((req, res) => {
      let body = '';
      req.setEncoding('utf8').on('data', (c: string) => (body += c));
      req.on('end', () => {
        got.push({ headers: req.headers, body });
        res.end('ok');
      });
    });
    await new Promise<void>((r) => rx.listen(0, '127.0.0.1', r));
    const r = await alice('/v1/users/alice/subscriptions', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ url: `http://127.0.0.1:${(rx.address() as AddressInfo).port}/hook`, types: ['data.file.*'], path: 'objstore+store://bkt/hooked/**' }),
    });
    const sub = await json(r);
    assert.equal(r.status, 201, JSON.stringify(sub));
    try {
      await put('objstore://bkt/unhooked/n.txt', 'no');
      await put('s3+Store://bkt/hooked/h.txt', 'yes');
      for (const stop = Date.now() + 15_000; got.length < 1 && Date.now() < stop; ) await new Promise((res) => setTimeout(res, 10));
      await new Promise((res) => setTimeout(res, 500));
      assert.equal(got.length, 1, got.map((g) => g.body).join('\n'));
      const event = new Webhook(sub.secret).verify(got[0]!.body, got[0]!.headers as Record<string, string>) as CloudEventJson;
      assert.equal(event.type, 'data.file.created');
      assert.equal(event.subject, 'objstore+store://bkt/hooked/h.txt');
      assert.equal(event.source, '/v1/users/alice');
      assert.equal(event.data.size, 3);
    } finally {
      await alice(`/v1/users/alice/subscriptions/${sub.id}`, { method: 'DELETE' });
      await new Promise<void>((res) => rx.close(() => res()));
    }
  });
});

describe('what raises nothing', () => {
  test('a change refused, or one that fails at the provider or part-way through its body, raises no event', async () => {
    await mkdir('objstore://bkt', 'fail');
    await mkdir('objstore://bkt/fail', 'dir');
    await put('objstore://bkt/fail/keep.txt', 'kept');
    if (dav) await put('filehost://kept.txt', 'kept');
    const st = await streamOf('');
    try {
      // Refused before the provider is asked to change anything.
      await put('objstore+ro://bkt/fail/x.txt', 'read-only', alice, 403);
      await put('objstore://bkt/fail/dir', 'a directory is there', alice, 409);
      await put('objstore://bkt/fail/keep.txt/under', 'a file is there', alice, 409);
      await mkdir('objstore://bkt/fail', 'dir', alice, 409);
      await del('objstore://bkt/fail/missing.txt', false, 404);
      await del('objstore://bkt/fail', false, 409);
      await mkdir('objstore+ro://bkt', 'nope', alice, 403);
      if (dav) {
        await put('filehost://no-such-dir/x.txt', 'no parent', alice, 404);
        await del('filehost://kept.txt/nothing', false, 404);
      }
      // Larger than the upload limit, sent chunked: it fails part-way, after the provider was written to.
      const big = Readable.from((function* () {
        for (let i = 0; i < 8; i++) yield Buffer.alloc(MAX_UPLOAD / 4, 120);
      })());
      const tooLarge = await alice(dataPath('objstore://bkt/fail/big.bin'), { method: 'PUT', body: Readable.toWeb(big) as ReadableStream, duplex: 'half' } as RequestInit);
      assert.equal(tooLarge.status, 413, await tooLarge.text());
      // The provider gone: nothing changed, nothing told.
      await s3.halt();
      try {
        await put('objstore://bkt/fail/down.txt', 'down', alice, 502);
        await mkdir('objstore://bkt/fail', 'downdir', alice, 502);
        await del('objstore://bkt/fail/keep.txt', false, 502);
      } finally {
        await s3.resume();
      }
      // The one change that stands comes first.
      await put('objstore://bkt/fail/sentinel.txt', 'after');
      await st.until(1);
      await st.settle();
      assert.deepEqual(st.events.map((e) => [e.type, e.subject]), [['data.file.created', 'objstore+store://bkt/fail/sentinel.txt']]);
    } finally {
      await st.close();
    }
  });

  test('a change the provider made but whose event cannot be recorded is answered 503, saying the change was made', async () => {
    const storage = new S3Storage({ endpoint: s3.endpoint, ...S3RVER_KEY, force_path_style: true });
    const raised: NewEvent[][] = [];
    let failing = true;
    const connector = new ExternalConnector(
      'objstore',
      { userId: 7, label: 'Store', protocol: 'objstore', path: '*', writeable: true },
      storage,
      new MarkerCodec(Buffer.alloc(32, 1)),
      {
        maxUploadBytes: MAX_UPLOAD,
        timeoutMs: 5000,
        events: async (events) => {
          if (failing) throw new Error('the database is gone');
          raised.push(events);
        },
      },
    );
    const principal = { userId: 7, username: 'alice', keyId: 'k', permissions: FULL_PERMISSIONS };
    try {
      const err = await connector.write(principal, ['bkt', 'unrecorded.txt'], Readable.from([Buffer.from('made')]), {}).then(
        () => assert.fail('the write answered success'),
        (e: unknown) => e,
      );
      assert.ok(isAppError(err), String(err));
      assert.equal(err.code, 'storage_unavailable');
      assert.match(err.message, /objstore:\/\/bkt\/unrecorded\.txt was written in the objstore account "Store", but its event could not be recorded/);
      const stat = await storage.stat(['bkt', 'unrecorded.txt'], AbortSignal.timeout(5000));
      assert.equal(stat?.kind, 'file', 'the file was written');
      // With the store back, the same connector records them: the account's owner, the canonical subject.
      failing = false;
      await connector.delete(principal, ['bkt', 'unrecorded.txt'], false);
      assert.deepEqual(
        raised.flat().map((e) => [e.userId, e.type, e.subject]),
        [[7, 'data.file.deleted', 'objstore+store://bkt/unrecorded.txt']],
      );
    } finally {
      storage.close();
    }
  });
});
