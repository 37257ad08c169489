"""Merges the RESULT lines of real-client runs (clients.py, nccl-tests) into
one markdown table per suite. Usage: summarize.py LOG... > table.md

A case passes in a run when every rank reported ok; a rank that never
reported (crash, hang, watchdog) makes it fail, and so does a case the run
planned (its `library` record lists them) without a result; a case the run
did not plan shows "-". Times are the slowest rank's. Columns are runs
(their --tag), in the order the logs were given.

Repeated modes (tags ending in -r2, -r3, ...: the same mode run again)
are then folded: the median of each time over a mode's runs, and
Ferry/NCCL ratios of those medians per loading mode (ferry-lazy against
nccl-lazy, kernel-eager against nccl-eager, ...), with the pipelining
schedules' geometric mean and a 90% bootstrap interval for it over the
runs (how far other runs of the same processes could move it: issue 15's
"<= 1.0x" judged against the noise). Single runs of these
cases vary by 30-50% with the machine: read the medians, or better the
paired runs' table (modeA-paN beside modeB-pbN, made at the same time on
other GPUs): the median of per-run ratios. CLIENT_AB_ENV's variants (cases
with b_over_a: a variant group's step over the default group's, inside one
process) get a table of their own, every run's value per mode; under
NVIDIA's NCCL the variants' settings (Ferry's) change nothing, so its
column is the method's own noise.
"""
import json
import math
import random
import re
import statistics
import sys
from collections import OrderedDict


def load(paths):
    """tag -> case -> records. A tag already seen in an earlier log (the same
    mode in another call) becomes tag@N, N the log's index: its own run."""
    runs = OrderedDict()  # tag -> case -> list of records
    for n, path in enumerate(paths):
        decoder = json.JSONDecoder()
        earlier = set(runs)
        with open(path, errors="replace") as f:
            for line in f:
                # Two ranks' lines may share a line of the log: take each.
                start = 0
                while (i := line.find("RESULT {", start)) >= 0:
                    try:
                        rec, end = decoder.raw_decode(line, i + len("RESULT "))
                    except json.JSONDecodeError:
                        break
                    start = end
                    if rec["tag"] in earlier:
                        rec["tag"] = f"{rec['tag']}@{n}"
                    runs.setdefault(rec["tag"], OrderedDict()).setdefault(rec["case"], []).append(rec)
    return runs


def verdict(recs, ranks):
    if any(r.get("skip") for r in recs):
        return "skip"
    if len({r["rank"] for r in recs}) < ranks or any(r["ok"] is False for r in recs):
        return "FAIL"
    return "ok"


METRICS = ["step_ms", "first_step_ms", "median_ms", "host_ms", "comm_ms", "b_over_a", "ms_4096B", "ms_1048576B", "ms_16777216B", "ms_268435456B",
           "host_ms_4096B", "host_ms_1048576B", "host_ms_16777216B", "host_ms_268435456B",
           "synced_ms_4096B", "synced_ms_1048576B",
           "busbw_max", "wrong", "setup_s", "held_mib", "mib_per_group",
           "sendrecv_slowdown", "alltoall_slowdown", "nothing_slowdown", "sendrecv_gbps_beside",
           "alltoall_gbps_beside"]


def cell(recs, ranks):
    v = verdict(recs, ranks)
    parts = [v]
    for m in METRICS:
        vals = [r[m] for r in recs if m in r]
        if vals:
            parts.append(f"{m}={max(vals)}")
    errs = [r["error"] for r in recs if r.get("error")]
    if errs:
        parts.append("(" + errs[0][:80] + ")")
    return " ".join(parts)


def main():
    return main_with(sys.argv[1:])


def main_with(paths):
    runs = load(paths)
    if not runs:
        print("no RESULT lines found")
        return 1
    failed = 0
    # Two suites, each its own table: torch clients (one RESULT per rank)
    # and nccl-tests (one process drives both GPUs: one RESULT per run).
    for suite in (False, True):
        tags = [t for t in runs if t.startswith("nccltests-") == suite]
        if tags:
            failed += suite_table(runs, tags)
    # FSDP2: the same losses under every library in the same loading mode,
    # rank 0's against rank 0's (the ranks' RESULT lines come in any order).
    tags = list(runs)
    fsdp = {}
    for t in tags:
        recs = sorted((r for r in runs[t].get("fsdp2", []) if r.get("losses")),
                      key=lambda r: r["rank"])
        if recs:
            fsdp[t] = recs[0]["losses"]
    if len(fsdp) > 1:
        base_tag = next(iter(fsdp))
        for t, l in fsdp.items():
            d = max(abs(a - b) for a, b in zip(l, fsdp[base_tag]))
            print(f"\nfsdp2 losses {t} vs {base_tag}: max |diff| {d:.3g}"
                  f"{' (bit for bit)' if l == fsdp[base_tag] else ''}")
    failed += busbw_table(runs)
    median_tables(runs)
    ab_table(runs)
    paired_tables(runs)
    print(f"\n{failed} failing cell(s)")
    return 1 if failed else 0


