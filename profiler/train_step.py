#!/usr/bin/env python3
"""One training step of a real model on synthetic data: ResNet-50 (images/s) or BERT-base
(sequences/s), a real model's mix.

ResNet-50: convolutions are compute-bound, batch norm and the optimizer memory-bound, so
it sits between GEMM and STREAM in how much the SM clock matters, as real training jobs
do. BERT-base (`--model bert`, masked-language-model step, sequence 128): attention's
softmax, layer norms, the embedding and its 30,522-word output layer move more memory per
FLOP, so the clock governs less of it than of ResNet-50 (class B's benchmark). Synthetic data (random images and labels made on the GPU once) keeps the input
pipeline and the disks out of the measurement. Mixed precision (fp16 autocast with a
gradient scaler, channels-last) as production training runs it; `--precision fp32`
for plain fp32. The model is defined here (torchvision's ResNet-50 v1.5 layout) so
that torch alone is enough. One repeat = k steps, ~0.5 s; score = batch * k / time.

**The batch grows with the GPU's memory** (`default_batch`): the base batch (64 images, 32
sequences) times one per 16 GiB, at most 8 times. At the base batch a V100 is busy, but an
H200 is not: measured on one H200 (bench/gpu/check.sh, docs/profiler.md), ResNet-50 at batch
64 drew ~350 W of 700 and scored 2,677-3,184 images/s over three runs (in-run spread 11-14 %),
BERT at 32 846-1,121 sequences/s (spread 18-40 %): the host's kernel launches set the pace, and
the noise is larger than the variability the benchmark is there to measure. At 512 and 256 the
same GPU drew 620-663 W and repeated within 0.5 % (6,201-6,235 images/s, 2,400-2,411
sequences/s). Every GPU of one model has the same memory, so a model's GPUs share one batch and
their scores stay comparable; `--batch` fixes it by hand.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common

REPEAT_S = 0.5

#: GiB of GPU memory per multiple of the base batch, and the most multiples
GIB_PER_MULTIPLE = 16
MAX_MULTIPLE = 8


def default_batch(base: int, total_memory_bytes: int) -> int:
    """The base batch times one per 16 GiB of the GPU's memory (at least 1, at most 8): a V100
    16 GB keeps the base, an 80 GB A100/H100 (79.6 GiB) takes 4x, a 141 GB H200 8x."""
    multiple = max(1, min(MAX_MULTIPLE, int(total_memory_bytes / 2**30) // GIB_PER_MULTIPLE))
    return base * multiple


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


BERT_VOCAB = 30522


def bert_base(nn: Any, seq: int, vocab: int = BERT_VOCAB) -> Any:
    """BERT-base's encoder (12 layers, hidden 768, 12 heads, GELU, post-norm) with token and
    position embeddings and a masked-LM output layer: 110 M parameters."""

    class Bert(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tokens = nn.Embedding(vocab, 768)
            self.positions = nn.Embedding(seq, 768)
            self.norm = nn.LayerNorm(768)
            layer = nn.TransformerEncoderLayer(768, 12, 3072, dropout=0.1, activation="gelu", batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, 12)
            self.head = nn.Linear(768, vocab)

        def forward(self, ids: Any) -> Any:
            pos = self.positions.weight[: ids.shape[1]]
            return self.head(self.encoder(self.norm(self.tokens(ids) + pos)))

    return Bert()


def make_step(torch: Any, model_name: str, batch: int | None, precision: str, image: int, seq: int):
    if batch is None:  # the default: by the GPU's memory
        batch = default_batch(MODELS[model_name][2], torch.cuda.get_device_properties(0).total_memory)
    if model_name == "bert":
        model = bert_base(torch.nn, seq).cuda()
        x = torch.randint(0, BERT_VOCAB, (batch, seq), device="cuda")
        y = torch.randint(0, BERT_VOCAB, (batch * seq,), device="cuda")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        shape = {"seq": seq}
    else:
        model = resnet50(torch.nn).cuda().to(memory_format=torch.channels_last)
        x = torch.randn(batch, 3, image, image, device="cuda").to(memory_format=torch.channels_last)
        y = torch.randint(0, 1000, (batch,), device="cuda")
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        shape = {"image": image}
    loss_fn = torch.nn.CrossEntropyLoss()
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
                out = model(x)
                loss = loss_fn(out.reshape(-1, out.shape[-1]), y)
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

    return step, {"model": model_name, "batch": batch, **shape, "precision": precision, "steps_per_repeat": k}


#: --model -> (the benchmark's stored name, its unit, the base batch: per 16 GiB of GPU memory)
MODELS = {"resnet50": ("train-resnet50", "images/s", 64), "bert": ("train-bert", "sequences/s", 32)}


def main(argv: list[str] | None = None) -> int:
    p = _common.parser("Training throughput on device 0, synthetic data: ResNet-50 (images/s) or BERT-base "
                       "(sequences/s). Needs torch.")
    p.add_argument("--model", choices=tuple(MODELS), default="resnet50")
    p.add_argument("--batch", type=int, default=None,
                   help="default: 64 images (resnet50) or 32 sequences (bert) per 16 GiB of GPU memory, at most 8x")
    p.add_argument("--image", type=int, default=224, help="image side in pixels (resnet50)")
    p.add_argument("--seq", type=int, default=128, help="sequence length in tokens (bert)")
    p.add_argument("--precision", choices=("amp", "fp32"), default="amp")
    args = p.parse_args(argv)
    name, unit, _ = MODELS[args.model]
    if args.batch is not None and args.batch < 1:
        return _common.fail(name, f"--batch must be at least 1, got {args.batch}")
    batch = args.batch
    if args.framework == "cupy":
        return _common.fail(name, "needs torch (cupy has no training stack)")
    return _common.run_main(name, unit, args, ("torch",),
                            lambda fw, mod: make_step(mod, args.model, batch, args.precision, args.image, args.seq))


if __name__ == "__main__":
    sys.exit(main())
