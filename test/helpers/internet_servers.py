"""Stand-in servers for test/helpers/netns.ts, each run inside one of a test's own network
namespaces with `ip netns exec` (never in the host's).

  internet_servers.py internet --log FILE --addr 198.51.100.1 [--addr6 2001:db8:100::1]
                               --tcp 7001 --udp 7002
      TCP on --tcp and UDP on --udp answering "INTERNET <proto> from <peer>", and a DNS server
      on 53 (UDP and TCP), on --addr (and --addr6). Turns forwarding off in its namespace
      first: nothing lies beyond the stand-in internet.
  internet_servers.py leak --log FILE --port N
      TCP and UDP on 0.0.0.0:N and [::]:N answering "LEAK <proto> <local addr>:<port> from
      <peer>": a sandbox that reaches it got through the fence.

Every answer is appended (one line) to --log; "ready" is printed on stdout once every socket
listens. Standard library only.
"""
import argparse
import ctypes
import ipaddress
import os
import signal
import socket
import struct
import sys
import threading

# name -> (A, AAAA); a known name without an address of the asked type answers NOERROR, empty.
NAMES = {
    "good.test": ("198.51.100.1", "2001:db8:100::1"),
    "loop.test": ("127.0.0.1", "::1"),
    "priv.test": ("10.1.2.3", "fd99::1"),
    "meta.test": ("169.254.169.254", None),
    "api.test": ("198.51.100.2", "2001:db8:100::2"),
}
TYPE_A, TYPE_AAAA = 1, 28

# Linux values; Python's socket module names IP_PKTINFO only on some builds.
IP_PKTINFO = getattr(socket, "IP_PKTINFO", 8)
IPV6_RECVPKTINFO = getattr(socket, "IPV6_RECVPKTINFO", 49)
IPV6_PKTINFO = getattr(socket, "IPV6_PKTINFO", 50)

log_lock = threading.Lock()
log_path = None


def log(line):
    with log_lock:
        fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)


