#!/usr/bin/env python3
"""The seed network in eager PyTorch, timed like `mnist-train bench`: whole training steps
(forward, softmax cross-entropy, backward, Adam) on random images, batch 1024 by default.

It exists to put mnist-train's figure beside the usual way of writing this network; it is not part of
the tool. Usage: python3 scripts/bench_pytorch.py [--batch 1024] [--steps 50] [--device cuda|cpu]
"""
import argparse
import time

import torch
from torch import nn


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    device = torch.device(args.device)
    model = seed_network().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    images = torch.rand(4096, 1, 28, 28, device=device)
    labels = torch.randint(0, 10, (4096,), device=device)
    index = torch.arange(args.batch, device=device) * 7919 % 4096

    def step() -> None:
        x, y = images[index], labels[index]
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()

    for _ in range(args.warmup):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"pytorch {torch.__version__} eager on {name}: batch {args.batch}, {args.steps} steps: "
          f"{1000 * seconds / args.steps:.3f} ms/step, {args.batch * args.steps / seconds:.0f} samples/s")


if __name__ == "__main__":
    main()
