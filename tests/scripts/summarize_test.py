"""Checks scripts/real_clients/summarize.py on made-up RESULT logs: a
planned case without a result fails, an unplanned one is left out, and
repeated modes (-r2, or the same tag in a second log) fold into medians
whose Ferry/NCCL ratios (and the pipelining schedules' geometric mean)
are the ones computed here by hand, and runs made
side by side (-paN beside -pbN) give the median of their per-run ratios,
and CLIENT_AB_ENV's b_over_a values are listed per run and mode."""
import contextlib
import io
import json
import os
import random
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "real_clients"))
import summarize  # noqa: E402


def line(tag, case, rank, ok=True, **fields):
    rec = {"case": case, "rank": rank, "tag": tag, "lib": "nccl" if tag.startswith("nccl") else "ferry",
           "ok": ok}
    rec.update(fields)
    return "RESULT " + json.dumps(rec)


def write_log(d, name, lines):
    path = os.path.join(d, name)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def run(paths):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = summarize.main_with(paths)
    return rc, out.getvalue()


def row(text, header_start, key):
    """The cells of row `key` in the table whose header starts with header_start."""
    lines = text.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith(header_start))
    for l in lines[start + 2:]:
        if not l.startswith("|"):
            break
        cells = [c.strip() for c in l.strip("|").split("|")]
        if cells[0] == key:
            return cells[1:]
    raise AssertionError(f"no row {key!r} under {header_start!r}:\n{text}")


