#!/usr/bin/env python3
"""Where each kernel's warps wait: a summary of Nsight Compute's per-instruction stall samples.

Input: the source page of an ncu report as CSV, SASS view, as
    ncu -i REPORT.ncu-rep --page source --print-source sass --csv > SOURCE.csv
(the report taken with `--set full`, or any set with the SourceCounters section). For every kernel
in launch order it prints the samples, the stall reasons that hold most of them, the instruction
mix, and the hottest stretches of the kernel's code: runs of WINDOW instructions with the most
samples, each with how often it ran (a stretch run by few warps, such as a last block's sums, shows
a low count) and its multiply-add share. This is how the GPU check's `stalls` stage found that the
convolutions waited in their staging loops, not in their multiply-adds (docs/gpu_speed.md).

Usage: scripts/ncu_stalls.py SOURCE.csv [--top N] [--window W]
Exit status: 0, or 2 when the file holds no kernel (a message says why).
"""

import argparse
import collections
import csv
import re
import sys


def read_kernels(path):
    """[(name, header, rows)] in file order; a kernel printed twice in a row is kept once."""
    kernels = []
    name = header = None
    rows = []

    def flush():
        if name is not None and header is not None:
            if not (kernels and kernels[-1][0] == name and len(kernels[-1][2]) == len(rows)):
                kernels.append((name, header, rows))

    with open(path, newline="") as f:
        for row in csv.reader(f):
            if not row:
                continue
            if row[0] == "Kernel Name":
                flush()
                name, header, rows = (row[1] if len(row) > 1 else "?"), None, []
            elif row[0] == "Address":
                header = row
            elif header is not None:
                rows.append(row)
    flush()
    return kernels


def short_name(name):
    """The kernel with its template arguments, without namespaces and parameter list."""
    name = re.sub(r"(mnist::cuda::|mnist::|<unnamed>::|\(anonymous namespace\)::|\(int\))", "",
                  name)
    name = re.sub(r"^void ", "", name)
    depth = 0
    for i, ch in enumerate(name):
        depth += {"<": 1, ">": -1}.get(ch, 0)
        if ch == "(" and depth == 0:
            return name[:i]
    return name


def as_int(text):
    try:
        return int(float(text or 0))
    except ValueError:
        return 0


def opcode(source):
    words = source.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0] if words else ""


def summarize(name, header, rows, top, window, out):
    col = {n: i for i, n in enumerate(header)}
    need = ["Source", "# Samples", "Instructions Executed"]
    missing = [n for n in need if n not in col]
    if missing:
        print(f"{short_name(name)}: no {', '.join(missing)} column (was SourceCounters collected?)",
              file=out)
        return
    stall_cols = [n for n in header if n.startswith("stall_") and "Not Issued" not in n]
    samples = [as_int(r[col["# Samples"]]) for r in rows]
    executed = [as_int(r[col["Instructions Executed"]]) for r in rows]
    ops = [opcode(r[col["Source"]]) for r in rows]
    total = sum(samples)
    reasons = collections.Counter()
    for r in rows:
        for c in stall_cols:
            reasons[c[len("stall_"):]] += as_int(r[col[c]])
    mix = collections.Counter()
    for op, n in zip(ops, executed):
        mix[op] += n
    issued = sum(mix.values()) or 1
    print(f"== {short_name(name)}: {total} samples, {len(rows)} instructions, "
          f"{sum(executed):,} warp instructions run", file=out)
    if total == 0:
        return
    print("   waiting on: " + ", ".join(f"{k} {100 * v / total:.0f}%"
                                         for k, v in reasons.most_common(top) if v > 0), file=out)
    print("   runs:       " + ", ".join(f"{k} {100 * v / issued:.0f}%"
                                         for k, v in mix.most_common(top + 2)), file=out)
    # The hottest stretches: non-overlapping windows, best first.
    starts = list(range(0, len(rows), window))
    stretches = sorted(starts, key=lambda a: -sum(samples[a:a + window]))[:top]
    for a in sorted(stretches):
        b = min(len(rows), a + window)
        share = sum(samples[a:b])
        if share == 0:
            continue
        ffma = sum(1 for op in ops[a:b] if op == "FFMA")
        hot = max(range(a, b), key=lambda i: samples[i])
        print(f"   [{a:5d}, {b:5d}) {100 * share / total:5.1f}% of samples, ran up to "
              f"{max(executed[a:b]):,}x, {ffma} FFMA of {b - a}; hottest: "
              f"{rows[hot][col['Source']].strip()[:60]}", file=out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("source_csv")
    parser.add_argument("--top", type=int, default=4, help="stall reasons and stretches shown")
    parser.add_argument("--window", type=int, default=64, help="instructions per stretch")
    args = parser.parse_args()
    if args.top < 1 or args.window < 1:
        print("ncu_stalls: --top and --window must be at least 1", file=sys.stderr)
        return 2
    try:
        kernels = read_kernels(args.source_csv)
    except OSError as e:
        print(f"ncu_stalls: {args.source_csv}: {e.strerror}", file=sys.stderr)
        return 2
    if not kernels:
        print(f"ncu_stalls: {args.source_csv}: no kernel (no 'Kernel Name' row followed by an "
              "'Address' header): not ncu's --page source --csv output", file=sys.stderr)
        return 2
    for name, header, rows in kernels:
        summarize(name, header, rows, args.top, args.window, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
