/**
 * The client SDK (client/) against a real server: the whole lifecycle of an algorithm through
 * the SDK (create, upload, compile, publish, versions), then calls of every kind; all of it
 * over both transports (node:http, and fetch as in a browser), each with a server of its own.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer, type TestServer } from './helpers/server.ts';
import { rejects } from './helpers/rejects.ts';
import { tarGz } from './helpers/algorithms.ts';
import { TRANSPORTS, bytesOf, makeClient, type AnyClient } from './helpers/clients.ts';
import { AlgorithmError, ApiError, NetworkError, packDirectory, type Algo } from '../client/src/index.ts';

let s: TestServer;
let alice: AnyClient;
let bob: AnyClient;
let kinds: Algo;
let hashes: Record<string, string> = {};

/** Answers by what it is sent; `which` tells the version apart. */
const source = (tag: string) => `
export async function apply(input) {
  if (typeof input !== 'string') return input;
  switch (input) {
    case 'which': return '${tag}';
    case 'void': return undefined;
    case 'print': console.log('printed'); return 'done';
    case 'fail': throw new Error('boom');
    case 'custom': throw Object.assign(new Error('that will not do'), { error_type: 'InputError' });
    case 'loop': for (;;) {}
    case 'slow': await new Promise((r) => setTimeout(r, 400)); return 'slow';
    default: return input;
  }
}
`;

