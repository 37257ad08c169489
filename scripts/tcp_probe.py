#!/usr/bin/env python3
"""Raw loopback TCP throughput with N parallel streams (the ceiling that
issue 17 compares the socket transport against): one sender process per
stream and one receiver process per stream, 1 GiB per stream in 4 MiB writes. Usage: tcp_probe.py N [N...]"""
import multiprocessing as mp
import socket
import sys
import time

TOTAL = 1 << 30
BLOCK = 4 << 20


def sink(port, ready):
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen(1)
    ready.set()
    c = srv.accept()[0]
    view = memoryview(bytearray(BLOCK))
    left = TOTAL
    while left > 0:
        got = c.recv_into(view, min(BLOCK, left))
        if got == 0:
            break
        left -= got


def source(port):
    s = socket.create_connection(("127.0.0.1", port))
    data = b"\x5a" * BLOCK
    sent = 0
    while sent < TOTAL:
        s.sendall(data)
        sent += BLOCK
    s.close()


def probe(n, port):
    rx = []
    for i in range(n):
        ready = mp.Event()
        rx.append(mp.Process(target=sink, args=(port + i, ready)))
        rx[-1].start()
        ready.wait()
    start = time.time()
    tx = [mp.Process(target=source, args=(port + i,)) for i in range(n)]
    for p in tx:
        p.start()
    for p in tx + rx:
        p.join()
    secs = time.time() - start
    print(f"loopback TCP, {n} stream(s): {n * TOTAL / secs / 1e9:.2f} GB/s")


if __name__ == "__main__":
    for i, arg in enumerate(sys.argv[1:] or ["1"]):
        probe(int(arg), 29500 + 64 * i)
