#!/usr/bin/env python3
"""Draws one or more mnist-train runs side by side: training loss and accuracy per logged step, and the
evaluation points, one colour per run, labelled with the run's name and devices.

    scripts/plot_run.py RUN_DIR [RUN_DIR ...] [-o FILE.png] [--title TEXT]

Reads each run directory's metrics.jsonl (and summary.json, when the run finished); a run with a
validation split draws its validation evaluations, and the test set's at the end. Needs matplotlib
(Debian's python3-matplotlib, installed by scripts/setup.sh); draws without a display.
"""
import argparse
import json
import os
import sys


def read_run(run_dir):
    metrics = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.isfile(metrics):
        sys.exit(f"plot_run.py: {run_dir}: no metrics.jsonl (is it a run directory of mnist-train?)")
    train, evals, validation = [], [], []
    with open(metrics, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"plot_run.py: {metrics}:{number}: not a JSON line ({e})")
            if record.get("type") == "train":
                train.append(record)
            elif record.get("split") == "validation":
                validation.append(record)
            elif record.get("checkpoint") != "best":  # the best checkpoint's test figures: summary
                evals.append(record)
    if not train and not evals and not validation:
        sys.exit(f"plot_run.py: {metrics}: no training or evaluation records yet")
    # A resumed run appends to the same file: keep the last record of each step.
    train = sorted({r["step"]: r for r in train}.values(), key=lambda r: r["step"])
    evals = sorted({r["step"]: r for r in evals}.values(), key=lambda r: r["step"])
    validation = sorted({r["step"]: r for r in validation}.values(), key=lambda r: r["step"])
    label = os.path.basename(os.path.normpath(run_dir))
    summary_path = os.path.join(run_dir, "summary.json")
    if os.path.isfile(summary_path):
        with open(summary_path, encoding="utf-8") as f:
            summary = json.load(f)
        label = f"{summary.get('name', label)} ({summary.get('devices', '?')})"
        if summary.get("test_accuracy") is not None:
            label += f", test acc {summary['test_accuracy']:.4f}"
    return label, train, evals, validation


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR")
    parser.add_argument("-o", "--output", default="run.png", help="PNG file to write (default run.png)")
    parser.add_argument("--title", default="", help="figure title")
    args = parser.parse_args()
    runs = [read_run(d) for d in args.runs]

    try:
        import matplotlib
    except ImportError:
        # Debian's python3-matplotlib belongs to Debian's interpreter; another python3 first on
        # PATH (pyenv, a virtual environment) does not see it.
        debian = "/usr/bin/python3"
        if os.path.realpath(sys.executable) != os.path.realpath(debian) and os.path.exists(debian):
            os.execv(debian, [debian, os.path.abspath(__file__)] + sys.argv[1:])
        sys.exit("plot_run.py: matplotlib is missing; install python3-matplotlib (scripts/setup.sh does)")
    matplotlib.use("Agg")  # no display needed: batch jobs and CI draw too
    import matplotlib.pyplot as plt

    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(11, 4.2))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (label, train, evals, validation) in enumerate(runs):
        colour = colours[i % len(colours)]
        if train:
            steps = [r["step"] for r in train]
            ax_loss.plot(steps, [r["loss"] for r in train], color=colour, label=f"{label}: train")
            ax_acc.plot(steps, [r["accuracy"] for r in train], color=colour, label=f"{label}: train")
        if evals:
            steps = [r["step"] for r in evals]
            ax_loss.plot(steps, [r["loss"] for r in evals], "o--", color=colour, label=f"{label}: test")
            ax_acc.plot(steps, [r["accuracy"] for r in evals], "o--", color=colour, label=f"{label}: test")
        if validation:
            steps = [r["step"] for r in validation]
            ax_loss.plot(steps, [r["loss"] for r in validation], "s:", color=colour,
                         label=f"{label}: validation")
            ax_acc.plot(steps, [r["accuracy"] for r in validation], "s:", color=colour,
                        label=f"{label}: validation")
    ax_loss.set_yscale("log")
    ax_loss.set_ylabel("loss (log scale)")
    ax_acc.set_ylabel("accuracy")
    for ax in (ax_loss, ax_acc):
        ax.set_xlabel("step")
        ax.grid(True, alpha=0.3)
    ax_acc.legend(fontsize="small", loc="lower right")
    if args.title:
        fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.output, dpi=100)
    print(f"plot_run.py: wrote {args.output} ({len(runs)} run{'s' if len(runs) > 1 else ''})")


if __name__ == "__main__":
    main()
