"""Stand-in hosts for test/helpers/testNetwork.ts, run inside a test's own network namespaces.

  standins.py internet   TCP 7001 and UDP 7002 answering "INTERNET <proto> from <peer>", and a
                         DNS server on port 53, on every address of its namespace (198.51.100.1).
  standins.py leak PORT  TCP and UDP on PORT of every address of the server namespace (127.0.0.1,
                         ::1, 10.1.2.3, 169.254.169.254, ...), answering "LEAK <proto> <local> from
                         <peer>": a sandbox that reaches it got through the fence.

Every answer is also printed (one line) for the test to read; "ready" once listening.
Standard library only.
"""
import socket
import struct
import sys
import threading

NAMES = {
    "good.test": ("198.51.100.1", "2001:db8:100::1"),
    "loop.test": ("127.0.0.1", "::1"),
    "priv.test": ("10.1.2.3", None),
    "meta.test": ("169.254.169.254", None),
    "api.test": ("198.51.100.2", None),
}
lock = threading.Lock()
# Linux's IP_PKTINFO (Python's socket module names it only on some builds).
IP_PKTINFO = getattr(socket, "IP_PKTINFO", 8)


def say(line):
    with lock:
        print(line, flush=True)


def tcp_server(family, host, port, tag):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    s.bind((host, port))
    s.listen(64)

    def answer(c, peer):
        line = tag("tcp", c.getsockname(), peer)
        say(line)
        try:
            c.sendall((line + "\n").encode())
            # What the client sends (a request line) is read, so that its write never fails.
            c.settimeout(2)
            c.recv(1024)
        except OSError:
            pass
        finally:
            c.close()

    def serve():
        while True:
            c, peer = s.accept()
            threading.Thread(target=answer, args=(c, peer), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()


def udp_server(family, host, port, tag):
    s = socket.socket(family, socket.SOCK_DGRAM)
    if family == socket.AF_INET6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    # The address a datagram was sent to, for the answer and the log.
    if family == socket.AF_INET:
        s.setsockopt(socket.IPPROTO_IP, IP_PKTINFO, 1)
    s.bind((host, port))

    def serve():
        while True:
            data, anc, _flags, peer = s.recvmsg(2048, 256)
            local = (host, port)
            for level, kind, value in anc:
                if level == socket.IPPROTO_IP and kind == IP_PKTINFO:
                    local = (socket.inet_ntoa(value[8:12]), port)
            line = tag("udp", local, peer)
            say(line)
            s.sendto((line + "\n").encode(), peer)

    threading.Thread(target=serve, daemon=True).start()


def dns_answer(query):
    qid, _flags, qd = struct.unpack(">HHH", query[:6])
    pos, labels = 12, []
    while query[pos] != 0:
        n = query[pos]
        labels.append(query[pos + 1 : pos + 1 + n].decode().lower())
        pos += 1 + n
    qtype, _qclass = struct.unpack(">HH", query[pos + 1 : pos + 5])
    question = query[12 : pos + 5]
    name = ".".join(labels)
    found = NAMES.get(name)
    answers = b""
    count = 0
    if found:
        v4, v6 = found
        if qtype == 1 and v4:
            answers = b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 5, 4) + socket.inet_aton(v4)
            count = 1
        elif qtype == 28 and v6:
            answers = b"\xc0\x0c" + struct.pack(">HHIH", 28, 1, 5, 16) + socket.inet_pton(socket.AF_INET6, v6)
            count = 1
    rcode = 0 if found else 3
    header = struct.pack(">HHHHHH", qid, 0x8180 | rcode, 1, count, 0, 0)
    return header + question + answers, name


def dns_server(host):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((host, 53))

    def serve():
        while True:
            data, peer = s.recvfrom(2048)
            try:
                answer, name = dns_answer(data)
            except Exception:
                continue
            say("DNS %s from %s" % (name, peer[0]))
            s.sendto(answer, peer)

    threading.Thread(target=serve, daemon=True).start()


def main():
    mode = sys.argv[1]
    if mode == "internet":
        tag = lambda proto, local, peer: "INTERNET %s from %s" % (proto, peer[0])
        tcp_server(socket.AF_INET, "0.0.0.0", 7001, tag)
        udp_server(socket.AF_INET, "0.0.0.0", 7002, tag)
        dns_server("0.0.0.0")
        try:
            tcp_server(socket.AF_INET6, "::", 7001, tag)
            udp_server(socket.AF_INET6, "::", 7002, tag)
        except OSError:
            pass
    else:
        port = int(sys.argv[2])
        tag = lambda proto, local, peer: "LEAK %s %s:%s from %s" % (proto, local[0], local[1], peer[0])
        tcp_server(socket.AF_INET, "0.0.0.0", port, tag)
        udp_server(socket.AF_INET, "0.0.0.0", port, tag)
        try:
            tcp_server(socket.AF_INET6, "::", port, tag)
            udp_server(socket.AF_INET6, "::", port, tag)
        except OSError:
            pass
    say("ready")
    threading.Event().wait()


main()
