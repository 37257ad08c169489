"""Checks scripts/net_timeline.py on a made-up two-process proxy trace of an
exchange loop whose timings are random every run and known here: each
message's wire time, staging spread, turnaround after the previous
receive and receive period come out as the medians computed by hand, the
warm-up messages are skipped, and lines that are not proxy chunk lines
(other subsystems, another message's chunks done on another link) are
ignored."""
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
import net_timeline  # noqa: E402

CHUNKS = 4  # per message


def trace(pid, t, way, peer, chunk, message=None, link=0):
    what = f"posted (message {message})" if message is not None else f"done (link {link})"
    return (f"vm:{pid}:{pid + 14} NCCL TRACE net_progress.cc:343 t={t} us: {way} peer {peer}: "
            f"chunk {chunk} {what}\n")


def median(values):
    v = sorted(values)
    return v[len(v) // 2]


def main():
    rnd = random.Random(os.getpid())
    checks = []  # (passed, what it says when it did not)
    messages, skip = 12, 3
    lines = ["vm:100:100 NCCL INFO proxy thread started\n"]
    # Process 100 sends to peer 1 and receives from it, one exchange per
    # message: receive m-1 completes, then after a turnaround the send of m
    # posts its chunks over a spread and completes after its wire time.
    want = {"send wire": [], "send spread": [], "turnaround": [], "receive period": []}
    t = 1000
    recv_done = {}
    for m in range(messages):
        # Receive m: posted early, its chunks land one after another.
        for c in range(CHUNKS):
            lines.append(trace(100, t, "receive from", 1, m * CHUNKS + c, message=m))
        landed = t + rnd.randint(200, 900)
        for c in range(CHUNKS):
            lines.append(trace(100, landed - (CHUNKS - 1 - c) * 5, "receive from", 1, m * CHUNKS + c,
                               link=c % 2))
        recv_done[m] = landed
        # Send m + 1 waits for this receive.
        turn, spread_us, wire = rnd.randint(50, 400), rnd.randint(10, 150), rnd.randint(200, 600)
        first = landed + turn
        for c in range(CHUNKS):
            posted = first + (spread_us if c == CHUNKS - 1 else c)
            lines.append(trace(100, posted, "send to", 1, (m + 1) * CHUNKS + c, message=m + 1))
        for c in range(CHUNKS):
            lines.append(trace(100, first + wire - c, "send to", 1, (m + 1) * CHUNKS + c, link=c % 2))
        if m + 1 >= skip and m + 1 < messages:
            want["turnaround"].append(turn)
            want["send spread"].append(spread_us)
            want["send wire"].append(wire)
        if m >= skip and m - 1 in recv_done:
            want["receive period"].append(landed - recv_done[m - 1])
        t = landed + 1
    rnd.shuffle(lines)  # two threads' lines interleave; order must not matter
    lines.append("vm:100:114 NCCL TRACE net_progress.cc:114 t=5 us: send to peer 1: chunk 999 done (link 0)\n")
    pairs = net_timeline.parse(lines)
    checks.append((list(pairs) == [(100, 1)], f"pairs {list(pairs)}"))
    got = net_timeline.measures(pairs[(100, 1)], skip)
    for name, values in want.items():
        g = got[name]
        if name != "receive period":
            # The last send (message `messages`) has no receive after it
            # here but is still a complete send: measured too.
            g = g[:len(values)]
        checks.append((median(g) == median(values),
                       f"{name}: median {median(g)} from the trace, {median(values)} built in"))
    rows = net_timeline.report(pairs, skip)
    checks.append((len(rows) == 1 and rows[0].startswith("process 100 peer 1: send wire "),
                   f"report {rows}"))
    failed = [what for passed, what in checks if not passed]
    for what in failed:
        print("FAIL", what)
    if failed:
        return 1
    print("PASS net_timeline: wire, spread, turnaround and receive period medians")
    return 0


if __name__ == "__main__":
    sys.exit(main())
