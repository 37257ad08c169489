"""Checks scripts/real_clients/trace_gaps.py against a timeline computed
independently: a random trace (fresh every run) of two devices with several
streams of overlapping integer-microsecond activities, each issued by a CPU
call (correlation ids) that returns at a random time around its start,
whose busy time, idle time, longest gap and the part of the idle time spent
waiting for the CPU are counted microsecond by microsecond. Exits non-zero
after listing every mismatch."""
import io
import json
import os
import random
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "scripts", "real_clients"))
import trace_gaps  # noqa: E402

rng = random.Random()
seed = rng.getrandbits(32)
rng.seed(seed)
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL", what, f"(seed {seed})")


events, truth, issued, cpu_total = [], {}, {}, 0
for dev in (0, 1):
    for stream in rng.sample(range(3, 40), 3):
        occupied, starts = set(), {}
        for ts in rng.sample(range(0, 5000), rng.randint(3, 30)):  # distinct starts
            dur = rng.randint(1, 300)
            cat = rng.choice(["kernel", "gpu_memcpy", "gpu_memset"])
            corr = len(events) + 1
            events.append({"ph": "X", "cat": cat, "name": f"{cat}-{len(events)}", "ts": ts,
                           "dur": dur, "pid": 100 + dev, "tid": 999,
                           "args": {"device": dev, "stream": stream, "correlation": corr}})
            occupied.update(range(ts, ts + dur))
            starts[ts] = corr
            if rng.random() < 0.9:  # some activities have no issuing call in the trace
                call_end, call_dur = ts + rng.randint(-400, 60), rng.randint(1, 30)
                issued[corr] = call_end
                cpu_total += call_dur
                events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                               "ts": call_end - call_dur, "dur": call_dur, "pid": 7, "tid": 7,
                               "args": {"correlation": corr}})
        truth[(dev, stream)] = (occupied, starts)
for _ in range(rng.randint(5, 50)):
    dur = rng.randint(1, 90)
    cpu_total += dur
    events.append({"ph": "X", "cat": rng.choice(["cuda_runtime", "cuda_driver"]),
                   "name": rng.choice(["cudaLaunchKernel", "cudaMemcpyAsync", "cuStreamWriteValue64"]),
                   "ts": rng.randint(0, 5000), "dur": dur, "pid": 7, "tid": 7})
# Noise the tool must ignore: CPU ops, instant events, a metadata record.
events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 9999, "pid": 7, "tid": 7})
events.append({"ph": "i", "cat": "kernel", "name": "instant", "ts": 5, "pid": 100, "tid": 3})
events.append({"ph": "M", "name": "process_name", "pid": 7})

