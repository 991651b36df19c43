#!/usr/bin/env python3
"""The most memory mnist-train uses on bad input: each case of the bad-input classes (the
integration tests' [bounds] cases, tests/integration/test_cli.cpp) run against the binary, its
exit code, its peak resident memory (GNU time's %M: this script forks a large Python process, whose
pages a child counts until it execs, so the child is started by /usr/bin/time, Debian's `time`
package) and wall time, one row each, and the largest peak at the end, also as the part above the binary's
baseline (`--version`: its libraries).

    scripts/bad_input_memory.py [--binary build/bin/mnist-train] [--bomb-mib 1024]

Exits 1 when a case does not exit with its documented code, prints "bad_alloc", or runs past its
time limit (a hang), so the table is also a check. The inputs are made in a temporary folder:
a small valid IDX dataset, and a gzip bomb whose header promises 64 images and whose zeros
expand to --bomb-mib MiB (about a thousandth of that compressed). Run it from the source folder.
"""

import argparse
import gzip
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

GNU_TIME = "/usr/bin/time"


def idx_images(count, rows, cols, value=7):
    return struct.pack(">IIII", 0x803, count, rows, cols) + bytes([value]) * (count * rows * cols)


def idx_labels(labels):
    return struct.pack(">II", 0x801, len(labels)) + bytes(labels)


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def make_dataset(folder, n=64):
    write(os.path.join(folder, "train-images-idx3-ubyte"), idx_images(n, 28, 28))
    write(os.path.join(folder, "train-labels-idx1-ubyte"), idx_labels([i % 10 for i in range(n)]))
    write(os.path.join(folder, "t10k-images-idx3-ubyte"), idx_images(16, 28, 28))
    write(os.path.join(folder, "t10k-labels-idx1-ubyte"), idx_labels([1] * 16))


def make_bomb(path, mib):
    # Streamed: the script itself never holds the expanded bytes.
    zeros = bytes(1 << 20)
    with gzip.open(path, "wb", compresslevel=6) as f:
        f.write(idx_images(64, 28, 28))
        for _ in range(mib):
            f.write(zeros)


