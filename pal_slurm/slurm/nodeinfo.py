"""Pure parsers for `scontrol show node -o` output and Slurm GRES strings.

`scontrol show node -o` prints one line per node of `Key=Value` pairs separated by spaces,
where some values (Reason=..., OS=...) contain spaces themselves.  It works the same on
Slurm 22.05 and 24.11, which is why `pal slurm gres-conf --check` reads it rather than JSON.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from pal_slurm.slurm.gres_compare import SlurmNodeGres

# A new pair starts with a Slurm key and '=': keys start upper-case (CamelCase; some hold '_', ':' or '/',
# e.g. MCS_label, AllocNode:Sid, CPUs/Task).  Lower-case words with '=' inside a value (an admin comment
# like `pal:held class=A`) therefore stay part of that value.
_KEY = re.compile(r"^[A-Z][A-Za-z0-9_.:/]*=")


def parse_kv_line(line: str) -> dict[str, str]:
    """`Key=Value Key2=Value with spaces` -> dict; a token without `Key=` continues the previous value."""
    out: dict[str, str] = {}
    last: str | None = None
    for token in line.strip().split(" "):
        if not token:
            if last is not None:
                out[last] += " "
            continue
        if _KEY.match(token):
            key, _, value = token.partition("=")
            out[key] = value
            last = key
        elif last is not None:
            out[last] = f"{out[last]} {token}"
    return {k: v.strip() for k, v in out.items()}


def split_gres(text: str) -> list[str]:
    """Split a GRES list on commas that are not inside parentheses (`gpu:a:1(S:0,1),gpu:b:1`)."""
    items, depth, cur = [], 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        if ch == "," and depth == 0:
            items.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    items.append("".join(cur))
    return [i.strip() for i in items if i.strip()]


def parse_gres_item(item: str) -> tuple[str, str | None, int] | None:
    """`gpu:v100_g0:1(S:0)` -> ("gpu", "v100_g0", 1); `gpu:2` -> ("gpu", None, 2); `gpu` -> ("gpu", None, 1).

    Also accepts the `gres/` and `gres:` TRES prefixes.  Returns None for `(null)` and empties.
    """
    item = re.sub(r"\(.*\)$", "", item.strip())
    item = re.sub(r"^gres[:/]", "", item)
    if not item or item == "(null)":
        return None
    parts = item.split(":")
    name = parts[0]
    if len(parts) == 1:
        return name, None, 1
    last = parts[-1]
    count: int | None = None
    m = re.fullmatch(r"(\d+)([KMGTP]?)", last)
    if m:
        scale = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4, "P": 1024**5}[m[2]]
        count = int(m[1]) * scale
        middle = parts[1:-1]
    else:
        middle = parts[1:]
    gtype = ":".join(middle) if middle else None
    return name, gtype or None, 1 if count is None else count


def parse_features(text: str | None) -> frozenset[str]:
    if not text or text == "(null)":
        return frozenset()
    return frozenset(f.strip() for f in text.split(",") if f.strip())


def node_gres_from_fields(fields: dict[str, str]) -> SlurmNodeGres:
    types: dict[str | None, int] = {}
    for item in split_gres(fields.get("Gres", "")):
        parsed = parse_gres_item(item)
        if parsed is None or parsed[0] != "gpu":
            continue
        _, gtype, count = parsed
        types[gtype] = types.get(gtype, 0) + count
    features = parse_features(fields.get("AvailableFeatures", fields.get("Features")))
    return SlurmNodeGres(name=fields.get("NodeName", ""), gpu_types=types, features=features)


def parse_show_node(text: str) -> list[SlurmNodeGres]:
    """All nodes of `scontrol show node -o` output (blank lines and 'No nodes' messages skipped)."""
    return [node_gres_from_fields(f) for f in _lines(text.splitlines())]


def _lines(lines: Iterable[str]) -> Iterable[dict[str, str]]:
    for line in lines:
        if line.startswith("NodeName="):
            yield parse_kv_line(line)