def suite_table(runs, tags):
    """One table, cases x runs; returns the failing cells. A case is judged
    against the rank count its own run reported anywhere."""
    cases = OrderedDict()
    for t in tags:
        for name in runs[t]:
            cases[name] = True
        # A planned case no run reported (each crashed first) still gets a row.
        for r in runs[t].get("library", []):
            for name in r.get("planned", []):
                cases[name] = True
    print("| case | " + " | ".join(tags) + " |")
    print("|---|" + "---|" * len(tags))
    failed = 0
    for name in cases:
        row = []
        for t in tags:
            recs = runs[t].get(name)
            if recs is None:
                if planned_by(runs[t], name):
                    row.append("missing")
                    failed += 1
                else:
                    row.append("-")
                continue
            ranks = len({r["rank"] for rs in runs[t].values() for r in rs})
            c = cell(recs, ranks)
            failed += c.startswith("FAIL")
            row.append(c)
        print(f"| {name} | " + " | ".join(row) + " |")
    print()
    return failed


def planned_by(run, name):
    """Whether a run owed a result for case `name`: listed in its library
    record's `planned` (older logs have no list: every case was owed)."""
    plans = [r["planned"] for r in run.get("library", []) if "planned" in r]
    return not plans or any(name in p for p in plans)


# The times compared across libraries: (case prefix, metric).
FOLDED = [("pipe.", "step_ms"), ("pipe.", "first_step_ms"), ("pipe.", "comm_ms"), ("pipe.", "b_over_a"), ("a2a", "median_ms"), ("a2a", "host_ms"), ("batch", "ms_16777216B"),
          ("batch", "ms_268435456B"), ("batch", "host_ms_16777216B"), ("blocking", "median_ms"),
          ("fsdp2", "step_ms"), ("ddp", "step_ms"), ("overlap", "sendrecv_slowdown"),
          ("overlap", "alltoall_slowdown"), ("overlap", "nothing_slowdown")]


def base_mode(tag):
    return re.sub(r"(-r[0-9]+)?(@[0-9]+)?$", "", tag)


def run_values(cases):
    """(case, metric) -> the slowest rank's value, for the FOLDED times."""
    out = OrderedDict()
    for case, recs in cases.items():
        for prefix, metric in FOLDED:
            vals = [r[metric] for r in recs if metric in r and r.get("ok") is not False]
            if case.startswith(prefix) and vals:
                out[(case, metric)] = max(vals)
    return out


def folded_values(runs):
    """mode -> (case, metric) -> every run's value (its slowest rank's)."""
    out = OrderedDict()
    for tag, cases in runs.items():
        if tag.startswith("nccltests-"):
            continue
        for key, value in run_values(cases).items():
            out.setdefault(base_mode(tag), OrderedDict()).setdefault(key, []).append(value)
    return out


def folded_medians(runs):
    """mode -> (case, metric) -> (median over the mode's runs, run count)."""
    return OrderedDict((m, OrderedDict((k, (statistics.median(v), len(v))) for k, v in d.items()))
                       for m, d in folded_values(runs).items())


