#!/usr/bin/env python3
"""One training step of ResNet-50 on synthetic images, in images/s: a real model's mix.

Convolutions are compute-bound, batch norm and the optimizer memory-bound, so this
sits between GEMM and STREAM in how much the SM clock matters, as real training jobs
do. Synthetic data (random images and labels made on the GPU once) keeps the input
pipeline and the disks out of the measurement. Mixed precision (fp16 autocast with a
gradient scaler, channels-last) as production training runs it; `--precision fp32`
for plain fp32. The model is defined here (torchvision's ResNet-50 v1.5 layout) so
that torch alone is enough. One repeat = k steps, ~0.5 s; score = batch * k / time.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common

REPEAT_S = 0.5


def resnet50(nn: Any, num_classes: int = 1000) -> Any:
    """ResNet-50 v1.5 (stride on the 3x3 convolution), 25.6 M parameters."""

    class Bottleneck(nn.Module):
        def __init__(self, cin: int, width: int, stride: int) -> None:
            super().__init__()
            cout = width * 4
            self.body = nn.Sequential(
                nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
                nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(width),
                nn.ReLU(inplace=True),
                nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout),
            )
            self.skip = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))
                         if stride != 1 or cin != cout else nn.Identity())
            self.relu = nn.ReLU(inplace=True)

        def forward(self, x: Any) -> Any:
            return self.relu(self.body(x) + self.skip(x))

    layers: list[Any] = [nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(64),
                         nn.ReLU(inplace=True), nn.MaxPool2d(3, stride=2, padding=1)]
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            layers.append(Bottleneck(cin, width, stride if i == 0 else 1))
            cin = width * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, num_classes)]
    return nn.Sequential(*layers)


def make_step(torch: Any, batch: int, precision: str, image: int):
    model = resnet50(torch.nn).cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.randn(batch, 3, image, image, device="cuda").to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device="cuda")
    amp = precision == "amp"
    if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):  # torch >= 2.3
        scaler = torch.amp.GradScaler("cuda", enabled=amp)
    else:
        scaler = torch.cuda.amp.GradScaler(enabled=amp)
    torch.backends.cudnn.benchmark = True
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def timed(k: int) -> float:
        start.record()
        for _ in range(k):
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
                loss = loss_fn(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000.0

    timed(2)  # cudnn autotuning, allocator warm-up
    k = max(1, min(200, round(REPEAT_S / max(timed(1), 1e-6))))

    def step() -> float:
        return batch * k / timed(k)

    return step, {"model": "resnet50", "batch": batch, "image": image, "precision": precision, "steps_per_repeat": k}


def main(argv: list[str] | None = None) -> int:
    p = _common.parser("ResNet-50 training throughput (images/s) on device 0, synthetic data. Needs torch.")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--image", type=int, default=224, help="image side in pixels")
    p.add_argument("--precision", choices=("amp", "fp32"), default="amp")
    args = p.parse_args(argv)
    if args.framework == "cupy":
        return _common.fail("train-resnet50", "needs torch (cupy has no training stack)")
    return _common.run_main("train-resnet50", "images/s", args, ("torch",),
                            lambda name, mod: make_step(mod, args.batch, args.precision, args.image))


if __name__ == "__main__":
    sys.exit(main())