# Communication calls on their own thread (tid 8): disjoint nccl:* spans,
# CUDA calls inside some of them (counted) and between them or on another
# thread at the same time (not counted).
comm_truth = {}
t = 10000
for name in ("nccl:coalesced", "nccl:all_reduce"):
    durs, inner = [], {}
    for _ in range(rng.randint(1, 12)):
        dur = rng.randint(20, 400)
        events.append({"ph": "X", "cat": "user_annotation", "name": name, "ts": t, "dur": dur,
                       "pid": 7, "tid": 8})
        durs.append(dur)
        at = t
        for _ in range(rng.randint(0, 4)):
            cdur = rng.randint(1, 9)
            if at + cdur > t + dur:
                break
            cname = rng.choice(["cudaMemcpyAsync", "cudaLaunchKernel"])
            events.append({"ph": "X", "cat": "cuda_runtime", "name": cname, "ts": at,
                           "dur": cdur, "pid": 7, "tid": 8})
            events.append({"ph": "X", "cat": "cuda_runtime", "name": cname, "ts": at,
                           "dur": cdur, "pid": 7, "tid": 9})  # another thread
            cpu_total += 2 * cdur
            inner.setdefault(cname, [0, 0])
            inner[cname][0] += 1
            inner[cname][1] += cdur
            at += cdur + rng.randint(0, 5)
        t += dur + rng.randint(1, 50)
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaEventQuery", "ts": t - 1,
                       "dur": 1, "pid": 7, "tid": 8})  # between spans
        cpu_total += 1
    comm_truth[name] = (len(durs), sum(durs), sorted(durs)[len(durs) // 2], inner)

path = os.path.join(tempfile.mkdtemp(prefix="trace-gaps-"), "trace.json")
with open(path, "w") as f:
    json.dump({"traceEvents": events}, f)

out = io.StringIO()
rows = trace_gaps.analyze(path, out)
report = out.getvalue()
check(len(rows) == 2, f"one row per device: {rows}")
for row in rows:
    dev = row["device"]
    streams = {s: occ for (d, s), (occ, _) in truth.items() if d == dev}
    starts = {s: st for (d, s), (_, st) in truth.items() if d == dev}
    busiest = max(streams, key=lambda s: (len(starts[s]), len(streams[s])))
    allocc = set().union(*streams.values())
    check(row["window_us"] == max(allocc) + 1 - min(allocc), f"device {dev} window: {row}")
    check(row["stream"] == busiest, f"device {dev} main stream {busiest}: {row}")
    occ = streams[busiest]
    check(abs(row["busy_share"] * row["window_us"] - len(occ)) < 1e-6,
          f"device {dev} busy {len(occ)} us: {row}")
    span = max(occ) + 1 - min(occ)
    check(row["idle_us"] == span - len(occ), f"device {dev} idle {span - len(occ)}: {row}")
    longest, run, cpu_wait = 0, 0, 0
    for t in range(min(occ), max(occ) + 1):
        run = run + 1 if t not in occ else 0
        longest = max(longest, run)
        if run and t + 1 in occ:  # a gap of `run` us ends at t + 1
            end = issued.get(starts[busiest].get(t + 1), t + 1 - run)
            cpu_wait += min(max(end - (t + 1 - run), 0), run)
    check(row["idle_cpu_us"] == cpu_wait, f"device {dev} idle waiting for the CPU {cpu_wait}: {row}")
    section = report.split(f"device {dev}:")[1].split("device ")[0].split("CPU:")[0]
    listed = [float(ln.split()[0]) for ln in section.splitlines() if ") after " in ln]
    check((longest == 0 and not listed) or (listed and listed[0] == longest),
          f"device {dev}: longest gap {longest} us first in {listed}")
    table = {ln.split("|")[1].strip(): float(ln.split("|")[5]) for ln in section.splitlines()
             if ln.startswith("| ") and ln.split("|")[1].strip().isdigit()}
    check(table == {str(s): float(len(o)) for s, o in streams.items()},
          f"device {dev} busy per stream {table}")
    check(row["cuda_calls_us"] == cpu_total, f"CPU calls {cpu_total} us: {row}")

found = trace_gaps.comm_calls(trace_gaps.load(path))
check(set(found) == set(comm_truth), f"annotation names {sorted(found)}")
for name, (count, total, median, inner) in comm_truth.items():
    got = found.get(name, [None] * 4)
    check(got[:3] == [count, total, median], f"{name}: {got[:3]} vs {[count, total, median]}")
    check({k: list(v) for k, v in got[3].items()} == inner, f"{name} inner {got[3]} vs {inner}")
    check(f"{name}: {count} spans, {float(total):.1f} us (median {float(median):.1f})" in report,
          f"{name} line in the report")

saved, sys.stdout = sys.stdout, io.StringIO()
status = trace_gaps.main([])
usage, sys.stdout = sys.stdout.getvalue(), saved
check(status == 2 and "trace_gaps.py TRACE.json" in usage, "no argument: usage and status 2")
if failures:
    sys.exit(f"{len(failures)} check(s) failed")
print("trace_gaps: all checks passed")
