"""Where a profiled step's GPU time goes, from torch.profiler Chrome traces
(clients.py with CLIENT_PROFILE_STEP=1 and CLIENT_TRACE_DIR; with
CLIENT_AB_ENV every group's step is traced in the same process, so two
settings can be compared without the spread between processes).

  python3 trace_gaps.py TRACE.json [TRACE.json ...]

Per trace and GPU: the window from the first GPU activity to the last, each
stream's activities (kernels, copies, memsets), the time it was busy (the
union of its intervals) and its share of the window; for the stream with
the most activities (the model's compute stream: a communication stream
has fewer, longer ones, and a spin-wait kernel looks busy while it waits),
its idle time and its longest gaps with the activities on either
side (what it waited between), each gap split into the part before the CPU
call that issued the activity after it returned (the GPU waited for the
CPU: "cpu") and the rest (it waited for something else, a stream wait on
another stream's work: "dep"), by the trace's correlation ids; on the CPU,
the CUDA runtime and driver calls that took the most time; and the
communication calls' CPU: torch's `nccl:*` annotations (`nccl:coalesced`
is one p2p call's group end), their count and median span, and the CUDA
calls inside them (same thread), so that two libraries' or two settings'
calls can be compared call by call (session 32: SM-free 104 us median
against kernel p2p's 42). With several traces, one summary row each.
One profiled step is a weak measure of small CPU differences: the main
thread's speed moved 1.5-1.9x between profiled steps of one process
(NOTES.md trap 68).
Runs on any machine (no torch needed): the traces are plain JSON."""
import json
import sys
from collections import defaultdict

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
CPU_CALL_CATS = {"cuda_runtime", "cuda_driver"}


def load(path: str) -> list:
    with open(path) as f:
        data = json.load(f)
    events = data.get("traceEvents", data) if isinstance(data, dict) else data
    return [e for e in events if isinstance(e, dict) and e.get("ph") == "X" and "dur" in e]


def gpu_key(e: dict):
    """(device, stream) of a GPU activity: from its args when present (Kineto
    writes device and stream there), else its pid and tid."""
    args = e.get("args") or {}
    return (args.get("device", e.get("pid")), args.get("stream", e.get("tid")))


def union(intervals: list) -> float:
    """Total length covered by (start, end) intervals."""
    total, end = 0.0, None
    for s, t in sorted(intervals):
        if end is None or s > end:
            total += t - s
            end = t
        elif t > end:
            total += t - end
            end = t
    return total


def correlation(e: dict):
    return (e.get("args") or {}).get("correlation")


def gaps(acts: list, issued: dict, top: int) -> tuple:
    """A stream's idle time between its activities (sorted by start): the
    total, the part spent waiting for the CPU (up to when the call that
    issued the next activity returned: `issued`, correlation id -> end of
    that call), and the `top` longest gaps as (length, cpu part, before,
    after). A gap whose next activity has no known call counts as "dep"."""
    found, end, last = [], None, None
    for a in sorted(acts, key=lambda a: a["ts"]):
        if end is not None and a["ts"] > end:
            length = a["ts"] - end
            cpu = min(max(issued.get(correlation(a), end) - end, 0.0), length)
            found.append((length, cpu, last["name"], a["name"]))
        if end is None or a["ts"] + a["dur"] > end:
            end, last = a["ts"] + a["dur"], a
    idle, cpu = sum(g[0] for g in found), sum(g[1] for g in found)
    found.sort(key=lambda g: -g[0])
    return idle, cpu, found[:top]


def short(name: str, width: int = 48) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."


