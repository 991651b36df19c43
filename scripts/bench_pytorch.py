#!/usr/bin/env python3
"""The seed network in PyTorch, timed like `mnist-train bench`: whole training steps (forward,
softmax cross-entropy, backward, Adam) on random images, eager and compiled.

It exists to put mnist-train's figure beside the ways people write this network; it is not part of
the tool. Usage:
  python3 scripts/bench_pytorch.py [--batch 1024[,8192...]] [--steps 50] [--warmup 5]
                                   [--device cuda|cpu] [--modes eager,max-autotune,reduce-overhead]
                                   [--channels-last auto|on|off]

Modes: `eager` (the model as written; on CUDA Adam's fused kernel, its fastest eager form), and
torch.compile's `max-autotune` (Inductor's autotuned Triton kernels and CUDA graphs) and
`reduce-overhead` (CUDA graphs of the default kernels), which need PyTorch 2.0 or later: on an
older PyTorch a compiled mode prints one "skipped" line with the reason and the others still run.
TF32 is off everywhere, so the arithmetic is fp32 like mnist-train's. `--channels-last auto` (the
default) uses channels_last for the compiled modes on CUDA, where Inductor's convolutions take it
best, and NCHW otherwise. Each measured line reads
  pytorch VERSION MODE on DEVICE: batch B, S steps: X ms/step, Y samples/s (warm-up W s)
and the exit status is 0 unless a mode that could run failed.
"""
import argparse
import sys
import time

import torch
from torch import nn

MODES = ("eager", "max-autotune", "reduce-overhead")


def seed_network() -> nn.Module:
    # configs/seed_single_gpu.yaml: conv 5x5x6 same + BN + relu, pool 2, conv 5x5x12 same + BN + relu,
    # pool 2, dense 100 + BN + relu, dropout 0.5, dense 10; no bias under BN, momentum 0.1
    # (= decay 0.9), eps 1e-3. PyTorch's BN learns gamma with beta (affine), the seed's only beta:
    # 118 more parameters, no measurable work.
    def bn2d(c):
        return nn.BatchNorm2d(c, eps=1e-3, momentum=0.1, affine=True)

    return nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2, bias=False), bn2d(6), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 12, 5, padding=2, bias=False), bn2d(12), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(588, 100, bias=False), nn.BatchNorm1d(100, eps=1e-3, momentum=0.1),
        nn.ReLU(), nn.Dropout(0.5), nn.Linear(100, 10))


def fp32_only() -> None:
    """TF32 off: our kernels multiply in fp32, and a comparison must do the same arithmetic."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if hasattr(torch, "set_float32_matmul_precision"):
        torch.set_float32_matmul_precision("highest")


def why_not(mode: str, device: torch.device) -> str:
    """Why `mode` cannot run here, or "" when it can."""
    if mode == "eager":
        return ""
    if not hasattr(torch, "compile"):
        return f"torch.compile needs PyTorch 2.0 or later (this is {torch.__version__})"
    if device.type != "cuda" and mode == "reduce-overhead":
        return "reduce-overhead is CUDA graphs, and the device is not a GPU"
    return ""


def time_mode(mode: str, batch: int, steps: int, warmup: int, device: torch.device,
              channels_last: bool) -> tuple:
    """Seconds per step and seconds of the warm-up steps (a compiled mode compiles in them) for one mode and batch."""
    torch.manual_seed(1)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    model = seed_network().to(device, memory_format=fmt)
    cuda = device.type == "cuda"
    # Adam's fused kernel where PyTorch has one: the strongest eager optimizer step.
    try:
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, fused=cuda) if cuda else \
            torch.optim.Adam(model.parameters(), lr=1e-3)
    except TypeError:  # a PyTorch without the fused option
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    forward = model if mode == "eager" else torch.compile(model, mode=mode)
    loss_fn = nn.CrossEntropyLoss()
    images = torch.rand(4096, 1, 28, 28, device=device).to(memory_format=fmt)
    labels = torch.randint(0, 10, (4096,), device=device)
    index = torch.arange(batch, device=device) * 7919 % 4096

    def step() -> None:
        x, y = images[index], labels[index]
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(forward(x), y)
        loss.backward()
        optimizer.step()

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    start = time.perf_counter()
    for _ in range(max(1, warmup)):  # a compiled mode compiles (and autotunes) here
        step()
    sync()
    compile_seconds = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    return (time.perf_counter() - start) / steps, compile_seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", default="1024", help="one batch or a comma-separated list")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--modes", default="eager",
                        help="comma-separated, of: " + ", ".join(MODES))
    parser.add_argument("--channels-last", choices=("auto", "on", "off"), default="auto")
    args = parser.parse_args()
    try:
        batches = [int(b) for b in args.batch.split(",")]
    except ValueError:
        parser.error(f"--batch takes batch sizes separated by commas, not '{args.batch}'")
    if any(b < 1 for b in batches) or args.steps < 1 or args.warmup < 0:
        parser.error("batches and --steps must be at least 1, --warmup at least 0")
    modes = args.modes.split(",")
    for mode in modes:
        if mode not in MODES:
            parser.error(f"--modes: unknown mode '{mode}'; known: {', '.join(MODES)}")

    fp32_only()
    torch.backends.cudnn.benchmark = True
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    failed = False
    for mode in modes:
        reason = why_not(mode, device)
        label = "eager" if mode == "eager" else f"compiled ({mode})"
        if reason:
            print(f"pytorch {torch.__version__} {label} on {name}: skipped: {reason}", flush=True)
            continue
        channels_last = args.channels_last == "on" or (
            args.channels_last == "auto" and mode != "eager" and device.type == "cuda")
        for batch in batches:
            try:
                seconds, compile_seconds = time_mode(mode, batch, args.steps, args.warmup, device,
                                                     channels_last)
            except Exception as error:  # one mode's failure must not hide the others' figures
                failed = True
                print(f"pytorch {torch.__version__} {label} on {name}: batch {batch}: failed: "
                      f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}",
                      flush=True)
                continue
            layout = ", channels_last" if channels_last else ""
            print(f"pytorch {torch.__version__} {label} on {name}: batch {batch}, {args.steps} "
                  f"steps: {1000 * seconds:.3f} ms/step, {batch / seconds:.0f} samples/s "
                  f"(warm-up {compile_seconds:.1f} s{layout})", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
