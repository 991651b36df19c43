#!/usr/bin/env python3
"""Draws an mnist-train sweep: the accuracy of every setting, one dot per seed and a bar at the mean,
best first, with the test accuracy beside the validation accuracy when the points have one.

    scripts/plot_sweep.py SWEEP_DIR [-o FILE.png] [--title TEXT]

Reads SWEEP_DIR/points.csv, which `mnist-train sweep` (or `sweep --collect`) writes: one line per
point. Settings whose points all failed are left out and named on stderr. Needs matplotlib
(Debian's python3-matplotlib, installed by scripts/setup.sh); draws without a display.
"""
import argparse
import csv
import os
import sys

# The columns of points.csv before the settings and after them (lib/sweep/results.cpp points_csv).
LEADING = ["point", "row"]
TRAILING_FROM = "seed"


def read_sweep(sweep_dir):
    path = os.path.join(sweep_dir, "points.csv")
    if not os.path.isfile(path):
        sys.exit(f"plot_sweep.py: {sweep_dir}: no points.csv (is it the folder of an mnist-train sweep?)")
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        header = reader.fieldnames or []
        if header[:2] != LEADING or TRAILING_FROM not in header:
            sys.exit(f"plot_sweep.py: {path}: not the points.csv of an mnist-train sweep")
        keys = header[2:header.index(TRAILING_FROM)]
        rows = {}
        for line in reader:
            row = rows.setdefault(int(line["row"]), {"settings": [line[k] for k in keys], "points": []})
            row["points"].append(line)
    return keys, rows


def figure(values):
    return float(values) if values not in ("", None) else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep", metavar="SWEEP_DIR")
    parser.add_argument("-o", "--output", default="sweep.png", help="PNG file to write (default sweep.png)")
    parser.add_argument("--title", default="", help="figure title (default: the sweep's folder)")
    args = parser.parse_args()
    keys, rows = read_sweep(args.sweep)

    by_validation = any(figure(p["validation_accuracy"]) is not None for r in rows.values() for p in r["points"])
    metric = "validation_accuracy" if by_validation else "test_accuracy"
    drawn, left_out = [], []
    for row in rows.values():
        done = [p for p in row["points"] if p["state"] == "done" and figure(p[metric]) is not None]
        label = " ".join(f"{k.split('.')[-1]}={v}" for k, v in zip(keys, row["settings"])) or "base config"
        if not done:
            left_out.append(label)
            continue
        seeds = [(p["seed"], figure(p[metric]), figure(p["test_accuracy"])) for p in done]
        mean = sum(s[1] for s in seeds) / len(seeds)
        failed = len(row["points"]) - len(done)
        drawn.append((mean, label + (f" ({failed} failed)" if failed else ""), seeds))
    if not drawn:
        sys.exit(f"plot_sweep.py: {args.sweep}: no point has a result yet")
    drawn.sort(key=lambda d: -d[0])

    try:
        import matplotlib
    except ImportError:
        # Debian's python3-matplotlib belongs to Debian's interpreter; another python3 first on
        # PATH (pyenv, a virtual environment) does not see it.
        debian = "/usr/bin/python3"
        if os.path.realpath(sys.executable) != os.path.realpath(debian) and os.path.exists(debian):
            os.execv(debian, [debian, os.path.abspath(__file__)] + sys.argv[1:])
        sys.exit("plot_sweep.py: matplotlib is missing; install python3-matplotlib (scripts/setup.sh does)")
    matplotlib.use("Agg")  # no display needed: batch jobs and CI draw too
    import matplotlib.pyplot as plt

    height = max(2.5, 0.45 * len(drawn) + 1.2)
    fig, ax = plt.subplots(figsize=(9, height))
    for y, (mean, label, seeds) in enumerate(drawn):
        ax.plot([mean, mean], [y - 0.3, y + 0.3], color="black", linewidth=2)
        ax.scatter([s[1] for s in seeds], [y] * len(seeds), color="tab:blue", zorder=3,
                   label="validation accuracy (each seed)" if by_validation and y == 0 else
                   "test accuracy (each seed)" if y == 0 else None)
        if by_validation:
            ax.scatter([s[2] for s in seeds], [y] * len(seeds), color="tab:orange", marker="x", zorder=3,
                       label="test accuracy (each seed)" if y == 0 else None)
    ax.set_yticks(range(len(drawn)))
    ax.set_yticklabels([d[1] for d in drawn], fontsize="small")
    ax.invert_yaxis()  # best at the top
    ax.set_xlabel(("validation" if by_validation else "test") + " accuracy (bar: mean over seeds)")
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(fontsize="small", loc="lower left")
    ax.set_title(args.title or os.path.basename(os.path.normpath(args.sweep)))
    fig.tight_layout()
    fig.savefig(args.output, dpi=100)
    for label in left_out:
        print(f"plot_sweep.py: left out {label}: no point of it has a result", file=sys.stderr)
    print(f"plot_sweep.py: wrote {args.output} ({len(drawn)} setting{'s' if len(drawn) != 1 else ''})")


if __name__ == "__main__":
    main()
