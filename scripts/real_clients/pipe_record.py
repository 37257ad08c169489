"""Issue 15's pipelining runs, kept across sessions: one device call holds
4-7 torchruns per library, and single runs move 10-20% between torchruns,
so one session's interval for the Ferry/NCCL geometric mean is about
+-5%. The runs of several sessions, pooled, narrow it. The device's logs do
not outlive a session, so each run's per-schedule step times go into a
file in the repository (bench/pipe_runs.jsonl).

  pipe_record.py add FILE --label L [--machine M] [--commit C] LOG...
      appends one JSON line per (mode, schedule) of the logs: every run's
      value (its slower rank's median step, summarize.py's reading), under
      the label (a session, say "s54"). A label already in FILE is refused:
      the same runs must not count twice.
  pipe_record.py pool FILE [--a ferry-lazy] [--b nccl-lazy] [--labels L,...]
      per label, the geometric mean over schedules of median(a) / median(b)
      and its 90% bootstrap interval (summarize.geomean_interval); then
      all labels together: the geometric mean over every (label, schedule)
      ratio, each label's runs redrawn on their own (machines differ between
      sessions, so runs are compared only within a label); then the same per
      schedule (which schedules carry the mean).
"""
import argparse
import datetime
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import summarize  # noqa: E402


def read(path):
    """Every record of FILE (none when it does not exist)."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def records_from_logs(logs, label, machine, commit):
    """One record per (base mode, schedule): every run's step_ms."""
    out = []
    date = datetime.date.today().isoformat()
    for mode, values in summarize.folded_values(summarize.load(logs)).items():
        for key in summarize.pipe_schedules(values, values):
            out.append({"label": label, "date": date, "machine": machine, "commit": commit,
                        "mode": mode, "schedule": key[0][len("pipe."):], "step_ms": values[key]})
    return out


def add(args):
    have = {r["label"] for r in read(args.file)}
    if args.label in have:
        print(f"label {args.label} is already in {args.file}: its runs would count twice")
        return 2
    recs = records_from_logs(args.logs, args.label, args.machine, args.commit)
    if not recs:
        print("no pipelining results in those logs")
        return 1
    with open(args.file, "a") as f:
        for r in recs:
            f.write(json.dumps(r, sort_keys=True) + "\n")
    modes = sorted({r["mode"] for r in recs})
    print(f"{len(recs)} records ({', '.join(modes)}) added to {args.file} as {args.label}")
    return 0


def by_label(recs, mode):
    """label -> (case, "step_ms") -> runs, for one mode (summarize's shape)."""
    out = {}
    for r in recs:
        if r["mode"] == mode:
            out.setdefault(r["label"], {})[("pipe." + r["schedule"], "step_ms")] = r["step_ms"]
    return out


def pooled(a, b, labels):
    """(geometric mean, 5th, 95th percentile, cells) over every (label,
    schedule) of the median ratio: summarize.geomean_interval, each label's
    runs redrawn per schedule and mode."""
    cells = [(a[lab][k], b[lab][k]) for lab in labels for k in summarize.pipe_schedules(a[lab], b[lab])]
    return summarize.geomean_interval(cells) + (len(cells),)


def pool(args):
    recs = read(args.file)
    a, b = by_label(recs, args.a), by_label(recs, args.b)
    labels = [lab for lab in dict.fromkeys(r["label"] for r in recs) if lab in a and lab in b]
    if args.labels:
        labels = [lab for lab in labels if lab in args.labels.split(",")]
    if not labels:
        print(f"no label has both {args.a} and {args.b}")
        return 1
    print(f"| label | runs ({args.a} / {args.b}) | schedules | {args.a} / {args.b}, geometric mean "
          "| 90% interval |")
    print("|---|---|---:|---:|---|")

    def fmt(lo, hi):
        return f"{lo:.3f}-{hi:.3f}" if lo is not None else "-"

    def gfmt(g, bold=False):
        return "-" if g is None else f"**{g:.3f}**" if bold else f"{g:.3f}"

    for lab in labels:
        g, lo, hi, n = pooled(a, b, [lab])
        runs = f"{max(map(len, a[lab].values()))} / {max(map(len, b[lab].values()))}"
        print(f"| {lab} | {runs} | {n} | {gfmt(g)} | {fmt(lo, hi)} |")
    g, lo, hi, n = pooled(a, b, labels)
    print(f"| **all {len(labels)}** | | {n} | {gfmt(g, True)} | {fmt(lo, hi)} |")
    # Per schedule, every label pooled: which schedules carry the mean.
    names = list(dict.fromkeys(k[0] for lab in labels for k in summarize.pipe_schedules(a[lab], b[lab])))
    print(f"\n| schedule | labels | {args.a} / {args.b}, pooled | 90% interval |")
    print("|---|---:|---:|---|")
    for name in names:
        key = (name, "step_ms")
        mine = [lab for lab in labels if key in a[lab] and key in b[lab]]
        g, lo, hi, _ = pooled({lab: {key: a[lab][key]} for lab in mine},
                              {lab: {key: b[lab][key]} for lab in mine}, mine)
        print(f"| {name[len('pipe.'):]} | {len(mine)} | {gfmt(g)} | {fmt(lo, hi)} |")
    return 0


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    pa = sub.add_parser("add")
    pa.add_argument("file")
    pa.add_argument("--label", required=True)
    pa.add_argument("--machine", default="")
    pa.add_argument("--commit", default="")
    pa.add_argument("logs", nargs="+")
    pp = sub.add_parser("pool")
    pp.add_argument("file")
    pp.add_argument("--a", default="ferry-lazy")
    pp.add_argument("--b", default="nccl-lazy")
    pp.add_argument("--labels", default="")
    args = p.parse_args(argv)
    return add(args) if args.cmd == "add" else pool(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
