#!/usr/bin/env python3
"""Per-message timing of cross-host point-to-point traffic, from the proxy's
TRACE lines (NCCL_DEBUG=TRACE NCCL_DEBUG_SUBSYS=PROXY; device_p2p.sh's
netlat stage writes one file per process). For each process and peer:

  send wire        its first chunk handed to the network engine to its
                   last chunk done
  send spread      its first chunk handed over to its last (how long the
                   staging copies kept chunks back)
  turnaround       the receive of message m-1 from the same peer complete
                   (last chunk landed) to message m's first chunk handed
                   over: in an exchange loop, where each iteration's send
                   waits for the previous receive (ferry-bench sendrecv and
                   alltoall), the drain, the stream hops and the first
                   staging copy; left out where negative (no such wait)
  receive period   one receive's completion to the next's

Medians with the 10th and 90th percentiles, over messages from --skip on
(default 3: the warm-up's first messages carry connection set-up).
Usage: net_timeline.py [--skip N] FILE [FILE...]"""
import re
import sys
from collections import defaultdict

LINE = re.compile(r"^\S+?:(\d+):\d+ NCCL TRACE \S+ t=(\d+) us: (send to|receive from) peer (\d+): "
                  r"chunk (\d+) (?:posted \(message (\d+)\)|done \(link \d+\))")


class Direction:
    """One process's messages to or from one peer. Lines may come in any
    order (several threads, several files): chunks are matched to their
    messages once all are read (resolve)."""

    def __init__(self):
        self.message_of = {}  # chunk -> message
        self.dones = []  # (chunk, us)
        self.first_post = {}  # message -> us
        self.last_post = {}
        self.last_done = {}

    def posted(self, chunk, message, t):
        self.message_of[chunk] = message
        self.first_post[message] = min(t, self.first_post.get(message, t))
        self.last_post[message] = max(t, self.last_post.get(message, t))

    def done(self, chunk, t):
        self.dones.append((chunk, t))

    def resolve(self):
        for chunk, t in self.dones:
            message = self.message_of.get(chunk)
            if message is not None:
                self.last_done[message] = max(t, self.last_done.get(message, t))


def parse(lines):
    """(pid, peer) -> {"send": Direction, "receive": Direction}."""
    out = defaultdict(lambda: {"send": Direction(), "receive": Direction()})
    for line in lines:
        m = LINE.match(line)
        if not m:
            continue
        pid, t, way, peer, chunk, message = m.groups()
        d = out[(int(pid), int(peer))]["send" if way == "send to" else "receive"]
        if message is not None:
            d.posted(int(chunk), int(message), int(t))
        else:
            d.done(int(chunk), int(t))
    for pair in out.values():
        for d in pair.values():
            d.resolve()
    return dict(out)


def spread(values):
    """(median, 10th percentile, 90th percentile, count), or None."""
    if not values:
        return None
    v = sorted(values)
    pick = lambda q: v[min(len(v) - 1, int(q * len(v)))]  # noqa: E731
    return (v[len(v) // 2], pick(0.1), pick(0.9), len(v))


def measures(pair, skip):
    """The four series of one (pid, peer), in us."""
    send, recv = pair["send"], pair["receive"]
    sent = [m for m in sorted(send.first_post) if m >= skip and m in send.last_done]
    got = [m for m in sorted(recv.last_done) if m >= skip]
    turn = [send.first_post[m] - recv.last_done[m - 1] for m in sent if m - 1 in recv.last_done]
    return {
        "send wire": [send.last_done[m] - send.first_post[m] for m in sent],
        "send spread": [send.last_post[m] - send.first_post[m] for m in sent],
        "turnaround": [t for t in turn if t >= 0],
        "receive period": [recv.last_done[m] - recv.last_done[m - 1] for m in got if m - 1 in recv.last_done],
    }


def report(pairs, skip):
    rows = []
    for (pid, peer), pair in sorted(pairs.items()):
        parts = []
        for name, values in measures(pair, skip).items():
            s = spread(values)
            parts.append(f"{name} {s[0]} us ({s[1]}-{s[2]}, {s[3]})" if s else f"{name} -")
        rows.append(f"process {pid} peer {peer}: " + "; ".join(parts))
    return rows


def main(argv):
    skip = 3
    if len(argv) >= 2 and argv[0] == "--skip":
        skip, argv = int(argv[1]), argv[2:]
    if not argv:
        print(__doc__)
        return 2
    lines = []
    for path in argv:
        with open(path, errors="replace") as f:
            lines += f.readlines()
    rows = report(parse(lines), skip)
    print("\n".join(rows) if rows else "no proxy chunk lines (NCCL_DEBUG_SUBSYS=PROXY at TRACE?)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