def main():
    rnd = random.Random(os.getpid())
    failures = []

    def expect(cond, what):
        if not cond:
            failures.append(what)

    # Step times per run (two ranks each; the slower one counts). ferry-lazy@1
    # is the same tag met again in a second log: a run of its own.
    steps = {tag: [rnd.uniform(5, 30) for _ in range(2)]
             for tag in ("nccl-lazy", "ferry-lazy", "nccl-lazy-r2", "ferry-lazy-r2", "ferry-lazy@1")}
    with tempfile.TemporaryDirectory() as d:
        def mode_lines(tag, step_key):
            out = [line(tag, "library", r, planned=["pipe.GPipe"]) for r in (0, 1)]
            out += [line(tag, "pipe.GPipe", r, step_ms=steps[step_key][r]) for r in (0, 1)]
            return out

        first = []
        for tag in ("nccl-lazy", "ferry-lazy", "nccl-lazy-r2", "ferry-lazy-r2"):
            first += mode_lines(tag, tag)
        # A mode that planned a2a and ended before its result: a2a is
        # "missing" there, pipe.GPipe (not planned) "-".
        first += [line("kernel-lazy", "library", r, planned=["a2a"]) for r in (0, 1)]
        p1 = write_log(d, "call1.log", first)
        p2 = write_log(d, "call2.log", mode_lines("ferry-lazy", "ferry-lazy@1"))
        rc, text = run([p1, p2])

    cells = row(text, "| case |", "a2a")
    expect("missing" in cells, f"a planned case without a result is not 'missing': {cells}")
    cells = row(text, "| case |", "pipe.GPipe")
    expect("-" in cells, f"an unplanned case is not '-': {cells}")
    expect(rc == 1 and "1 failing cell(s)" in text, f"exit {rc}, expected exactly one failing cell")

    def med(*tags):
        return sorted(max(steps[t]) for t in tags)[len(tags) // 2] if len(tags) % 2 else \
            sum(sorted(max(steps[t]) for t in tags)[len(tags) // 2 - 1:len(tags) // 2 + 1]) / 2

    want = med("ferry-lazy", "ferry-lazy-r2", "ferry-lazy@1") / med("nccl-lazy", "nccl-lazy-r2")
    got = row(text, "| Ferry/NCCL time", "pipe.GPipe step_ms")[0]
    expect(got == f"{want:.2f}", f"Ferry/NCCL median ratio {got}, computed {want:.2f}")
    runs = row(text, "| median over runs", "pipe.GPipe step_ms")
    expect(runs[0].endswith("(2)") and runs[1].endswith("(3)"),
           f"runs folded per mode: {runs} (expected nccl-lazy 2, ferry-lazy 3)")

    # The pipelining verdict: the geometric mean of the per-schedule
    # Ferry/NCCL median ratios, every base schedule once (pipe.NAME~2 and
    # CLIENT_AB_ENV's pipe.NAME+B left out).
    sched = {name: (rnd.uniform(5, 30), rnd.uniform(5, 30)) for name in ("GPipe", "1F1B", "DualPipeV")}
    with tempfile.TemporaryDirectory() as d:
        lines = []
        for tag, pick in (("nccl-lazy", 1), ("ferry-lazy", 0), ("nccl-lazy-r2", 1), ("ferry-lazy-r2", 0)):
            for name, vals in sched.items():
                lines += [line(tag, f"pipe.{name}", k, step_ms=vals[pick]) for k in (0, 1)]
            # Outliers that must not count: a repeat in one process and a variant.
            lines += [line(tag, f"pipe.GPipe{suffix}", k, step_ms=1000.0 * (pick + 1))
                      for suffix in ("~2", "+B") for k in (0, 1)]
        _, text = run([write_log(d, "geomean.log", lines)])
    prod = 1.0
    for f, n in sched.values():
        prod *= f / n
    want = f"{prod ** (1 / 3):.3f} (3)"
    cells = row(text, "| Ferry/NCCL time", "pipe step_ms, geometric mean over schedules (count)")
    expect(cells == [want], f"pipe geometric mean {cells}, computed {want}")
    # Both runs of each mode gave the same times: nothing to draw from, so
    # the bootstrap interval is the point itself.
    point = f"{prod ** (1 / 3):.3f}"
    cells = row(text, "| Ferry/NCCL time", "pipe step_ms, geometric mean: 90% bootstrap interval over runs")
    expect(cells == [f"{point}-{point}"], f"interval of identical runs {cells}, expected {point}-{point}")

    # Runs that differ: the interval holds the point estimate, has width, and
    # stays inside what any draw could give (every schedule's smallest Ferry
    # time over NCCL's largest, and the other way round). One run of a mode
    # has no spread: "-".
    spread = {name: ([rnd.uniform(5, 30) for _ in range(4)], [rnd.uniform(5, 30) for _ in range(3)])
              for name in ("GPipe", "1F1B", "DualPipeV")}
    with tempfile.TemporaryDirectory() as d:
        lines = []
        for name, (fv, nv) in spread.items():
            for lib, vals in (("ferry", fv), ("nccl", nv)):
                for r, v in enumerate(vals):
                    tag = f"{lib}-lazy" + (f"-r{r + 1}" if r else "")
                    lines += [line(tag, f"pipe.{name}", k, step_ms=v) for k in (0, 1)]
            lines += [line("kernel-lazy", f"pipe.{name}", k, step_ms=fv[0]) for k in (0, 1)]
        _, text = run([write_log(d, "spread.log", lines)])

    def gmean(xs):
        p = 1.0
        for x in xs:
            p *= x
        return p ** (1 / len(xs))

    point = gmean([statistics.median(f) / statistics.median(n) for f, n in spread.values()])
    low = gmean([min(f) / max(n) for f, n in spread.values()])
    high = gmean([max(f) / min(n) for f, n in spread.values()])
    cells = row(text, "| Ferry/NCCL time", "pipe step_ms, geometric mean: 90% bootstrap interval over runs")
    lo, hi = (float(x) for x in cells[0].split("-"))
    expect(low - 1e-3 <= lo <= point + 1e-3 <= hi + 2e-3 <= high + 3e-3 and lo < hi,
           f"interval {cells[0]} around {point:.3f}, bounds {low:.3f}-{high:.3f}")
    expect(cells[1] == "-", f"an interval from one kernel-lazy run: {cells}")
    # Repeated modes without any pipelining case: no geometric-mean row.
    with tempfile.TemporaryDirectory() as d:
        lines = [line(tag, "a2a", k, median_ms=rnd.uniform(0.5, 1.0))
                 for tag in ("nccl-lazy", "ferry-lazy", "nccl-lazy-r2", "ferry-lazy-r2") for k in (0, 1)]
        _, text = run([write_log(d, "nopipe.log", lines)])
    expect("a2a median_ms" in text and "geometric mean" not in text,
           f"a geometric-mean row without pipelining cases:\n{text}")

    # Side-by-side runs: B's time over A's within each run, then the median
    # of those ratios (not the ratio of the medians), with its range.
    paired = {r: (rnd.uniform(5, 30), rnd.uniform(5, 30)) for r in (1, 2, 3)}
    with tempfile.TemporaryDirectory() as d:
        lines = []
        for r, (a, b) in paired.items():
            for tag, v in ((f"nccl-lazy-pa{r}", a), (f"ferry-lazy-pb{r}", b)):
                lines += [line(tag, "library", k, planned=["pipe.GPipe"]) for k in (0, 1)]
                lines += [line(tag, "pipe.GPipe", k, step_ms=v - k) for k in (0, 1)]
        # A B run without its A partner pairs with nothing.
        lines += [line("ferry-lazy-pb9", "pipe.GPipe", k, step_ms=1.0) for k in (0, 1)]
        _, text = run([write_log(d, "paired.log", lines)])
    ratios = sorted(b / a for a, b in paired.values())
    cells = row(text, "| side by side: ferry-lazy / nccl-lazy (3 runs)", "pipe.GPipe step_ms")
    expect(cells[0] == f"{ratios[1]:.3f}", f"paired median ratio {cells[0]}, computed {ratios[1]:.3f}")
    expect(cells[1] == f"{ratios[0]:.2f}-{ratios[2]:.2f}", f"paired range {cells[1]}")

    # CLIENT_AB_ENV: every run's b_over_a per mode (the slower rank's), in
    # log order, with their median; no Ferry/NCCL ratio of those ratios.
    ab = {tag: [rnd.uniform(0.85, 1.1) for _ in range(2)]
          for tag in ("ferry-lazy", "ferry-lazy-r2", "ferry-lazy-r3", "nccl-lazy")}
    with tempfile.TemporaryDirectory() as d:
        lines = []
        for tag, vals in ab.items():
            lines += [line(tag, "pipe.1F1B", k, step_ms=10.0 + k) for k in (0, 1)]
            lines += [line(tag, "pipe.1F1B+B", k, step_ms=9.0 + k, b_over_a=v, ab_env="NCCL_PASS_SM=0")
                      for k, v in enumerate(vals)]
        _, text = run([write_log(d, "ab.log", lines)])
    cells = row(text, "| in-process A/B", "pipe.1F1B+B")
    ferry = [max(ab[t]) for t in ("ferry-lazy", "ferry-lazy-r2", "ferry-lazy-r3")]
    want_ferry = " ".join(f"{v:.3f}" for v in ferry) + f" ({sorted(ferry)[1]:.3f})"
    want_nccl = f"{max(ab['nccl-lazy']):.3f} ({max(ab['nccl-lazy']):.3f})"
    expect(cells == ["NCCL_PASS_SM=0", want_ferry, want_nccl],
           f"A/B row {cells}, expected {want_ferry} | {want_nccl}")
    ratio_rows = [l for l in text.splitlines() if l.startswith("| pipe.1F1B+B b_over_a")]
    expect(len(ratio_rows) == 1, f"b_over_a only in the medians table, not as a Ferry/NCCL ratio: "
           f"{ratio_rows}")

    # nccl-tests, both ways of running them: a busbw table each, Ferry over
    # NCCL per size (sizes under 4 KiB left out), and a run that loaded the
    # other library counted as failing.
    bw = {(suite, lib): {str(1 << k): round(rnd.uniform(1, 300), 2) for k in (10, 13, 23)}
          for suite in ("nccltests", "nccltests-mpi") for lib in ("ferry", "nccl")}
    with tempfile.TemporaryDirectory() as d:
        lines = []
        for (suite, lib), vals in bw.items():
            rec = line(f"{suite}-{lib}", "nccl-tests.all_reduce", 0, wrong=0, busbw=vals)
            if (suite, lib) == ("nccltests-mpi", "ferry"):
                rec = rec.replace('"lib": "ferry"', '"lib": "nccl"')  # the preload missed
            lines.append(rec)
        rc, text = run([write_log(d, "nt.log", lines)])
    for suite, title in (("nccltests", "| nccl-tests -g 2"), ("nccltests-mpi", "| nccl-tests MPI")):
        f, n = bw[(suite, "ferry")], bw[(suite, "nccl")]
        cells = row(text, title, "all_reduce")
        want = [str(1 << 13), str(f[str(1 << 13)]), str(n[str(1 << 13)]),
                f"{f[str(1 << 13)] / n[str(1 << 13)]:.2f}"]
        expect(cells == want, f"{suite} busbw row {cells}, expected {want}")
    expect(rc == 1 and "under nccltests-mpi-ferry ran nccl" in text,
           f"a run of the wrong library not flagged (exit {rc}):\n{text}")

    for f in failures:
        print("FAIL", f)
    if failures:
        print(text)
        return 1
    print("PASS summarize: planned/missing cells, folded medians, geometric mean and its interval, "
          "side-by-side ratios, A/B runs, nccl-tests tables")
    return 0


if __name__ == "__main__":
    sys.exit(main())