def median_tables(runs):
    """The medians of repeated modes, then Ferry/NCCL (time ratios: < 1 is
    Ferry faster) for every Ferry mode with an NCCL mode of the same
    loading and suffixes. Prints nothing unless some mode ran twice."""
    if not any(re.search(r"(-r[0-9]+|@[0-9]+)$", t) for t in runs):
        return
    med = folded_medians(runs)
    modes = list(med)
    keys = OrderedDict((k, True) for m in modes for k in med[m])
    print("\n| median over runs (runs) | " + " | ".join(modes) + " |")
    print("|---|" + "---|" * len(modes))
    for k in keys:
        cells = [f"{med[m][k][0]:.4g} ({med[m][k][1]})" if k in med[m] else "-" for m in modes]
        print(f"| {k[0]} {k[1]} | " + " | ".join(cells) + " |")
    pairs = [(m, "nccl-" + m.split("-", 1)[1]) for m in modes
             if not m.startswith("nccl-") and "-" in m and "nccl-" + m.split("-", 1)[1] in med]
    if not pairs:
        return
    print("\n| Ferry/NCCL time, medians | " + " | ".join(f"{a} / {b}" for a, b in pairs) + " |")
    print("|---|" + "---|" * len(pairs))
    for k in keys:
        if k[1] == "b_over_a":  # already a ratio within each process (ab_table)
            continue
        cells = []
        for a, b in pairs:
            ok = k in med[a] and k in med[b] and med[b][k][0] > 0
            cells.append(f"{med[a][k][0] / med[b][k][0]:.2f}" if ok else "-")
        print(f"| {k[0]} {k[1]} | " + " | ".join(cells) + " |")
    means = [pipe_geomean(med[a], med[b]) for a, b in pairs]
    if any(n for _, n in means):
        cells = [f"{g:.3f} ({n})" if n else "-" for g, n in means]
        print("| pipe step_ms, geometric mean over schedules (count) | " + " | ".join(cells) + " |")
        vals = folded_values(runs)
        spans = [pipe_geomean_interval(vals[a], vals[b]) for a, b in pairs]
        cells = [f"{lo:.3f}-{hi:.3f}" if lo is not None else "-" for lo, hi in spans]
        print("| pipe step_ms, geometric mean: 90% bootstrap interval over runs | "
              + " | ".join(cells) + " |")


def pipe_geomean(a, b):
    """Issue 15's one number: the geometric mean over the schedules both
    modes ran of (a's median step / b's), every schedule weighing the same
    (a schedule run again in one process, pipe.NAME~2, and CLIENT_AB_ENV's
    pipe.NAME+B variants left out); (None, 0) when none."""
    logs = [math.log(a[k][0] / b[k][0]) for k in pipe_schedules(a, b)
            if b[k][0] > 0 and a[k][0] > 0]
    return (math.exp(sum(logs) / len(logs)), len(logs)) if logs else (None, 0)


def pipe_schedules(a, b):
    """The base schedules' step_ms keys both modes ran (pipe.NAME~2 and
    CLIENT_AB_ENV's pipe.NAME+B left out)."""
    return [k for k in a if k[1] == "step_ms" and re.fullmatch(r"pipe\.[A-Za-z0-9]+", k[0])
            and k in b]


def pipe_geomean_interval(a, b, rounds=2000, seed=20261129):
    """How far the geometric mean of pipe_geomean could move with other runs
    of the same processes: a and b map (case, metric) to every run's value;
    returns geomean_interval's percentiles over the schedules both ran.
    (None, None) unless every schedule ran at least twice under both modes
    (one run has no spread to draw from)."""
    _, lo, hi = geomean_interval([(a[k], b[k]) for k in pipe_schedules(a, b)], rounds, seed)
    return lo, hi


def geomean_interval(cells, rounds=2000, seed=20261129):
    """cells: (a's runs, b's runs) per compared case. Returns the geometric
    mean over the cells of median(a) / median(b), and the 5th and 95th
    percentiles of that mean over `rounds` redraws, each drawing, per cell,
    as many runs as each side has (with replacement, each side on its own).
    A fixed seed: the same runs give the same interval. (None, None, None)
    without cells or with a value <= 0; the percentiles are None unless
    every cell has at least two runs a side."""
    if not cells or any(min(x + y) <= 0 for x, y in cells):
        return None, None, None

    def gmean(pairs):
        return math.exp(sum(math.log(statistics.median(x) / statistics.median(y))
                            for x, y in pairs) / len(pairs))

    point = gmean(cells)
    if any(len(x) < 2 or len(y) < 2 for x, y in cells):
        return point, None, None
    rnd = random.Random(seed)
    means = sorted(gmean([(rnd.choices(x, k=len(x)), rnd.choices(y, k=len(y))) for x, y in cells])
                   for _ in range(rounds))
    return point, means[int(0.05 * (rounds - 1))], means[int(0.95 * (rounds - 1))]