for (const kind of TRANSPORTS) {
  describe(`over the ${kind} transport`, () => {
    before(async () => {
      s = await startServer();
      alice = makeClient(kind, { baseUrl: s.url, apiKey: await s.user('alice') });
      bob = makeClient(kind, { baseUrl: s.url, apiKey: await s.user('bob') });
      kinds = alice.algo('alice/Kinds');
      hashes = {};
    });
    after(() => s.close());

    describe('management', () => {
      test('create, info, update', async () => {
        const created = await kinds.create({ details: { summary: 'answers by input' }, settings: { language: 'javascript' } });
        assert.equal(created.name, 'Kinds');
        assert.equal(created.owner, 'alice');
        assert.equal(created.resource_type, 'algorithm');
        assert.equal(created.settings.language, 'javascript');
        assert.equal(created.details.summary, 'answers by input');
        assert.equal((await kinds.info()).id, created.id);
        const updated = await kinds.update({ details: { tagline: 'a menu' } });
        assert.equal(updated.details.tagline, 'a menu');
        assert.equal(updated.details.summary, 'answers by input', 'fields not sent keep their value');
        const again = await rejects(kinds.create(), ApiError);
        assert.equal(again.status, 409);
      });

      test('upload a tar.gz Buffer, compile, builds and logs, publish', async () => {
        const archive = tarGz({ 'src/index.js': source('v0.1') });
        const uploaded = await kinds.uploadSource(archive);
        assert.equal(uploaded.files, 1);
        assert.equal(uploaded.bytes, Buffer.byteLength(source('v0.1')));
        assert.match(uploaded.hash, /^[0-9a-f]{16,}$/);
        const compiled = await kinds.compile();
        assert.equal(compiled.compilation.successful, true, compiled.compilation.output);
        assert.match(compiled.version_info.git_hash, /^[0-9a-f]{40}$/);
        assert.equal(compiled.build.build_id, compiled.version_info.git_hash);
        hashes['0.1.0'] = compiled.version_info.git_hash;
        const builds = await kinds.builds();
        assert.deepEqual(builds.map((b) => b.build_id), [compiled.build.build_id]);
        assert.equal((await kinds.build(compiled.build.build_id)).status, 'succeeded');
        assert.equal(await kinds.buildLogs(compiled.build.build_id), compiled.compilation.output);
        const v = await kinds.publish();
        assert.equal(v.version_info.semantic_version, '0.1.0', 'the first default publish is a minor one');
        assert.equal(v.version_info.git_hash, hashes['0.1.0']);
        const twice = await rejects(kinds.publish(), ApiError);
        assert.equal(twice.code, 'already_published');
        assert.equal(twice.status, 409);
      });

      test('upload a packed directory stream; publish major and revision; list versions', async () => {
        const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'algohost-client-src-'));
        try {
          fs.mkdirSync(path.join(dir, 'src'));
          fs.writeFileSync(path.join(dir, 'src/index.js'), source('v1.0'));
          await kinds.uploadSource(packDirectory(dir));
          hashes['1.0.0'] = (await kinds.compile()).version_info.git_hash;
          assert.equal((await kinds.publish('major')).version_info.semantic_version, '1.0.0');
          fs.writeFileSync(path.join(dir, 'src/index.js'), source('v1.0.1'));
          await kinds.uploadSource(packDirectory(dir));
          hashes['1.0.1'] = (await kinds.compile()).version_info.git_hash;
          const v = await kinds.publish({ version_info: { version_type: 'revision', release_notes: 'a fix' } });
          assert.equal(v.version_info.semantic_version, '1.0.1');
          assert.equal(v.version_info.release_notes, 'a fix');
        } finally {
          fs.rmSync(dir, { recursive: true, force: true });
        }
        const versions: string[] = [];
        for await (const v of kinds.versions()) versions.push(v.version_info.semantic_version);
        assert.deepEqual(versions, ['1.0.1', '1.0.0', '0.1.0']);
        assert.equal((await kinds.versionInfo('0.1.0')).version_info.git_hash, hashes['0.1.0']);
        assert.equal((await alice.algo('alice/Kinds/1.0.0').versionInfo()).version_info.git_hash, hashes['1.0.0']);
        await rejects(kinds.versionInfo(), Error);
      });

      test('a failed build resolves with its log; publishing it is refused', async () => {
        const broken = alice.algo('alice/Broken');
        await broken.create({ settings: { language: 'javascript' } });
        await broken.uploadSource(tarGz({ 'src/index.js': 'export const notApply = 1;\n' }));
        const compiled = await broken.compile();
        assert.equal(compiled.compilation.successful, false);
        assert.match(compiled.compilation.output, /apply/);
        const refused = await rejects(broken.publish(), ApiError);
        assert.equal(refused.code, 'no_build');
      });

      test('lists, search and delete', async () => {
        const names: string[] = [];
        for await (const a of alice.algorithms('alice')) names.push(a.name);
        assert.deepEqual(names.sort(), ['Broken', 'Kinds']);
        const found: string[] = [];
        for await (const a of bob.searchAlgorithms('kind')) found.push(`${a.owner}/${a.name}`);
        assert.deepEqual(found, ['alice/Kinds']);
        const temp = alice.algo('alice/Temp');
        await temp.create();
        await temp.delete();
        const gone = await rejects(temp.info(), ApiError);
        assert.equal(gone.status, 404);
        assert.equal(gone.code, 'algorithm_not_found');
        assert.match(gone.message, /^No such algorithm/);
        const notYours = await rejects(bob.algo('alice/Kinds').update({ details: { tagline: 'mine' } }), ApiError);
        assert.equal(notYours.status, 403);
      });
    });

    describe('calls', () => {
      const call = () => bob.algo('alice/Kinds');

      test('text, JSON, binary and void results', async () => {
        let r = await call().pipe('héllo');
        assert.equal(r.result, 'héllo');
        assert.equal(r.metadata.content_type, 'text');
        assert.equal(typeof r.metadata.duration, 'number');
        for (const value of [{ a: [1, 2, { b: null }] }, [1, 'two'], 42, true]) {
          r = await call().pipe(value);
          assert.deepEqual(r.result, value);
          assert.equal(r.metadata.content_type, 'json');
        }
        // A JSON text given as such goes as JSON (pipe() would send the string as text).
        r = await call().pipeJson('[1,2]');
        assert.deepEqual(r.result, [1, 2]);
        const bytes = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
        const bin = await call().pipe<Buffer>(bytes);
        assert.equal(bin.metadata.content_type, 'binary');
        assert.deepEqual(bytesOf(kind, bin.result), bytes);
        const fromU8 = await call().pipe(new Uint8Array([9, 8, 7]));
        assert.deepEqual(bytesOf(kind, fromU8.result), Buffer.from([9, 8, 7]));
        r = await call().pipe('void');
        assert.equal(r.result, null);
        assert.equal(r.metadata.content_type, 'void');
      });

      test('version selectors, and a build hash for the owner only', async () => {
        const which = async (client: AnyClient, ref: string) => (await client.algo(ref).pipe('which')).result;
        assert.equal(await which(bob, 'alice/Kinds'), 'v1.0.1');
        assert.equal(await which(bob, 'algo://alice/Kinds/1.*'), 'v1.0.1');
        assert.equal(await which(bob, 'alice/Kinds/1.0.0'), 'v1.0');
        assert.equal(await which(bob, 'alice/Kinds/0.1.*'), 'v0.1');
        assert.equal(await which(alice, `alice/Kinds/${hashes['1.0.0']}`), 'v1.0');
        const err = await rejects(bob.algo(`alice/Kinds/${hashes['1.0.0']}`).pipe('which'), AlgorithmError);
        assert.equal(err.errorType, 'EntityNotFoundError');
        const bad = await rejects(bob.algo('alice/Kinds/1.x.y').pipe('which'), ApiError);
        assert.equal(bad.code, 'invalid_version');
        assert.equal(bad.status, 400);
      });

      test('output raw: the result typed by its Content-Type; a failure throws AlgorithmError', async () => {
        const text = await call().pipe('plain', { output: 'raw' });
        assert.deepEqual(text, { result: 'plain', metadata: { content_type: 'text' } });
        const json = await call().pipe({ k: [1] }, { output: 'raw' });
        assert.deepEqual(json, { result: { k: [1] }, metadata: { content_type: 'json' } });
        const bin = await call().pipe(Buffer.from([0, 1, 255]), { output: 'raw' });
        assert.deepEqual(bytesOf(kind, bin.result), Buffer.from([0, 1, 255]));
        assert.equal(bin.metadata.content_type, 'binary');
        const err = await rejects(call().pipe('fail', { output: 'raw' }), AlgorithmError);
        assert.equal(err.message, 'boom');
      });

      test('output void answers at once with a request id', async () => {
        const started = Date.now();
        const r = await call().pipe('slow', { output: 'void' });
        assert.equal(r.async, true);
        assert.match(r.requestId, /^req-/);
        assert.ok(Date.now() - started < 400, 'it did not wait for the call');
      });

      test('stdout for the owner who asks', async () => {
        assert.equal((await kinds.pipe('print', { stdout: true })).metadata.stdout, 'printed\n');
        assert.equal((await kinds.pipe('print')).metadata.stdout, undefined);
        assert.equal((await call().pipe('print', { stdout: true })).metadata.stdout, undefined);
      });

      test('algorithm failures are AlgorithmErrors with error_type, stack trace (owner) and metadata', async () => {
        let err = await rejects(kinds.pipe('fail'), AlgorithmError);
        assert.equal(err.message, 'boom');
        assert.equal(err.errorType, 'AlgorithmError');
        assert.equal(err.code, 'AlgorithmError');
        assert.match(err.stacktrace ?? '', /Error: boom/);
        assert.equal(typeof err.metadata.duration, 'number');
        err = await rejects(call().pipe('fail'), AlgorithmError);
        assert.equal(err.stacktrace, undefined, 'closed source: no trace for others');
        err = await rejects(call().pipe('custom'), AlgorithmError);
        assert.equal(err.errorType, 'InputError');
        assert.equal(err.message, 'that will not do');
        err = await rejects(call().pipe('loop', { timeout: 1 }), AlgorithmError);
        assert.equal(err.errorType, 'TimeoutError');
        err = await rejects(bob.algo('alice/Nope').pipe('x'), AlgorithmError);
        assert.equal(err.errorType, 'EntityNotFoundError');
        assert.equal(err.message, 'algorithm algo://alice/Nope not found');
      });

      test('the timeout option reaches the server; timeoutMs and signal stop the request', async () => {
        const bad = await rejects(call().pipe('x', { timeout: 3001 }), ApiError);
        assert.equal(bad.code, 'invalid_query');
        const late = await rejects(call().pipe('slow', { timeoutMs: 100 }), NetworkError);
        assert.equal(late.code, 'request_timeout');
        const controller = new AbortController();
        const reason = new Error('changed my mind');
        setTimeout(() => controller.abort(reason), 50);
        await assert.rejects(call().pipe('slow', { signal: controller.signal }), (err) => err === reason);
        await assert.rejects(call().pipe('x', { signal: AbortSignal.abort(reason) }), (err) => err === reason);
        assert.equal((await call().pipe('still fine')).result, 'still fine');
      });
    });

    // pack.ts is Node's alone (the browser entry has no packDirectory): once, over the node transport.
    if (kind === 'node') describe('packDirectory', () => {
      test('long paths (ustar prefix and PAX), symlinks and the filter, read back by tar and by the server', async () => {
        const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'algohost-client-pack-'));
        const deep = `src/${'d'.repeat(60)}/${'e'.repeat(60)}`;
        const longName = `${'n'.repeat(120)}.mjs`;
        try {
          fs.mkdirSync(path.join(dir, deep), { recursive: true });
          fs.mkdirSync(path.join(dir, 'node_modules/x'), { recursive: true });
          fs.writeFileSync(path.join(dir, 'node_modules/x/index.js'), 'left out');
          fs.writeFileSync(path.join(dir, deep, longName), "export const tag = 'packed';\n");
          fs.writeFileSync(path.join(dir, 'src/index.mjs'), `import { tag } from './${deep.slice(4)}/${longName}';\nexport function apply(input) { return tag + ':' + input; }\n`);
          fs.symlinkSync('index.mjs', path.join(dir, 'src/alias.mjs'));
          const pack = () => packDirectory(dir, { filter: (p) => p !== 'node_modules' });
          const chunks: Buffer[] = [];
          for await (const chunk of pack()) chunks.push(chunk as Buffer);
          const listing = execFileSync('/usr/bin/tar', ['-tvzf', '-'], { input: Buffer.concat(chunks) }).toString();
          assert.ok(listing.includes(`${deep}/${longName}`), listing);
          assert.match(listing, /src\/alias\.mjs -> index\.mjs/);
          assert.ok(!listing.includes('node_modules'), 'the filter left node_modules out');

          const packed = alice.algo('alice/Packed');
          await packed.create({ settings: { language: 'javascript' } });
          const uploaded = await packed.uploadSource(pack());
          assert.equal(uploaded.files, 2, 'two regular files (the link is not a file)');
          const compiled = await packed.compile();
          assert.equal(compiled.compilation.successful, true, compiled.compilation.output);
          assert.equal((await alice.algo(`alice/Packed/${compiled.version_info.git_hash}`).pipe('x')).result, 'packed:x');
        } finally {
          fs.rmSync(dir, { recursive: true, force: true });
        }
      });

      test('a missing directory fails the stream', async () => {
        await assert.rejects(async () => {
          for await (const _ of packDirectory('/nonexistent/dir')) void _;
        }, /ENOENT|not a directory/);
      });
    });
  });
}
