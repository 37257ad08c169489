"""Checks scripts/real_clients/pipe_record.py on made-up RESULT logs: the
runs of two sessions go into one file (a label given twice is refused and
leaves the file as it was), and the pooled geometric mean is the one
computed here by hand from fresh random step times, every (label,
schedule) weighing the same, with an interval that holds it, and so is
one schedule's pooled over both sessions."""
import contextlib
import io
import json
import math
import os
import random
import re
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "real_clients"))
import pipe_record  # noqa: E402

SCHEDULES = ["GPipe", "1F1B", "DualPipeV"]


def log_lines(tag, steps):
    """Both ranks of one torchrun: rank 1 is the slower one (summarize takes it)."""
    lines = []
    for s, ms in steps.items():
        for rank, t in ((0, ms * 0.9), (1, ms)):
            rec = {"case": f"pipe.{s}", "rank": rank, "tag": tag,
                   "lib": "nccl" if tag.startswith("nccl") else "ferry", "ok": True, "step_ms": t}
            lines.append("RESULT " + json.dumps(rec))
    # A variant group and a schedule run twice are not the schedule's runs.
    lines.append("RESULT " + json.dumps({"case": "pipe.GPipe+B", "rank": 0, "tag": tag, "lib": "x",
                                         "ok": True, "step_ms": 999.0}))
    return lines


def run(argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = pipe_record.main(argv)
    return rc, out.getvalue()


def main():
    rnd = random.Random()  # fresh values every run
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)

    with tempfile.TemporaryDirectory() as d:
        store = os.path.join(d, "runs.jsonl")
        truth = {}  # label -> mode -> schedule -> [runs]
        for label, nruns in (("s1", 3), ("s2", 4)):
            logs = []
            for mode in ("ferry-lazy", "nccl-lazy"):
                for i in range(nruns):
                    steps = {s: rnd.uniform(5.0, 60.0) for s in SCHEDULES}
                    for s, v in steps.items():
                        truth.setdefault(label, {}).setdefault(mode, {}).setdefault(s, []).append(v)
                    tag = mode if i == 0 else f"{mode}-r{i + 1}"
                    path = os.path.join(d, f"{label}-{tag}.log")
                    with open(path, "w") as f:
                        f.write("\n".join(log_lines(tag, steps)) + "\n")
                    logs.append(path)
            rc, out = run(["add", store, "--label", label, "--commit", "abc"] + logs)
            check(rc == 0, f"add {label}: rc {rc}: {out}")
        with open(store) as f:
            before = f.read()
        rc, out = run(["add", store, "--label", "s1", logs[0]])
        check(rc != 0 and "already" in out, f"a label given twice was not refused: {out}")
        with open(store) as f:
            check(f.read() == before, "a refused add changed the file")
        recs = [json.loads(x) for x in before.splitlines()]
        check(len(recs) == 2 * 2 * len(SCHEDULES), f"{len(recs)} records, want 12")
        for r in recs:
            want = truth[r["label"]][r["mode"]][r["schedule"]]
            check(sorted(r["step_ms"]) == sorted(want), f"{r['label']} {r['mode']} {r['schedule']}: "
                  f"{r['step_ms']} != {want}")

        # By hand: every (label, schedule) ratio of medians, geometric mean.
        logs_ = [math.log(statistics.median(truth[lab]["ferry-lazy"][s])
                          / statistics.median(truth[lab]["nccl-lazy"][s]))
                 for lab in ("s1", "s2") for s in SCHEDULES]
        want = math.exp(sum(logs_) / len(logs_))
        rc, out = run(["pool", store])
        check(rc == 0, f"pool rc {rc}")
        row = [x for x in out.splitlines() if x.startswith("| **all 2**")]
        check(len(row) == 1, f"no pooled row in:\n{out}")
        if row:
            cells = [c.strip() for c in row[0].split("|")]
            got = float(cells[4].strip("*"))
            check(abs(got - want) < 0.0015, f"pooled {got}, want {want:.4f}")
            span = re.fullmatch(r"([0-9.]+)-([0-9.]+)", cells[5])
            check(span is not None, f"no interval in {row[0]}")
            if span:
                lo, hi = float(span[1]), float(span[2])
                check(lo <= want + 0.0015 and want - 0.0015 <= hi,
                      f"interval {lo}-{hi} misses {want:.4f}")
        s1 = [math.log(statistics.median(truth["s1"]["ferry-lazy"][s])
                       / statistics.median(truth["s1"]["nccl-lazy"][s])) for s in SCHEDULES]
        want1 = math.exp(sum(s1) / len(s1))
        row = [x for x in out.splitlines() if x.startswith("| s1 |")]
        check(len(row) == 1 and abs(float(row[0].split("|")[4]) - want1) < 0.0015,
              f"s1's own geometric mean, want {want1:.4f}:\n{out}")
        # Per schedule, both labels pooled: GPipe's row.
        g = [math.log(statistics.median(truth[lab]["ferry-lazy"]["GPipe"])
                      / statistics.median(truth[lab]["nccl-lazy"]["GPipe"])) for lab in ("s1", "s2")]
        wantg = math.exp(sum(g) / len(g))
        row = [x for x in out.splitlines() if x.startswith("| GPipe |")]
        check(len(row) == 1 and row[0].split("|")[2].strip() == "2"
              and abs(float(row[0].split("|")[3]) - wantg) < 0.0015,
              f"GPipe pooled over both labels, want {wantg:.4f}:\n{out}")
        rc, out = run(["pool", store, "--labels", "s2"])
        check("all 1" in out and "| s1 |" not in out, f"--labels s2 kept s1:\n{out}")
        rc, out = run(["pool", store, "--a", "kernel-lazy"])
        check(rc != 0, "a mode nobody ran pooled anyway")

    for f in failures:
        print("FAIL:", f)
    print("pipe_record:", "FAILED" if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
