/**
 * The seccomp filter: kernel interfaces algorithms never need are refused with EPERM inside
 * the sandbox, while the same call works without the filter (so the test can fail).
 */
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { DEFAULT_LIMITS, probeSandbox } from '../src/runtime/sandbox.ts';
import { DENIED_X86_64, seccompProgram } from '../src/runtime/seccomp.ts';
import { Worker } from '../src/runtime/worker.ts';

const support = probeSandbox();
const skip = !support.available ? `bubblewrap unavailable: ${support.reason}` : process.arch !== 'x64' ? 'the filter is described for x86_64 only' : false;
const root = fs.mkdtempSync(path.join(os.tmpdir(), 'algohost-seccomp-'));
after(() => fs.rmSync(root, { recursive: true, force: true }));

/** Makes raw syscalls with ctypes (standard library) and reports result and errno. */
const PROBE = `import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)

def call(nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(nr, *[ctypes.c_long(a) for a in args])
    return [r, ctypes.get_errno()]

def apply(input):
    return {
        # keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, create): works unprivileged
        'keyctl': call(250, 0, -3, 1),
        # io_uring_setup(0 entries, NULL): EINVAL without the filter, EPERM with it
        'io_uring_setup': call(425, 0, 0),
        # an x32-ABI getpid: refused as a whole ABI
        'x32_getpid': call(0x40000000 + 39),
        'getpid': call(39),
        'fds': sorted(os.listdir('/proc/self/fd')),
    }
`;

async function probe(seccomp: boolean): Promise<Record<string, [number, number] | string[]>> {
  const dir = path.join(root, 'probe');
  fs.mkdirSync(path.join(dir, 'src'), { recursive: true });
  fs.writeFileSync(path.join(dir, 'src', 'Probe.py'), PROBE);
  const w = await Worker.start({ runner: 'python', algoDir: dir, entry: 'src/Probe.py', network: false, limits: { ...DEFAULT_LIMITS }, seccomp });
  try {
    const o = await w.call('text', Buffer.from('x'), 20_000);
    assert.equal(o.kind, 'result', JSON.stringify(o));
    return JSON.parse(o.kind === 'result' ? o.body.toString('utf8') : '{}');
  } finally {
    await w.stop();
  }
}

test('the program: arch check, x32 refused, one jump per denied call, allow, deny', { skip: process.arch !== 'x64' }, () => {
  const prog = seccompProgram()!;
  const n = Object.keys(DENIED_X86_64).length;
  assert.equal(prog.length, 8 * (4 + 1 + n + 2));
  const ret = (i: number) => prog.readUInt32LE(8 * i + 4);
  const last = prog.length / 8 - 1;
  assert.equal(ret(last), 0x00050001, 'the last instruction returns EPERM');
  assert.equal(ret(last - 1), 0x7fff0000, 'the one before allows');
  assert.equal(ret(2), 0x80000000, 'another architecture is killed');
});

test('refused with EPERM inside the sandbox, working without the filter', { skip }, async () => {
  const filtered = await probe(true);
  const open = await probe(false);
  assert.deepEqual(filtered.keyctl, [-1, 1]);
  assert.ok((open.keyctl as number[])[0]! > 0, `keyctl works without the filter: ${JSON.stringify(open.keyctl)}`);
  assert.deepEqual(filtered.io_uring_setup, [-1, 1]);
  assert.notEqual((open.io_uring_setup as number[])[1], 1);
  assert.deepEqual(filtered.x32_getpid, [-1, 1]);
  // Ordinary calls are untouched, and the program's descriptor does not stay open inside.
  assert.ok((filtered.getpid as number[])[0]! > 0);
  assert.deepEqual(filtered.fds, open.fds);
});
