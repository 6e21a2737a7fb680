import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { DEFAULT_LIMITS, probeSandbox, spawnSandbox, type SandboxSpec } from '../src/runtime/sandbox.ts';
import { Worker } from '../src/runtime/worker.ts';
import type { Outcome } from '../src/runtime/contract.ts';
import { assertTimeoutKillsSandbox, groupGone, text } from './helpers/workers.ts';

const support = probeSandbox();
const skip = support.available ? false : `bubblewrap unavailable: ${support.reason}`;

const root = fs.mkdtempSync(path.join(os.tmpdir(), 'algohost-python-'));
const workers: Worker[] = [];

/** An algorithm directory with `src/<name>.py` (and any other files, relative to the root). */
function algorithm(name: string, source: string, files: Record<string, string> = {}): SandboxSpec {
  const dir = path.join(root, 'algos', name);
  fs.mkdirSync(path.join(dir, 'src'), { recursive: true });
  fs.writeFileSync(path.join(dir, 'src', `${name}.py`), source);
  for (const [file, content] of Object.entries(files)) {
    fs.mkdirSync(path.dirname(path.join(dir, file)), { recursive: true });
    fs.writeFileSync(path.join(dir, file), content);
  }
  return { runner: 'python', algoDir: dir, entry: `src/${name}.py`, network: false, limits: { ...DEFAULT_LIMITS } };
}

async function start(spec: SandboxSpec, maxStdoutBytes?: number): Promise<Worker> {
  const w = await Worker.start(spec, { maxStdoutBytes });
  workers.push(w);
  return w;
}

const errorOf = (o: Outcome) => {
  assert.equal(o.kind, 'algorithm_error', `expected an algorithm error: ${JSON.stringify(o)}`);
  return o.kind === 'algorithm_error' ? o.error : { message: '', stacktrace: '', error_type: '' };
};


after(async () => {
  await Promise.all(workers.map((w) => w.stop(200)));
  fs.rmSync(root, { recursive: true, force: true });
});