def comm_calls(events: list) -> dict:
    """Per `nccl:*` user annotation name: [count, total us, median us, {CUDA
    call name: [count, total us]}] for the calls that lie wholly inside one
    of its spans on the same thread."""
    spans = defaultdict(list)
    for e in events:
        if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("nccl:"):
            spans[e["name"]].append(e)
    calls = [e for e in events if e.get("cat") in CPU_CALL_CATS]
    found = {}
    for name, es in spans.items():
        durs = sorted(e["dur"] for e in es)
        inner = defaultdict(lambda: [0, 0.0])
        for c in calls:
            for e in es:
                if (c.get("tid") == e.get("tid") and c["ts"] >= e["ts"]
                        and c["ts"] + c["dur"] <= e["ts"] + e["dur"]):
                    inner[c["name"]][0] += 1
                    inner[c["name"]][1] += c["dur"]
                    break
        found[name] = [len(es), sum(durs), durs[len(durs) // 2], dict(inner)]
    return found


def print_comm_calls(found: dict, out, top: int) -> None:
    for name, (count, total, median, inner) in sorted(found.items()):
        inside = sum(v[1] for v in inner.values())
        print(f"{name}: {count} spans, {total:.1f} us (median {median:.1f}), CUDA calls inside "
              f"{inside:.1f} us:", file=out)
        for call, (n, dur) in sorted(inner.items(), key=lambda kv: -kv[1][1])[:top]:
            print(f"  {dur:9.1f} us  {n:5d} x {short(call)}", file=out)


def analyze(path: str, out, top: int = 8) -> list:
    """Prints one trace's report; returns its summary rows, one per GPU."""
    events = load(path)
    gpu = [e for e in events if e.get("cat") in GPU_CATS]
    cpu = [e for e in events if e.get("cat") in CPU_CALL_CATS]
    issued = {correlation(e): e["ts"] + e["dur"] for e in cpu if correlation(e) is not None}
    print(f"## {path}", file=out)
    rows = []
    by_device = defaultdict(lambda: defaultdict(list))
    for e in gpu:
        dev, stream = gpu_key(e)
        by_device[dev][stream].append(e)
    if not by_device:
        print("no GPU activity in this trace", file=out)
    for dev in sorted(by_device, key=str):
        streams = by_device[dev]
        acts = [a for s in streams.values() for a in s]
        t0 = min(a["ts"] for a in acts)
        window = max(a["ts"] + a["dur"] for a in acts) - t0
        print(f"device {dev}: window {window:.1f} us", file=out)
        print("| stream | kernels | copies | memsets | busy us | share |", file=out)
        print("|---|---:|---:|---:|---:|---:|", file=out)
        busy = {}
        for stream, sacts in sorted(streams.items(), key=lambda kv: str(kv[0])):
            busy[stream] = union([(a["ts"], a["ts"] + a["dur"]) for a in sacts])
            n = {c: sum(1 for a in sacts if a.get("cat") == c) for c in GPU_CATS}
            print(f"| {stream} | {n['kernel']} | {n['gpu_memcpy']} | {n['gpu_memset']} | "
                  f"{busy[stream]:.1f} | {busy[stream] / window:.3f} |", file=out)
        main = max(streams, key=lambda s: (len(streams[s]), busy[s]))
        idle, idle_cpu, longest = gaps(streams[main], issued, top)
        print(f"main stream {main}: idle {idle:.1f} us in the window, {idle_cpu:.1f} of it "
              "waiting for the CPU; longest gaps (cpu part):", file=out)
        for length, cpu_part, before, after in longest:
            print(f"  {length:9.1f} us ({cpu_part:7.1f}) after {short(before)} before "
                  f"{short(after)}", file=out)
        rows.append({"trace": path, "device": dev, "window_us": window, "stream": main,
                     "busy_share": busy[main] / window, "idle_us": idle, "idle_cpu_us": idle_cpu})
    calls = defaultdict(lambda: [0, 0.0])
    for e in cpu:
        calls[e["name"]][0] += 1
        calls[e["name"]][1] += e["dur"]
    total = sum(c[1] for c in calls.values())
    print(f"CPU: {len(cpu)} CUDA runtime/driver calls, {total:.1f} us; the most costly:", file=out)
    for name, (count, dur) in sorted(calls.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"  {dur:9.1f} us  {count:5d} x {short(name)}", file=out)
    for r in rows:
        r["cuda_calls_us"] = total
    print_comm_calls(comm_calls(events), out, top)
    print("", file=out)
    return rows


def main(argv: list) -> int:
    if not argv:
        print(__doc__)
        return 2
    rows = []
    for path in argv:
        rows += analyze(path, sys.stdout)
    if len(argv) > 1 and rows:
        print("| trace | device | window us | main stream | busy share | idle us | of it cpu us "
              "| CUDA calls us |")
        print("|---|---|---:|---|---:|---:|---:|---:|")
        for r in rows:
            print(f"| {r['trace']} | {r['device']} | {r['window_us']:.1f} | {r['stream']} | "
                  f"{r['busy_share']:.3f} | {r['idle_us']:.1f} | {r['idle_cpu_us']:.1f} | "
                  f"{r['cuda_calls_us']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