def run(command, limit_s, scratch):
    """(exit code, peak RSS in MiB, seconds, output); 124 when killed at the limit (a hang)."""
    start = time.monotonic()
    peak_file = os.path.join(scratch, "peak")
    with tempfile.TemporaryFile() as out:
        child = subprocess.Popen([GNU_TIME, "-o", peak_file, "-f", "%M"] + command, stdout=out,
                                 stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = child.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            code = 124
        out.seek(0)
        text = out.read().decode("utf-8", "replace")
    peak_kib = 0.0
    if code != 124:
        with open(peak_file) as f:
            # GNU time writes "Command exited with non-zero status N" before the figure.
            peak_kib = float(f.read().split()[-1])
    return code, peak_kib / 1024.0, time.monotonic() - start, text


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", default="build/bin/mnist-train")
    parser.add_argument("--bomb-mib", type=int, default=1024)
    parser.add_argument("--limit-s", type=float, default=60)
    args = parser.parse_args()
    binary = os.path.abspath(args.binary)
    if not os.access(binary, os.X_OK):
        sys.exit(f"bad_input_memory: {args.binary} is not an executable; build first or pass "
                 "--binary")

    if not os.access(GNU_TIME, os.X_OK):
        sys.exit(f"bad_input_memory: needs {GNU_TIME} (apt-get install time)")
    scratch = tempfile.mkdtemp(prefix="mnist-bad-input-")
    try:
        data = os.path.join(scratch, "data")
        bomb = os.path.join(scratch, "bomb")
        os.makedirs(data)
        os.makedirs(bomb)
        make_dataset(data)
        make_dataset(bomb)
        os.remove(os.path.join(bomb, "train-images-idx3-ubyte"))
        make_bomb(os.path.join(bomb, "train-images-idx3-ubyte.gz"), args.bomb_mib)
        fifo = os.path.join(scratch, "fifo.yaml")
        os.mkfifo(fifo)
        long_list = os.path.join(scratch, "long_list.yaml")
        with open("configs/cpu_quickstart.yaml") as f:
            base = f.read()
        with open(long_list, "w") as f:
            f.write(base + "\njunk: [")
            for _ in range(12_000):
                f.write("0, " * 1000)
            f.write("0]\n")

        def train(folder, *sets, config="configs/cpu_quickstart.yaml"):
            command = [binary, "--config", config, "--set", "data.dataset=custom",
                       "--set", f"data.dir={folder}", "--set", "train.steps=2",
                       "--set", f"output.dir={os.path.join(scratch, 'run')}", "--overwrite"]
            for s in sets:
                command += ["--set", s]
            return command

        cases = [
            ("conv2d padding 2147483647", train(data, "model.layers[0].conv2d.padding=2147483647"), 2),
            ("conv2d padding 2000 (a batch past indexing)",
             train(data, "model.layers[0].conv2d.padding=2000"), 2),
            ("train.epochs=1e308", train(data, "train.epochs=1e308"), 2),
            ("train.batch_per_device=2147483647", train(data, "train.batch_per_device=2147483647"), 2),
            ("64 workers x 300,000 samples (~730 GiB)",
             train(data, "devices.cpu_workers=64", "train.batch_per_device=300000"), 2),
            ("bench --batch 100000000",
             [binary, "--config", "configs/cpu_quickstart.yaml", "bench", "--batch", "100000000",
              "--steps", "1"], 2),
            (f"gzip bomb: 64 images + {args.bomb_mib} MiB of zeros", train(bomb), 2),
            ("--config /dev/zero", [binary, "--config", "/dev/zero", "--dry-run"], 2),
            ("--config FIFO", [binary, "--config", fifo, "--dry-run"], 2),
            ("36 MB YAML, 12-million-item list under an unknown key",
             [binary, "--config", long_list, "--dry-run"], 2),
            ("model.input [3, 28, 28] on 1-channel data", train(data, "model.input=[3, 28, 28]"), 2),
        ]
        # A checkpoint whose first parameter is NaN, for eval and predict.
        code, _, _, text = run(train(data), args.limit_s, scratch)
        if code != 0:
            sys.exit(f"bad_input_memory: the valid 2-step run failed (exit {code}):\n{text}")
        checkpoints = os.path.join(scratch, "run", "checkpoints")
        # Kept apart: the cases' --overwrite clears the run folder.
        checkpoint = os.path.join(scratch, "nan.safetensors")
        shutil.copy(os.path.join(checkpoints, sorted(
            f for f in os.listdir(checkpoints) if f.endswith(".safetensors"))[-1]), checkpoint)
        with open(checkpoint, "r+b") as f:
            header = struct.unpack("<Q", f.read(8))[0]
            f.seek(8 + header)
            f.write(struct.pack("<f", float("nan")))
        cases += [
            ("eval of a checkpoint holding NaN",
             [binary, "eval", "--checkpoint", checkpoint, "--data", data], 2),
            ("predict with a checkpoint holding NaN",
             [binary, "predict", "--checkpoint", checkpoint,
              os.path.join(data, "t10k-images-idx3-ubyte")], 2),
        ]
        print(f"{'case':<56} {'exit':>4} {'peak MiB':>9} {'s':>6}")
        # What the binary holds before it reads anything: its libraries (a CUDA build maps cuBLAS
        # and cuDNN, about 200 MiB resident, before main).
        _, baseline, _, _ = run([binary, "--version"], args.limit_s, scratch)
        print(f"{'baseline: --version':<56} {0:>4} {baseline:>9.1f}")
        worst, failures = 0.0, []
        for name, command, want in cases:
            code, mib, seconds, text = run(command, args.limit_s, scratch)
            worst = max(worst, mib)
            print(f"{name:<56} {code:>4} {mib:>9.1f} {seconds:>6.2f}")
            last = text.strip().splitlines()[-1] if text.strip() else ""
            print(f"    {last[:160]}")
            if code != want or "bad_alloc" in text:
                failures.append(f"{name}: exit {code} (want {want})")
        print(f"largest peak resident memory on bad input: {worst:.1f} MiB, "
              f"{worst - baseline:.1f} MiB above the baseline")
        if failures:
            print("FAILED:\n  " + "\n  ".join(failures))
            return 1
        return 0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