def ab_table(runs):
    """CLIENT_AB_ENV: per variant case (pipe.NAME+B, ...), its settings and,
    per mode, every run's b_over_a in log order with their median. Prints
    nothing without such cases."""
    per, words = OrderedDict(), {}  # case -> mode -> [b_over_a per run]
    for tag, cases in runs.items():
        for case, recs in cases.items():
            vals = [r["b_over_a"] for r in recs if "b_over_a" in r and r.get("ok") is not False]
            if not vals:
                continue
            per.setdefault(case, OrderedDict()).setdefault(base_mode(tag), []).append(max(vals))
            words.setdefault(case, next((r["ab_env"] for r in recs if r.get("ab_env")), ""))
    if not per:
        return
    modes = list(OrderedDict((m, True) for d in per.values() for m in d))
    print("\n| in-process A/B: b_over_a per run (median) | settings | " + " | ".join(modes) + " |")
    print("|---|---|" + "---|" * len(modes))
    for case, d in per.items():
        cells = [" ".join(f"{v:.3f}" for v in d[m]) + f" ({statistics.median(d[m]):.3f})"
                 if m in d else "-" for m in modes]
        print(f"| {case} | {words[case]} | " + " | ".join(cells) + " |")


def paired_tables(runs):
    """Runs made side by side (real_clients.sh's paired stage: modeA-paN and
    modeB-pbN at the same time on other GPUs): per pair of modes, the
    median over N of B's time / A's time within each run, its range, and
    each mode's median time. Prints nothing without such runs."""
    pairs = OrderedDict()  # (modeA, modeB) -> [(A values, B values)]
    for tag in runs:
        m = re.match(r"(.+)-pa([0-9]+)$", tag)
        # Run numbers count on across the pairs of a call: one B per A.
        partner = [t for t in runs if m and re.fullmatch(rf"(.+)-pb{m.group(2)}", t)]
        if len(partner) == 1:
            key = (m.group(1), re.sub(r"-pb[0-9]+$", "", partner[0]))
            pairs.setdefault(key, []).append((run_values(runs[tag]), run_values(runs[partner[0]])))
    for (a, b), rows in pairs.items():
        keys = OrderedDict((k, True) for va, vb in rows for k in va if k in vb)
        print(f"\n| side by side: {b} / {a} ({len(rows)} runs) | median ratio | range |"
              f" {a} median | {b} median |")
        print("|---|---:|---|---:|---:|")
        for k in keys:
            ratios = sorted(vb[k] / va[k] for va, vb in rows if k in va and k in vb and va[k] > 0)
            if not ratios:
                continue
            ma = statistics.median(va[k] for va, vb in rows if k in va)
            mb = statistics.median(vb[k] for va, vb in rows if k in vb)
            print(f"| {k[0]} {k[1]} | {statistics.median(ratios):.3f} |"
                  f" {ratios[0]:.2f}-{ratios[-1]:.2f} | {ma:.4g} | {mb:.4g} |")


# nccl-tests' two ways of driving GPUs (real_clients.sh): one process with
# -g 2 (stage nccltests) and one process per GPU under mpiexec (ntmpi).
NT_SUITES = (("nccltests", "nccl-tests -g 2"), ("nccltests-mpi", "nccl-tests MPI, 1 GPU per rank"))


def busbw_table(runs):
    """nccl-tests: out-of-place busbw (GB/s) per op and size, Ferry beside
    NCCL, one table per way of running them. Returns how many runs loaded
    the wrong library."""
    wrong_lib = 0
    for prefix, title in NT_SUITES:
        ferry, nccl = runs.get(f"{prefix}-ferry"), runs.get(f"{prefix}-nccl")
        if not ferry or not nccl:
            continue
        for tag, want in ((f"{prefix}-ferry", "ferry"), (f"{prefix}-nccl", "nccl")):
            for name, recs in runs[tag].items():
                if any(r["lib"] != want for r in recs):
                    print(f"\n{name} under {tag} ran {recs[0]['lib']}, not {want}")
                    wrong_lib += 1
        print(f"\n| {title} | size | Ferry busbw | NCCL busbw | Ferry/NCCL |")
        print("|---|---:|---:|---:|---:|")
        for name in ferry:
            if name not in nccl:
                continue
            f, n = ferry[name][0]["busbw"], nccl[name][0]["busbw"]
            for size in sorted(set(f) & set(n), key=int):
                if int(size) < 4096:
                    continue
                ratio = f"{f[size] / n[size]:.2f}" if n[size] > 0 else "-"
                print(f"| {name[len('nccl-tests.'):]} | {int(size)} | {f[size]} | {n[size]} | {ratio} |")
    return wrong_lib


if __name__ == "__main__":
    sys.exit(main())
