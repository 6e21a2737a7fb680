/**
 * A seccomp filter for sandboxed processes (bwrap `--seccomp FD`), as a classic BPF program
 * built here (no libseccomp). It refuses, with EPERM, kernel interfaces algorithms never need
 * and that widen the kernel's attack surface: keyrings, BPF, userfaultfd, perf events,
 * io_uring, ptrace, kernel modules and kexec, mounts and namespaces, process memory access,
 * clock and quota changes. Everything else is allowed: the sandbox's other layers (namespaces,
 * no capabilities, read-only file system, cgroups) do the rest.
 *
 * Only x86_64 is described; elsewhere `seccompProgram()` answers undefined and the sandbox
 * runs without a filter (docs/runtime-protocol.md). The x32 ABI (syscall numbers with bit 30
 * set) is refused entirely, and a process of another architecture is killed, so the filter
 * cannot be sidestepped by switching ABI.
 */

// linux/filter.h and linux/seccomp.h
const BPF_LD_W_ABS = 0x20;
const BPF_JMP_JEQ_K = 0x15;
const BPF_JMP_JGE_K = 0x35;
const BPF_RET_K = 0x06;
const SECCOMP_RET_KILL_PROCESS = 0x80000000;
const SECCOMP_RET_ERRNO = 0x00050000;
const SECCOMP_RET_ALLOW = 0x7fff0000;
const EPERM = 1;
const AUDIT_ARCH_X86_64 = 0xc000003e;
const X32_SYSCALL_BIT = 0x40000000;
/** Offsets in struct seccomp_data. */
const DATA_NR = 0;
const DATA_ARCH = 4;

/** x86_64 syscall numbers refused, by name (arch/x86/entry/syscalls/syscall_64.tbl). */
export const DENIED_X86_64: Readonly<Record<string, number>> = {
  ptrace: 101,
  syslog: 103,
  vhangup: 153,
  pivot_root: 155,
  adjtimex: 159,
  acct: 163,
  settimeofday: 164,
  mount: 165,
  umount2: 166,
  swapon: 167,
  swapoff: 168,
  reboot: 169,
  init_module: 175,
  delete_module: 176,
  quotactl: 179,
  lookup_dcookie: 212,
  kexec_load: 246,
  add_key: 248,
  request_key: 249,
  keyctl: 250,
  unshare: 272,
  move_pages: 279,
  perf_event_open: 298,
  name_to_handle_at: 303,
  open_by_handle_at: 304,
  clock_adjtime: 305,
  setns: 308,
  process_vm_readv: 310,
  process_vm_writev: 311,
  finit_module: 313,
  kexec_file_load: 320,
  bpf: 321,
  userfaultfd: 323,
  io_uring_setup: 425,
  io_uring_enter: 426,
  io_uring_register: 427,
  open_tree: 428,
  move_mount: 429,
  fsopen: 430,
  fsconfig: 431,
  fsmount: 432,
  fspick: 433,
  pidfd_getfd: 438,
  mount_setattr: 442,
};

function instruction(code: number, jt: number, jf: number, k: number): Buffer {
  const b = Buffer.alloc(8);
  b.writeUInt16LE(code, 0);
  b.writeUInt8(jt, 2);
  b.writeUInt8(jf, 3);
  b.writeUInt32LE(k >>> 0, 4);
  return b;
}

let cached: Buffer | undefined | null = null;

/** The compiled filter (struct sock_filter[] in host byte order), or undefined off x86_64. */
export function seccompProgram(): Buffer | undefined {
  if (cached !== null) return cached;
  if (process.arch !== 'x64') return (cached = undefined);
  const denied = Object.values(DENIED_X86_64);
  const prog: Buffer[] = [];
  // 0: the architecture must be x86_64, else the process dies.
  prog.push(instruction(BPF_LD_W_ABS, 0, 0, DATA_ARCH));
  prog.push(instruction(BPF_JMP_JEQ_K, 1, 0, AUDIT_ARCH_X86_64));
  prog.push(instruction(BPF_RET_K, 0, 0, SECCOMP_RET_KILL_PROCESS));
  prog.push(instruction(BPF_LD_W_ABS, 0, 0, DATA_NR));
  // Layout from here: [x32 check] [one JEQ per denied number] [ALLOW] [DENY].
  const checks = 1 + denied.length;
  const denyAt = prog.length + checks + 1;
  const jumpToDeny = (at: number) => denyAt - (at + 1);
  prog.push(instruction(BPF_JMP_JGE_K, jumpToDeny(prog.length), 0, X32_SYSCALL_BIT));
  for (const nr of denied) prog.push(instruction(BPF_JMP_JEQ_K, jumpToDeny(prog.length), 0, nr));
  prog.push(instruction(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW));
  prog.push(instruction(BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | EPERM));
  if (jumpToDeny(4) > 255) throw new Error('seccomp program too long for 8-bit jumps');
  return (cached = Buffer.concat(prog));
}
