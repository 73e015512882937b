"""TRES and GRES strings, parsed and written (pure).

Why a module of its own: every Slurm field we steer by is one of these strings, and the two
Slurm versions we support spell them differently. Job requests: 22.05 writes
`gres:gpu:v100_g1:1`, 24.11 writes `gres/gpu:v100_g1:1` (and `gres/gpu=1` or
`gres/gpu:TYPE=1` in tres_per_task); lists are comma-separated and may mix other GRES
(`gres:gpu:2,gres:mps:100`). Allocations: `gpu:v100_g2:1(IDX:2)` in a job's gres_detail and
a node's gres_used, with `IDX:0-1,3`, `IDX:N/A` or an empty `IDX:` when nothing is used.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property, lru_cache

_SUFFIX = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_COUNT = re.compile(r"^(\d+)([kKmMgGtT]?)$")


@dataclass(frozen=True)
class GresItem:
    """One entry of a TRES list: `name` (gpu, mps, shard...), optional `type`, and `count`."""

    name: str
    type: str | None
    count: int

    def render(self, prefix: str) -> str:
        """As Slurm wants it back, with the prefix the job was submitted with (`gres:` / `gres/`)."""
        mid = f"{self.name}:{self.type}" if self.type else self.name
        return f"{prefix}{mid}:{self.count}"


@dataclass(frozen=True)
class TresList:
    """A parsed TRES field; `prefix` is `gres:` (22.05) or `gres/` (24.11), kept for writing back."""

    items: tuple[GresItem, ...]
    prefix: str = "gres:"
    #: entries we could not read (kept verbatim); a request with any is not rewritten
    unparsed: tuple[str, ...] = ()

    # cached: one parsed value is shared by every job with the same text (`parsed_tres`) and
    # asked for its GPUs several times a cycle for each of them
    @cached_property
    def gpu_items(self) -> tuple[GresItem, ...]:
        """The GPU entries as Slurm counts them: a repeated entry of the same type replaces
        the earlier one (`gpu:1,gpu:1` is 1 GPU, `gpu:1,gpu:2` is 2, `gpu:2,gpu:1` is 1;
        checked on 22.05 and 24.11), entries of different types add up."""
        last: dict[str | None, GresItem] = {}
        for i in self.items:
            if i.name == "gpu":
                last[i.type] = i
        return tuple(last.values())

    @cached_property
    def gpu_count(self) -> int:
        return sum(i.count for i in self.gpu_items)

    @cached_property
    def gpu_types(self) -> tuple[str, ...]:
        return tuple(i.type for i in self.gpu_items if i.type)

    def without_gpus(self) -> TresList:
        return TresList(tuple(i for i in self.items if i.name != "gpu"), self.prefix, self.unparsed)

    def render(self) -> str:
        return ",".join([i.render(self.prefix) for i in self.items] + list(self.unparsed))


def parse_count(text: str) -> int | None:
    """`2`, `1k` -> int; None when it is not a count."""
    m = _COUNT.match(text.strip())
    if not m:
        return None
    return int(m.group(1)) * _SUFFIX[m.group(2).lower()]


def parse_tres(value: str | None) -> TresList:
    """Parse a tres_per_node / tres_per_job / tres_per_task / tres_per_socket value.

    Accepts both prefixes, the bare `gpu:2` form, `=` before the count, and a missing count
    (`gres/gpu` means one). Non-GRES entries (`cpu=4`) and anything unreadable are kept in
    `unparsed` rather than guessed at.
    """
    if not value or not value.strip():
        return TresList(())
    prefix = "gres/" if "gres/" in value else "gres:"
    items: list[GresItem] = []
    bad: list[str] = []
    for raw in value.split(","):
        part = raw.strip()
        if not part:
            continue
        body = part
        if body.startswith(("gres:", "gres/")):
            body = body[5:]
        elif "=" in body.split(":", 1)[0] and not body.startswith("gpu"):
            bad.append(part)
            continue
        item = _parse_body(body)
        if item is None:
            bad.append(part)
        else:
            items.append(item)
    return TresList(tuple(items), prefix, tuple(bad))


def _parse_body(body: str) -> GresItem | None:
    # name[:type][:count] or name[:type]=count ; the count is optional (1)
    count_text: str | None = None
    if "=" in body:
        body, count_text = body.rsplit("=", 1)
    parts = body.split(":")
    if not parts[0] or not re.match(r"^[A-Za-z][\w.-]*$", parts[0]):
        return None
    name, rest = parts[0], parts[1:]
    if count_text is None and rest and parse_count(rest[-1]) is not None:
        count_text = rest.pop()
    if len(rest) > 1:
        return None
    gtype = rest[0] if rest else None
    if gtype is not None and not gtype:
        return None
    count = 1 if count_text is None else parse_count(count_text)
    if count is None:
        return None
    return GresItem(name=name, type=gtype, count=count)


def typed_gpu_request(prefix: str, slots: dict[str, int], others: tuple[GresItem, ...] = ()) -> str:
    """The per-slot request we set: `gres:gpu:v100_g0:1,gres:gpu:v100_g3:1` (+ non-GPU GRES kept)."""
    items = [GresItem("gpu", t, n) for t, n in sorted(slots.items())] + list(others)
    return ",".join(i.render(prefix) for i in items)


def expand_indices(text: str) -> tuple[int, ...]:
    """`0-1,3` -> (0, 1, 3); `N/A` or empty -> ()."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part or part.upper() == "N/A":
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            if lo.isdigit() and hi.isdigit():
                out.extend(range(int(lo), int(hi) + 1))
        elif part.isdigit():
            out.append(int(part))
    return tuple(out)


_ALLOC = re.compile(r"(?P<body>[^,(]+?)(?:\((?P<paren>[^)]*)\))?(?:,|$)")


@dataclass(frozen=True)
class GresUse(GresItem):
    """One entry of gres_used / gres_detail: a `GresItem` and the indices it holds."""

    indices: tuple[int, ...]


def parse_gres_alloc(text: str | None) -> tuple[GresUse, ...]:
    """`gpu:v100_g0:1(IDX:0),gpu:v100_g1:0(IDX:N/A)` -> GresUse entries (node gres_used, job
    gres_detail and node gres alike; entries without `(IDX:...)` get no indices)."""
    if not text:
        return ()
    out: list[GresUse] = []
    for m in _ALLOC.finditer(text.strip()):
        body = m.group("body").strip()
        if not body:
            continue
        parts = body.split(":")
        name = parts[0]
        count = 0
        gtype: str | None = None
        if len(parts) >= 3:
            gtype, count = parts[1], parse_count(parts[2]) or 0
        elif len(parts) == 2:
            c = parse_count(parts[1])
            if c is None:
                gtype, count = parts[1], 1
            else:
                count = c
        idx: tuple[int, ...] = ()
        paren = m.group("paren") or ""
        if paren.startswith("IDX:"):
            idx = expand_indices(paren[4:])
        out.append(GresUse(name=name, type=gtype or None, count=count, indices=idx))
    return tuple(out)


# The same TRES and GRES strings come back for most jobs and nodes, cycle after cycle (a
# handful of request forms, one node layout per node type); the parsers are pure and return
# frozen values, so the placer parses each distinct string once (bench/placer_cycle.py: a
# cycle over 1,000 held jobs and 1,250 nodes).
parsed_tres = lru_cache(maxsize=16384)(parse_tres)
parsed_gres_alloc = lru_cache(maxsize=16384)(parse_gres_alloc)