def die_with_parent():
    """SIGKILL when the process that spawned us (node) dies, even by SIGKILL."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() == 1:
            os._exit(1)
    except Exception:
        pass


def spawn(fn, *args):
    threading.Thread(target=fn, args=args, daemon=True).start()


def host_of(addr):
    return addr[0].split("%")[0]


def tcp_listen(family, host, port):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    s.bind((host, port))
    s.listen(128)
    return s


def udp_bind(family, host, port, pktinfo=False):
    s = socket.socket(family, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        if pktinfo:
            s.setsockopt(socket.IPPROTO_IPV6, IPV6_RECVPKTINFO, 1)
    elif pktinfo:
        s.setsockopt(socket.IPPROTO_IP, IP_PKTINFO, 1)
    s.bind((host, port))
    return s


def answer_and_close(conn, data):
    """Sends data, then drains what the peer sent (closing unread data would reset)."""
    try:
        conn.settimeout(2)
        conn.sendall(data)
        conn.shutdown(socket.SHUT_WR)
        while conn.recv(4096):
            pass
    except OSError:
        pass
    finally:
        conn.close()


def tcp_serve(listener, line_for):
    while True:
        try:
            conn, peer = listener.accept()
        except OSError:
            continue
        line = line_for(conn, peer)
        log(line)
        spawn(answer_and_close, conn, (line + "\n").encode())


# ---- leak ------------------------------------------------------------------------------------

def udp_leak(s, family, port):
    while True:
        try:
            data, anc, _flags, peer = s.recvmsg(65535, socket.CMSG_SPACE(64))
        except OSError:
            continue
        local, pktinfo = None, None
        for level, kind, value in anc:
            if family == socket.AF_INET and level == socket.IPPROTO_IP and kind == IP_PKTINFO:
                # struct in_pktinfo { int ifindex; in_addr spec_dst; in_addr addr; }
                local = socket.inet_ntop(socket.AF_INET, value[8:12])
                pktinfo = struct.pack("@i4s4s", 0, value[8:12], b"\0" * 4)
            elif family == socket.AF_INET6 and level == socket.IPPROTO_IPV6 and kind == IPV6_PKTINFO:
                # struct in6_pktinfo { in6_addr addr; int ifindex; }
                local = socket.inet_ntop(socket.AF_INET6, value[:16])
                pktinfo = value[:16] + struct.pack("@i", 0)
        shown = f"[{local}]" if family == socket.AF_INET6 else local
        line = f"LEAK udp {shown}:{port} from {host_of(peer)}"
        log(line)
        # Answer from the address it was sent to (a connected client drops anything else).
        level = socket.IPPROTO_IP if family == socket.AF_INET else socket.IPPROTO_IPV6
        kind = IP_PKTINFO if family == socket.AF_INET else IPV6_PKTINFO
        try:
            s.sendmsg([(line + "\n").encode()], [(level, kind, pktinfo)] if pktinfo else [], 0, peer)
        except OSError:
            pass


def leak(port):
    def line_for(conn, peer):
        local = conn.getsockname()
        shown = f"[{host_of(local)}]" if conn.family == socket.AF_INET6 else local[0]
        return f"LEAK tcp {shown}:{port} from {host_of(peer)}"

    started = 0
    for family, host in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        try:
            t = tcp_listen(family, host, port)
            u = udp_bind(family, host, port, pktinfo=True)
        except OSError:
            if family == socket.AF_INET6:
                continue  # no IPv6 in this namespace
            raise
        spawn(tcp_serve, t, line_for)
        spawn(udp_leak, u, family, port)
        started += 1
    return started


# ---- internet --------------------------------------------------------------------------------

def udp_internet(s):
    while True:
        try:
            _data, peer = s.recvfrom(65535)
        except OSError:
            continue
        line = f"INTERNET udp from {host_of(peer)}"
        log(line)
        try:
            s.sendto((line + "\n").encode(), peer)
        except OSError:
            pass


def read_name(msg, off):
    labels = []
    while True:
        n = msg[off]
        if n == 0:
            return ".".join(labels), off + 1
        if n & 0xC0:
            raise ValueError("compressed name in question")
        labels.append(msg[off + 1:off + 1 + n].decode("ascii", "replace"))
        off += 1 + n


def dns_answer(query, peer, proto):
    """The response to one DNS query, or None to ignore it."""
    if len(query) < 12:
        return None
    qid, flags, qdcount = struct.unpack("!HHH", query[:6])
    if flags & 0x8000:
        return None  # a response, not a query
    try:
        if qdcount != 1:
            raise ValueError("one question only")
        name, off = read_name(query, 12)
        qtype, qclass = struct.unpack("!HH", query[off:off + 4])
        question = query[12:off + 4]
    except (ValueError, IndexError, struct.error):
        return struct.pack("!HHHHHH", qid, 0x8000 | (flags & 0x0100) | 1, 0, 0, 0, 0)  # FORMERR
    name = name.lower().rstrip(".")
    known = NAMES.get(name)
    answers = []
    if known and qclass == 1:
        a, aaaa = known
        if qtype == TYPE_A and a:
            answers.append((TYPE_A, socket.inet_pton(socket.AF_INET, a)))
        elif qtype == TYPE_AAAA and aaaa:
            answers.append((TYPE_AAAA, socket.inet_pton(socket.AF_INET6, aaaa)))
    rcode = 0 if known else 3  # NXDOMAIN
    qname = {TYPE_A: "A", TYPE_AAAA: "AAAA"}.get(qtype, str(qtype))
    log(f"DNS {proto} {qname} {name} from {host_of(peer)} -> "
        + (", ".join(ipaddress.ip_address(r).compressed for _t, r in answers) or ("NXDOMAIN" if rcode else "NODATA")))
    out = struct.pack("!HHHHHH", qid, 0x8400 | (flags & 0x0100) | 0x0080 | rcode, 1, len(answers), 0, 0)
    out += question
    for t, rdata in answers:
        out += struct.pack("!HHHIH", 0xC00C, t, 1, 60, len(rdata)) + rdata
    return out


def dns_udp(s):
    while True:
        try:
            data, peer = s.recvfrom(65535)
        except OSError:
            continue
        reply = dns_answer(data, peer, "udp")
        if reply:
            try:
                s.sendto(reply, peer)
            except OSError:
                pass


def recv_exact(conn, n):
    buf = b""
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def dns_tcp_conn(conn, peer):
    try:
        conn.settimeout(5)
        while True:
            head = recv_exact(conn, 2)
            if head is None:
                return
            query = recv_exact(conn, struct.unpack("!H", head)[0])
            if query is None:
                return
            reply = dns_answer(query, peer, "tcp")
            if reply:
                conn.sendall(struct.pack("!H", len(reply)) + reply)
    except OSError:
        pass
    finally:
        conn.close()


def dns_tcp(listener):
    while True:
        try:
            conn, peer = listener.accept()
        except OSError:
            continue
        spawn(dns_tcp_conn, conn, peer)


def no_forwarding():
    for f in ("/proc/sys/net/ipv4/ip_forward", "/proc/sys/net/ipv6/conf/all/forwarding"):
        try:
            with open(f, "w") as fh:
                fh.write("0")
        except OSError:
            pass
        try:
            with open(f) as fh:
                if fh.read().strip() != "0":
                    sys.exit(f"{f} is on in the internet namespace and cannot be turned off")
        except FileNotFoundError:
            pass  # no IPv6


def internet(addrs, tcp_port, udp_port):
    no_forwarding()

    def line_for(_conn, peer):
        return f"INTERNET tcp from {host_of(peer)}"

    for family, host in addrs:
        spawn(tcp_serve, tcp_listen(family, host, tcp_port), line_for)
        spawn(udp_internet, udp_bind(family, host, udp_port))
        spawn(dns_udp, udp_bind(family, host, 53))
        spawn(dns_tcp, tcp_listen(family, host, 53))


def main():
    global log_path
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["internet", "leak"])
    p.add_argument("--log", required=True)
    p.add_argument("--port", type=int)
    p.add_argument("--addr")
    p.add_argument("--addr6")
    p.add_argument("--tcp", type=int)
    p.add_argument("--udp", type=int)
    a = p.parse_args()
    log_path = a.log
    die_with_parent()
    if a.mode == "leak":
        leak(a.port)
    else:
        addrs = [(socket.AF_INET, a.addr)] + ([(socket.AF_INET6, a.addr6)] if a.addr6 else [])
        internet(addrs, a.tcp, a.udp)
    print("ready", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    threading.Event().wait()


if __name__ == "__main__":
    main()