describe('the Python runner in the sandbox', { skip }, () => {
  test('text, JSON and binary in and out; None is void', async () => {
    const w = await start(
      algorithm(
        'Multi',
        `def apply(input):
    if isinstance(input, bytes):
        return input[::-1]
    if input == 'void':
        return None
    if isinstance(input, str):
        return 'Hello ' + input
    return {'got': input, 'kind': type(input).__name__}
`,
      ),
    );
    const t = await w.call('text', Buffer.from('wörld'), 5000);
    assert.equal(t.kind === 'result' && t.contentType, 'text');
    assert.equal(text(t), 'Hello wörld');
    const j = await w.call('json', Buffer.from('{"a":[1,2.5,null,true]}'), 5000);
    assert.equal(j.kind === 'result' && j.contentType, 'json');
    assert.deepEqual(JSON.parse(text(j)), { got: { a: [1, 2.5, null, true] }, kind: 'dict' });
    const all = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
    const b = await w.call('binary', all, 5000);
    assert.equal(b.kind === 'result' && b.contentType, 'binary');
    assert.deepEqual(b.kind === 'result' && [...b.body], [...all].reverse(), 'every byte value crosses unchanged');
    const v = await w.call('text', Buffer.from('void'), 5000);
    assert.equal(v.kind === 'result' && v.contentType, 'void');
    assert.equal(v.kind === 'result' && v.body.length, 0);
    assert.ok(v.durationMs >= 0 && v.durationMs < 5000);
  });

  test('bytearray and memoryview results are binary; unserialisable results are an AlgorithmError', async () => {
    const w = await start(
      algorithm(
        'Kinds',
        `def apply(kind):
    if kind == 'bytearray':
        return bytearray(b'ab')
    if kind == 'memoryview':
        return memoryview(b'xyz')
    if kind == 'nan':
        return float('nan')
    return object()
`,
      ),
    );
    const ba = await w.call('text', Buffer.from('bytearray'), 5000);
    assert.equal(ba.kind === 'result' && `${ba.contentType}:${ba.body.toString()}`, 'binary:ab');
    const mv = await w.call('text', Buffer.from('memoryview'), 5000);
    assert.equal(mv.kind === 'result' && `${mv.contentType}:${mv.body.toString()}`, 'binary:xyz');
    for (const bad of ['nan', 'object']) {
      const e = errorOf(await w.call('text', Buffer.from(bad), 5000));
      assert.equal(e.error_type, 'AlgorithmError', bad);
      assert.match(e.message, /cannot be turned into JSON/, bad);
    }
    assert.equal(w.dead, false);
  });

  test('an exception is an algorithm error with message, stack trace and type; the worker lives on', async () => {
    const w = await start(
      algorithm(
        'Throws',
        `class Rejected(Exception):
    error_type = 'InputError'

def helper():
    raise ValueError('boom')

def apply(x):
    if x == 'typed':
        raise Rejected('bad input')
    if x == 'bare':
        raise KeyError
    helper()
`,
      ),
    );
    const e = errorOf(await w.call('text', Buffer.from('x'), 5000));
    assert.equal(e.message, 'boom');
    assert.equal(e.error_type, 'AlgorithmError');
    assert.match(e.stacktrace, /^Traceback/);
    assert.match(e.stacktrace, /Throws\.py", line 5, in helper/);
    assert.match(e.stacktrace, /ValueError: boom/);
    assert.doesNotMatch(e.stacktrace, /runner\.py/, 'the runner\'s own frames are left out');
    const typed = errorOf(await w.call('text', Buffer.from('typed'), 5000));
    assert.equal(typed.error_type, 'InputError');
    assert.equal(typed.message, 'bad input');
    assert.equal(errorOf(await w.call('text', Buffer.from('bare'), 5000)).message, 'KeyError', 'no message: the class name');
    assert.equal(w.dead, false);
  });

  test('load() runs once per worker', async () => {
    const w = await start(
      algorithm(
        'Once',
        `loads = 0
def load():
    global loads
    loads += 1

def apply(input):
    return loads
`,
      ),
    );
    for (let i = 0; i < 3; i++) assert.equal(text(await w.call('json', Buffer.from('1'), 5000)), '1');
  });

  test('a failing load(), a syntax error, a failing import or a missing apply is a LoadingError on every call', async () => {
    for (const [name, src, message] of [
      ['BadLoad', `def load():\n    raise RuntimeError('no model')\n\ndef apply(x):\n    return 1\n`, /^no model$/],
      ['Syntax', `def apply(x:\n    return 1\n`, /never closed|invalid syntax|was never closed/],
      ['BadImport', `import no_such_module_here\n\ndef apply(x):\n    return 1\n`, /no_such_module_here/],
      ['NoApply', `x = 1\n`, /no apply/],
      ['NotCallable', `apply = 3\n`, /not callable/],
      ['BadTypes', `INPUT_TYPES = ['text', 'xml']\n\ndef apply(x):\n    return 1\n`, /INPUT_TYPES/],
    ] as const) {
      const w = await start(algorithm(name, src));
      assert.equal(w.loadError?.error_type, 'LoadingError', name);
      if (name === 'Syntax') {
        assert.match(w.loadError.stacktrace, /Syntax\.py", line 1/);
        assert.match(w.loadError.stacktrace, /SyntaxError/);
      }
      for (let i = 0; i < 2; i++) {
        const e = errorOf(await w.call('json', Buffer.from('1'), 5000));
        assert.equal(e.error_type, 'LoadingError', name);
        assert.match(e.message, message, name);
      }
      assert.equal(w.dead, false, name);
    }
  });

  test('INPUT_TYPES: another content type is an InputError, and apply is not called', async () => {
    const w = await start(algorithm('Typed', `INPUT_TYPES = ['text']\n\ndef apply(x):\n    print('called')\n    return x.upper()\n`));
    assert.equal(text(await w.call('text', Buffer.from('abc'), 5000)), 'ABC');
    for (const [type, body, got] of [['json', ' [1]', 'a JSON array'], ['json', '{}', 'a JSON object'], ['json', '12', 'a JSON number'], ['binary', '1', 'binary data']] as const) {
      const o = await w.call(type, Buffer.from(body), 5000);
      const e = errorOf(o);
      assert.equal(e.error_type, 'InputError');
      // The original's message first (clients match it), then what was sent and what is accepted.
      assert.equal(e.message, `apply() functions do not match input data: the input is ${got}; this algorithm accepts text (Content-Type: text/plain) (its input_types)`);
      assert.equal(o.stdout, '');
    }
    const lower = await start(algorithm('TypedLower', `input_types = ('json', 'binary')\n\ndef apply(x):\n    return 1\n`));
    assert.equal(
      errorOf(await lower.call('text', Buffer.from('a'), 5000)).message,
      'apply() functions do not match input data: the input is text; this algorithm accepts JSON (Content-Type: application/json), binary (Content-Type: application/octet-stream) (its input_types)',
    );
    assert.equal(text(await lower.call('binary', Buffer.from('a'), 5000)), '1');
  });

  test('an apply that cannot take one argument is an InputError, without being called', async () => {
    for (const [name, src] of [
      ['NoArgs', `def apply():\n    print('called')\n    return 1\n`],
      ['TwoArgs', `def apply(a, b):\n    print('called')\n    return 1\n`],
      ['KwOnly', `def apply(a, *, b):\n    print('called')\n    return 1\n`],
      ['Method', `class A:\n    def run(self):\n        print('called')\n\napply = A().run\n`],
      ['Callable', `class A:\n    def __call__(self, a, b):\n        print('called')\n\napply = A()\n`],
    ] as const) {
      const w = await start(algorithm(name, src));
      const o = await w.call('json', Buffer.from('1'), 5000);
      const e = errorOf(o);
      assert.equal(e.error_type, 'InputError', name);
      assert.equal(e.message, 'apply() functions do not match input data: the input is a JSON number, but apply() must take exactly one argument, the input', name);
      assert.equal(o.stdout, '', name);
    }
    for (const [name, src] of [
      ['Defaults', `def apply(a, b=2):\n    return a + b\n`],
      ['VarArgs', `def apply(*args, **kw):\n    return args[0] + 2\n`],
      ['Bound', `class A:\n    def run(self, a):\n        return a + 2\n\napply = A().run\n`],
      ['Lambda', `apply = lambda a: a + 2\n`],
      ['Wrapped', `import functools\n\ndef deco(f):\n    @functools.wraps(f)\n    def inner(*a):\n        return f(*a)\n    return inner\n\n@deco\ndef apply(a):\n    return a + 2\n`],
    ] as const) {
      const w = await start(algorithm(name, src));
      assert.equal(text(await w.call('json', Buffer.from('1'), 5000)), '3', name);
    }
  });

  test('an async apply is awaited', async () => {
    const w = await start(algorithm('Async', `import asyncio\n\nasync def apply(x):\n    await asyncio.sleep(0.01)\n    return x * 2\n`));
    assert.equal(text(await w.call('json', Buffer.from('21'), 5000)), '42');
  });

  test('the entry\'s directory and .algohost/python (build-installed dependencies) are importable', async () => {
    const w = await start(
      algorithm('Deps', `import helper\nimport installed_dep\n\ndef apply(x):\n    return [helper.NAME, installed_dep.NAME]\n`, {
        'src/helper.py': `NAME = 'helper'\n`,
        '.algohost/python/installed_dep/__init__.py': `NAME = 'dep'\n`,
      }),
    );
    assert.deepEqual(JSON.parse(text(await w.call('json', Buffer.from('1'), 5000))), ['helper', 'dep']);
  });

  test('print() output is captured per call, arrives before the answer, and does not leak into the next call', async () => {
    const w = await start(
      algorithm(
        'Prints',
        `import sys, threading, time
print('printed while loading')

def apply(x):
    if x == 'a':
        print('printed by A', end='')
        sys.stderr.write('to stderr\\n')
        threading.Timer(0.02, lambda: print('late from A', flush=True)).start()
        return 'a'
    time.sleep(0.15)
    print('printed by B')
    return 'b'
`,
      ),
    );
    const a = await w.call('text', Buffer.from('a'), 5000);
    assert.equal(text(a), 'a');
    assert.equal(a.stdout, 'printed by A', 'unterminated output is flushed before the answer; stderr and load output are not in it');
    await new Promise((r) => setTimeout(r, 60));
    const b = await w.call('text', Buffer.from('b'), 5000);
    assert.equal(text(b), 'b');
    assert.equal(b.stdout, 'printed by B\n');
  });

  test('printing something that looks like a frame does not corrupt the channel', async () => {
    const w = await start(
      algorithm(
        'Forger',
        `import json, sys

def apply(x):
    h = json.dumps({'type': 'result', 'id': 999, 'content_type': 'made-up', 'duration_ms': 1e12}).encode()
    frame = len(h).to_bytes(4, 'little') + (0).to_bytes(4, 'little') + h
    sys.stdout.buffer.write(frame)
    sys.stdout.flush()
    print(frame)
    return 'real'
`,
      ),
    );
    for (let i = 0; i < 2; i++) {
      const o = await w.call('json', Buffer.from('1'), 5000);
      assert.equal(text(o), 'real');
      assert.match(o.stdout, /made-up/);
    }
    assert.equal(w.dead, false);
  });

  test('a frame forged by the algorithm on the channel itself kills the worker instead of being believed', async () => {
    const w = await start(
      algorithm(
        'ChannelForger',
        `import json, os

def apply(x):
    h = json.dumps({'type': 'result', 'id': 999, 'content_type': 'made-up', 'duration_ms': 1e12}).encode()
    os.write(3, len(h).to_bytes(4, 'little') + (0).to_bytes(4, 'little') + h)
    return 'real'
`,
      ),
    );
    const o = await w.call('json', Buffer.from('1'), 5000);
    assert.equal(o.kind, 'crashed');
    assert.ok(o.durationMs < 5000);
    assert.equal(w.dead, true);
  });

  test('a 5 MiB binary input and result cross unchanged', async () => {
    const w = await start(algorithm('Big', `def apply(data):\n    return bytes(b ^ 0xff for b in data[:16]) + data[16:]\n`));
    const input = Buffer.alloc(5 * 1024 * 1024);
    for (let i = 0; i < input.length; i++) input[i] = (i * 31 + (i >> 8)) & 0xff;
    const o = await w.call('binary', input, 20_000);
    assert.equal(o.kind, 'result');
    if (o.kind === 'result') {
      assert.equal(o.body.length, input.length);
      assert.deepEqual([...o.body.subarray(0, 16)], [...input.subarray(0, 16)].map((b) => b ^ 0xff));
      assert.ok(o.body.subarray(16).equals(input.subarray(16)));
    }
  });

  test('sys.exit() inside apply is a SystemExit error, and the worker lives on', async () => {
    const w = await start(algorithm('Exits', `import sys\n\ndef apply(x):\n    if x:\n        sys.exit(3)\n    return 'alive'\n`));
    const e = errorOf(await w.call('json', Buffer.from('true'), 5000));
    assert.equal(e.error_type, 'SystemExit');
    assert.match(e.message, /\b3\b/);
    assert.equal(text(await w.call('json', Buffer.from('false'), 5000)), 'alive');
    assert.equal(w.dead, false);
  });

  test('allocating without limit ends in OutOfMemory, not in a hang or the server', async () => {
    const spec = algorithm('Hog', `def apply(x):\n    if x == 'small':\n        return 'ok'\n    hog = []\n    while True:\n        hog.append(bytearray(8 * 1024 * 1024))\n`);
    spec.limits = { ...spec.limits, heapMb: 128 };
    const w = await start(spec);
    const t0 = Date.now();
    const o = await w.call('text', Buffer.from('big'), 30_000);
    assert.ok(Date.now() - t0 < 20_000);
    if (o.kind === 'algorithm_error') {
      assert.equal(o.error.error_type, 'OutOfMemoryError');
      assert.match(o.error.stacktrace, /MemoryError/);
      assert.equal(text(await w.call('text', Buffer.from('small'), 5000)), 'ok', 'the memory is released: the worker can go on');
    } else {
      assert.ok(o.kind === 'out_of_memory' || o.kind === 'crashed', JSON.stringify(o));
    }
  });

  test('running forever: a timeout kills the whole sandbox', async () => {
    const w = await start(algorithm('Forever', `def apply(x):\n    while True:\n        pass\n`));
    await assertTimeoutKillsSandbox(w);
  });

  test('the runner exits when the channel closes', async () => {
    const w = await Worker.start(algorithm('Stops', `def apply(x):\n    return x\n`));
    const t0 = Date.now();
    await w.stop(3000);
    assert.ok(Date.now() - t0 < 2000, 'stopped by closing the channel, not by a signal');
    assert.ok(groupGone(w));
  });

  test('--check: exit 0 for a good entry (load() not run), 1 with the reason for a bad one', async () => {
    const run = async (spec: SandboxSpec) => {
      const child = spawnSandbox({ ...spec, check: true });
      let stdout = '';
      let stderr = '';
      child.stdout!.on('data', (c: Buffer) => (stdout += c.toString()));
      child.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
      const code = await new Promise<number | null>((resolve) => child.once('exit', (c) => resolve(c)));
      return { code, stdout, stderr };
    };
    const good = await run(algorithm('CheckGood', `import helper\n\ndef load():\n    print('LOADED')\n\ndef apply(x):\n    return x\n`, { 'src/helper.py': '' }));
    assert.equal(good.code, 0, good.stderr);
    assert.equal(good.stdout.includes('LOADED'), false, 'load() is not run');
    const bad = await run(algorithm('CheckBad', `def not_apply(x):\n    return x\n`));
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /CheckBad\.py defines no apply function/);
    const syntax = await run(algorithm('CheckSyntax', `def apply(x)\n    return x\n`));
    assert.equal(syntax.code, 1);
    assert.match(syntax.stderr, /SyntaxError/);
  });

  test('cold start (measured, not asserted)', async () => {
    const spec = algorithm('Cold', `def apply(x):\n    return x\n`);
    const nodeDir = path.join(root, 'algos', 'ColdNode');
    fs.mkdirSync(nodeDir, { recursive: true });
    fs.writeFileSync(path.join(nodeDir, 'index.mjs'), 'export function apply(x) { return x; }');
    const nodeSpec: SandboxSpec = { runner: 'node', algoDir: nodeDir, entry: 'index.mjs', network: false, limits: { ...DEFAULT_LIMITS } };
    const p50 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!.toFixed(1);
    for (const [name, s] of [['python', spec], ['node', nodeSpec]] as const) {
      const ready: number[] = [];
      const firstCall: number[] = [];
      for (let i = 0; i < 15; i++) {
        const t0 = performance.now();
        const w = await Worker.start(s);
        ready.push(performance.now() - t0);
        const o = await w.call('json', Buffer.from('1'), 5000);
        firstCall.push(performance.now() - t0);
        assert.equal(text(o), '1');
        await w.stop(500);
      }
      console.log(`cold start (${name} runner, sandboxed): ready p50 ${p50(ready)} ms, ready + first call p50 ${p50(firstCall)} ms (n=${ready.length})`);
    }
  });
});
