"""Merges the RESULT lines of real-client runs (clients.py, nccl-tests) into
one markdown table per suite. Usage: summarize.py LOG... > table.md

A case passes in a run when every rank reported ok; a rank that never
reported (crash, hang, watchdog) makes it fail. Times are the slowest rank's.
Columns are runs (their --tag), in the order the logs were given.
"""
import json
import sys
from collections import OrderedDict


def load(paths):
    runs = OrderedDict()  # tag -> case -> list of records
    for path in paths:
        decoder = json.JSONDecoder()
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
                    runs.setdefault(rec["tag"], OrderedDict()).setdefault(rec["case"], []).append(rec)
    return runs


def verdict(recs, ranks):
    if any(r.get("skip") for r in recs):
        return "skip"
    if len({r["rank"] for r in recs}) < ranks or any(r["ok"] is False for r in recs):
        return "FAIL"
    return "ok"


METRICS = ["step_ms", "median_ms", "host_ms", "ms_4096B", "ms_1048576B", "ms_16777216B", "ms_268435456B",
           "host_ms_4096B", "host_ms_1048576B", "host_ms_16777216B", "host_ms_268435456B",
           "synced_ms_4096B", "synced_ms_1048576B",
           "busbw_max", "wrong", "setup_s", "held_mib", "mib_per_group"]


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
    runs = load(sys.argv[1:])
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
    print(f"\n{failed} failing cell(s)")
    return 1 if failed else 0


def suite_table(runs, tags):
    """One table, cases x runs; returns the failing cells. A case is judged
    against the rank count its own run reported anywhere."""
    cases = OrderedDict()
    for t in tags:
        for name in runs[t]:
            cases[name] = True
    print("| case | " + " | ".join(tags) + " |")
    print("|---|" + "---|" * len(tags))
    failed = 0
    for name in cases:
        row = []
        for t in tags:
            recs = runs[t].get(name)
            if recs is None:
                row.append("missing")
                failed += 1
                continue
            ranks = len({r["rank"] for rs in runs[t].values() for r in rs})
            c = cell(recs, ranks)
            failed += c.startswith("FAIL")
            row.append(c)
        print(f"| {name} | " + " | ".join(row) + " |")
    print()
    return failed


def busbw_table(runs):
    """nccl-tests: out-of-place busbw (GB/s) per op and size, Ferry beside
    NCCL. Returns how many runs loaded the wrong library."""
    ferry, nccl = runs.get("nccltests-ferry"), runs.get("nccltests-nccl")
    if not ferry or not nccl:
        return 0
    wrong_lib = 0
    for tag, want in (("nccltests-ferry", "ferry"), ("nccltests-nccl", "nccl")):
        for name, recs in runs[tag].items():
            if any(r["lib"] != want for r in recs):
                print(f"\n{name} under {tag} ran {recs[0]['lib']}, not {want}")
                wrong_lib += 1
    print("\n| nccl-tests -g 2 | size | Ferry busbw | NCCL busbw | Ferry/NCCL |")
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
