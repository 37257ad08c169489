#!/usr/bin/env python3
"""Raw loopback TCP throughput with N parallel streams (the ceiling that
issue 17 compares the socket transport against): one sender process per
stream and one receiver process per stream, 1 GiB per stream in 4 MiB writes.
Usage: tcp_probe.py [--span MiB] [--rspan MiB] [--gib G] [--both] N [N...]
  --span: each side cycles through a buffer of this many MiB (default 4: the
          bytes stay in the CPU caches; a large span reads and writes memory,
          as a transport staging whole messages does)
  --rspan: the receivers' buffer instead (default: --span)
  --gib: GiB per stream (default 1; more keeps the load up for longer, e.g.
          beside another probe)
  --both: N streams each way at once (sendrecv's pattern); GB/s per direction"""
import multiprocessing as mp
import socket
import sys
import time

TOTAL = 1 << 30
BLOCK = 4 << 20
SPAN = BLOCK
RSPAN = BLOCK


def sink(port, ready):
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen(1)
    ready.set()
    c = srv.accept()[0]
    view = memoryview(bytearray(RSPAN))
    left = TOTAL
    off = 0
    while left > 0:
        got = c.recv_into(view[off:], min(BLOCK, left, RSPAN - off))
        if got == 0:
            break
        left -= got
        off = (off + got) % RSPAN


def source(port):
    s = socket.create_connection(("127.0.0.1", port))
    data = memoryview(b"\x5a" * SPAN)
    sent = 0
    while sent < TOTAL:
        off = sent % SPAN
        s.sendall(data[off:off + BLOCK])
        sent += BLOCK
    s.close()


def probe(n, port, both):
    streams = 2 * n if both else n
    rx = []
    for i in range(streams):
        ready = mp.Event()
        rx.append(mp.Process(target=sink, args=(port + i, ready)))
        rx[-1].start()
        ready.wait()
    start = time.time()
    tx = [mp.Process(target=source, args=(port + i,)) for i in range(streams)]
    for p in tx:
        p.start()
    for p in tx + rx:
        p.join()
    secs = time.time() - start
    how = " each way, GB/s per direction" if both else ""
    print(f"loopback TCP, {n} stream(s){how}, span {SPAN >> 20}/{RSPAN >> 20} MiB: {n * TOTAL / secs / 1e9:.2f} GB/s")


if __name__ == "__main__":
    args = sys.argv[1:]
    both = "--both" in args
    args = [a for a in args if a != "--both"]
    if "--gib" in args:
        i = args.index("--gib")
        TOTAL = max(1, int(args[i + 1])) << 30
        del args[i:i + 2]
    for flag in ("--span", "--rspan"):
        if flag in args:
            i = args.index(flag)
            span = max(BLOCK, int(args[i + 1]) << 20) // BLOCK * BLOCK
            SPAN, RSPAN = (span, span) if flag == "--span" else (SPAN, span)
            del args[i:i + 2]
    for i, arg in enumerate(args or ["1"]):
        probe(int(arg), 29500 + 64 * i, both)
