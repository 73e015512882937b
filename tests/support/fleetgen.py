"""Hand-made profile records with known answers, for database and CLI tests."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone

from pal_slurm.ingest.records import GpuInfo, ProfileRecord

T0 = datetime(2026, 11, 1, 12, 0, 0, 123456, tzinfo=timezone.utc)


def records(
    factors: Mapping[str, float],
    *,
    benchmark: str = "resnet50",
    model: str = "V100",
    runs: int = 4,
    base: float = 100.0,
    lower_is_better: bool = True,
    node_of: Mapping[str, str] | None = None,
    tag: str = "",
) -> list[ProfileRecord]:
    """`runs` runs per GPU whose median is exactly base*factor (time) or base/factor (throughput)."""
    out = []
    line = 0
    slots: dict[str, int] = {}  # one GPU, one slot: the next free device index of its node
    for uuid, factor in factors.items():
        node = (node_of or {}).get(uuid, f"node-{uuid[-1]}")
        index = slots[node] = slots.get(node, -1) + 1
        for i in range(runs):
            line += 1
            jitter = (i - (runs - 1) / 2) * 0.001  # symmetric around 0: the median is exact
            value = base * factor * (1 + jitter) if lower_is_better else base / factor * (1 + jitter)
            key = hashlib.sha256(f"{tag}|{uuid}|{benchmark}|{i}".encode()).hexdigest()
            out.append(
                ProfileRecord(
                    run_key=key,
                    gpu=GpuInfo(uuid=uuid, node=node, model=model, nvml_index=index, minor_number=index),
                    benchmark=benchmark,
                    started_at=T0 + timedelta(minutes=line),
                    score=value,
                    unit="ms" if lower_is_better else "img/s",
                    lower_is_better=lower_is_better,
                    source="test",
                    source_file="<test>",
                    line=line,
                    sm_clock_mhz=1500 - 200 * (factor - 1),
                    power_w=299.5,
                    throttle_reasons=4,
                )
            )
    return out


def two_tier_fleet(fast: int = 12, slow: int = 4) -> dict[str, float]:
    """`fast` GPUs at 1.00, `slow` at 1.06 (slower, but normal variability), one broken at 1.5."""
    fleet = {f"GPU-fast-{i:02d}": 1.0 + 0.001 * (i % 3) for i in range(fast)}
    fleet |= {f"GPU-slow-{i:02d}": 1.06 + 0.001 * (i % 3) for i in range(slow)}
    fleet["GPU-broken-00"] = 1.5
    return fleet
