"""Small synthetic files in the PAL artifact's two styles, of one fleet of two nodes of four GPUs
whose slowdowns are known: "resnet style" names a GPU by its slot (uuid column ``c001-1-2``, node
``1``), "pagerank style" by its NVML UUID (node ``001``). The import tests of identity and of
validation write them."""

from __future__ import annotations

from pathlib import Path

T0 = 1_700_000_000
NODES = (1, 2)
DEVICES = (0, 1, 2, 3)
# A GPU's slowdown: distinct per slot so that a merge that mixes two GPUs shows.
SLOW = {(n, d): 1.0 + 0.02 * ((n * 4 + d) % 5) for n in NODES for d in DEVICES}


def uuid_of(node: int, dev: int) -> str:
    return f"GPU-{node:08x}-0000-0000-0000-{dev:012x}"


def resnet_csv(path: Path, *, extra: list[str] = (), runs: int = 3, ts: int = T0) -> Path:
    lines = ["exp,ts,cabinet,node,cab-node,uuid,device,perf"]
    for n in NODES:
        for d in DEVICES:
            for i in range(runs):
                perf = 400 * SLOW[(n, d)] * (1 + 0.001 * i)
                lines.append(f"resnet,{ts + 60 * i},c001,{n},c001-{n},c001-{n}-{d},{d},{perf}")
    path.write_text("\n".join([*lines, *extra]) + "\n")
    return path


def pagerank_csv(path: Path, *, slots: list[tuple[int, int]] | None = None, ts: int = T0 + 86400,
                 uuid=uuid_of) -> Path:
    lines = [",exp,reps,uuid,cabinet,node,ts,device,perf"]
    k = 0
    for n, d in slots if slots is not None else [(n, d) for n in NODES for d in (0, 1, 2)]:
        for i in range(3):
            k += 1
            lines.append(f"{k},pagerank,1,{uuid(n, d)},c001,{n:03d},{ts + 60 * i},{d},{66000 * SLOW[(n, d)]}")
    path.write_text("\n".join(lines) + "\n")
    return path
