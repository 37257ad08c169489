"""Turns one nccl-tests run's output into a RESULT line for summarize.py.
Usage: parse_nccl_tests.py TAG OP LOG [RC]

ok: every row's #wrong is 0 (out of place and in place), the footer says
"Out of bounds values : 0 OK", and the run exited 0 (RC). busbw: the
out-of-place bus bandwidth per size in bytes (GB/s).
"""
import json
import re
import sys


def main():
    tag, op, path = sys.argv[1:4]
    rc = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    rows, wrong, oob_ok, ferry = {}, 0, False, False
    with open(path, errors="replace") as f:
        for line in f:
            if "SM-free p2p ready" in line:
                ferry = True  # only Ferry prints this INFO line
            m = re.match(r"#\s*Out of bounds values\s*:\s*(\d+)\s+OK", line)
            if m and m.group(1) == "0":
                oob_ok = True
            # Data rows: size count type [redop] root, then out-of-place and
            # in-place "time algbw busbw #wrong" (hypercube has no redop).
            t = line.split()
            if len(t) >= 12 and t[0].isdigit() and t[1].isdigit():
                size = int(t[0])
                for w in (t[-5], t[-1]):
                    if w != "N/A":
                        wrong += int(float(w))
                try:
                    rows[size] = float(t[-6])
                except ValueError:
                    pass
    ok = rc == 0 and oob_ok and wrong == 0 and bool(rows)
    rec = {"case": f"nccl-tests.{op}", "rank": 0, "tag": tag, "lib": "ferry" if ferry else "nccl",
           "ok": ok, "wrong": wrong, "busbw": rows, "busbw_max": max(rows.values()) if rows else 0}
    if not ok:
        rec["error"] = f"rc {rc}, out-of-bounds line {'ok' if oob_ok else 'missing/failed'}, " \
                       f"{len(rows)} rows"
    print("RESULT " + json.dumps(rec))


if __name__ == "__main__":
    main()
