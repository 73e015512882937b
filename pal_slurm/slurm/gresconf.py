"""gres.conf and slurm.conf node fragments from our GPU inventory (the diff against Slurm:
slurm/gres_compare.py).

Why per-slot GRES types: Slurm cannot be asked for "GPU index 2", but it can be asked for a
GRES *type*, and a type request gets exactly the devices of that type.  Giving every GPU slot
its own type `<model>_g<minor>` (device minor number, i.e. /dev/nvidia<minor>) lets the placer
steer a job to chosen GPUs.  The type depends only on the model and the slot, never on the
GPU's class, so reclassification never needs a Slurm restart.  A node feature named after the
model lets the submit filter turn `--gres=gpu:<model>:N` into an untyped count plus
`--constraint=<model>`.

Everything here is pure: an inventory in, text or differences out.  Reading the database,
files and `scontrol` is done by the callers (pal_slurm/cli/slurm_cmd.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from dataclasses import dataclass
from typing import Any, Literal

from pal_slurm.errors import InputError

# Model name -> Slurm token.  First match wins; patterns are searched in the lower-cased name.
# A name that matches none goes through sanitize_model() (vendor words dropped, alphanumerics kept).
MODEL_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"\bgh200\b", "gh200"),
    (r"\bh200\b", "h200"),
    (r"\bh100\b", "h100"),
    (r"\bh800\b", "h800"),
    (r"\bb200\b", "b200"),
    (r"\ba100\b", "a100"),
    (r"\ba800\b", "a800"),
    (r"\ba40\b", "a40"),
    (r"\ba30\b", "a30"),
    (r"\ba10g?\b", "a10"),
    (r"\bl40s\b", "l40s"),
    (r"\bl40\b", "l40"),
    (r"\bl4\b", "l4"),
    (r"\bv100s\b", "v100s"),
    (r"\bv100\b", "v100"),
    (r"\bp100\b", "p100"),
    (r"\bp40\b", "p40"),
    (r"\bt4\b", "t4"),
    (r"\bk80\b", "k80"),
    (r"\brtx\s*a(\d{4})\b", r"rtxa\1"),
    (r"\brtx\s*(\d{4})\s*ada\b", r"rtx\1ada"),
    (r"\b(?:geforce\s+)?rtx\s*(\d{4})(\s*ti)?\b", r"rtx\1\2"),
    (r"\bgtx\s*(\d{3,4})(\s*ti)?\b", r"gtx\1\2"),
)
_VENDOR_WORDS = re.compile(r"\b(nvidia|tesla|geforce|quadro|amd|radeon|instinct)\b")
_MAX_TOKEN = 32
#: the one definition of a slot type, `<model token>_g<minor>`; job_submit.lua's
#: pal.is_slot_type is a copy, checked against this by tests/slurm_adapter/test_lua_filter.py
_SLOT = re.compile(r"^(?P<model>.+)_g(?P<minor>\d+)$")
_ATTR_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_ATTR_VALUE = re.compile(r"[^\s#]+")
# Attributes this module writes itself; an inventory may not set them.
_OWN_ATTRS = frozenset({"nodename", "gres", "features"})


def sanitize_model(name: str) -> str:
    """Fallback for names the mapping does not know: lower-case, vendor words dropped, only [a-z0-9]."""
    lowered = _VENDOR_WORDS.sub(" ", name.lower())
    token = re.sub(r"[^a-z0-9]+", "", lowered)[:_MAX_TOKEN]
    if not token:
        raise InputError(f"GPU model {name!r} gives no usable Slurm type name (no letters or digits)")
    return token if token[0].isalpha() else f"gpu{token}"[:_MAX_TOKEN]


def model_token(name: str) -> str:
    """The Slurm-safe lower-case token for a GPU model: GRES type prefix and node feature.

    "Tesla V100-SXM2-16GB" -> "v100", "NVIDIA A100-SXM4-80GB" -> "a100", "NVIDIA GeForce RTX 3090" ->
    "rtx3090"; unknown names fall back to sanitize_model().  The placer and the submit filter
    must use the same token, so they call this function too.
    """
    lowered = " ".join(name.lower().replace("_", " ").split())
    for pattern, replacement in MODEL_PATTERNS:
        m = re.search(pattern, lowered)
        if m:
            return re.sub(r"\s+", "", m.expand(replacement))
    return sanitize_model(name)


def slot_type(model: str, minor: int) -> str:
    """GRES type of one GPU slot: `<model token>_g<minor>` (never depends on the class)."""
    return f"{model_token(model)}_g{minor}"


def is_slot_type(gres_type: str) -> bool:
    return _SLOT.match(gres_type) is not None


def slot_of_type(gres_type: str | None) -> int | None:
    """The device minor a slot type names (`v100_g2` -> 2); None for any other type."""
    m = _SLOT.match(gres_type or "")
    return int(m.group("minor")) if m else None


@dataclass(frozen=True)
class InventoryGpu:
    minor: int
    model: str

    @property
    def token(self) -> str:
        return model_token(self.model)

    @property
    def gres_type(self) -> str:
        return slot_type(self.model, self.minor)


@dataclass(frozen=True)
class InventoryNode:
    """One node and its GPUs; `attributes` are extra slurm.conf node attributes (CPUs, Port, ...)."""

    name: str
    gpus: tuple[InventoryGpu, ...]
    attributes: tuple[tuple[str, str], ...] = ()

    @property
    def features(self) -> tuple[str, ...]:
        """Model features of the node, in first-seen order (a node may mix models)."""
        return tuple(dict.fromkeys(g.token for g in self.gpus))


@dataclass(frozen=True)
class Inventory:
    nodes: tuple[InventoryNode, ...]


# ---------------------------------------------------------------- names and sizes

_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
#: Linux's HOST_NAME_MAX: a longer name is no host's
MAX_NODE_NAME = 64
MAX_MODEL_NAME = 128
#: more than any GPU node holds (a DGX has 8, the largest boards 16); bounds what an inventory may ask for
MAX_GPUS_PER_NODE = 64
MAX_NODES = 100_000


def name_problem(value: object, kind: Literal["node", "model"]) -> str | None:
    """Why `value` cannot be a node name (kind "node") or a GPU model name ("model") that reaches
    Slurm's configuration, or None when it can: the one check for every way a name comes in
    (the JSON inventory, the database, `pal profile import`'s files).

    A node name is one word of letters, digits, '.', '_' and '-' (no spaces, which would add
    attributes to a NodeName= line, and no brackets, which Slurm reads as a hostlist of many
    nodes). A model name is printable text that gives a GRES type token (model_token)."""
    if not isinstance(value, str):
        return f"expected a {kind} name, got {value!r}"
    if kind == "node":
        if len(value) > MAX_NODE_NAME:
            return f"node name {value[:MAX_NODE_NAME]!r}... is longer than {MAX_NODE_NAME} characters"
        if not _NODE_NAME.fullmatch(value):
            return (f"node name {value!r} is not one Slurm node name (letters, digits, '.', '_', '-'; no spaces, "
                    "'=' or hostlist brackets)")
        return None
    if not value.strip():
        return "empty GPU model name"
    if len(value) > MAX_MODEL_NAME:
        return f"GPU model name {value[:40]!r}... is longer than {MAX_MODEL_NAME} characters"
    if not value.isprintable():
        return f"GPU model name {value!r} has control characters"
    try:
        model_token(value)
    except InputError as exc:
        return str(exc)
    return None


# ---------------------------------------------------------------- inventory input


def _require_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(f"{what}: expected a non-negative integer, got {value!r}")
    return value


def _node_from_dict(raw: Any, index: int, source: str | None) -> InventoryNode:
    where = f"nodes[{index}]"
    if not isinstance(raw, Mapping):
        raise InputError(f"{where}: expected an object with name and gpus", source=source)
    name = raw.get("name")
    if (problem := name_problem(name, "node")) is not None:
        raise InputError(f"{where}.name: {problem}", source=source)
    default_model = raw.get("model")
    gpus_raw = raw.get("gpus")
    gpus: list[InventoryGpu] = []
    if isinstance(gpus_raw, int) and not isinstance(gpus_raw, bool):
        # Short form: "gpus": 4 with a node-level "model" means minors 0..3.
        if not isinstance(default_model, str):
            raise InputError(f"{where}: 'gpus' as a count needs a node-level 'model'", source=source)
        if (problem := name_problem(default_model, "model")) is not None:
            raise InputError(f"{where}.model: {problem}", source=source)
        count = _require_int(gpus_raw, f"{where}.gpus")
        if count > MAX_GPUS_PER_NODE:
            raise InputError(f"{where}.gpus: {count:,} GPUs on one node; at most {MAX_GPUS_PER_NODE}", source=source)
        gpus = [InventoryGpu(minor=i, model=default_model) for i in range(count)]
    elif isinstance(gpus_raw, list):
        if len(gpus_raw) > MAX_GPUS_PER_NODE:
            raise InputError(f"{where}.gpus: {len(gpus_raw):,} GPUs on one node; at most {MAX_GPUS_PER_NODE}",
                             source=source)
        for j, g in enumerate(gpus_raw):
            gwhere = f"{where}.gpus[{j}]"
            if not isinstance(g, Mapping):
                raise InputError(f"{gwhere}: expected an object with minor and model", source=source)
            model = g.get("model", default_model)
            if (problem := name_problem(model, "model")) is not None:
                raise InputError(f"{gwhere}.model: {problem}", source=source)
            try:
                minor = _require_int(g.get("minor"), f"{gwhere}.minor")
            except InputError as exc:
                raise InputError(str(exc), source=source) from None
            gpus.append(InventoryGpu(minor=minor, model=model.strip()))
    else:
        raise InputError(f"{where}.gpus: expected a list of GPUs or a count", source=source)
    attrs_raw = raw.get("slurm", {})
    if not isinstance(attrs_raw, Mapping):
        raise InputError(f"{where}.slurm: expected an object of slurm.conf node attributes", source=source)
    attrs: list[tuple[str, str]] = []
    for key, value in attrs_raw.items():
        text = str(value)
        if not _ATTR_KEY.fullmatch(str(key)) or str(key).lower() in _OWN_ATTRS:
            raise InputError(f"{where}.slurm: attribute {key!r} is not allowed", source=source)
        if isinstance(value, bool) or not _ATTR_VALUE.fullmatch(text):
            raise InputError(f"{where}.slurm.{key}: value {value!r} must be one word", source=source)
        attrs.append((str(key), text))
    return InventoryNode(name=name, gpus=tuple(gpus), attributes=tuple(attrs))


def inventory_from_dict(data: Any, *, source: str | None = None) -> Inventory:
    """Parse the JSON inventory format (docs/admin-guide.md):

        {"nodes": [{"name": "gpu01", "gpus": [{"minor": 0, "model": "Tesla V100-SXM2-16GB"}, ...],
                    "slurm": {"CPUs": 64, "RealMemory": 512000}},
                   {"name": "gpu02", "model": "NVIDIA A100-SXM4-80GB", "gpus": 8}]}
    """
    if not isinstance(data, Mapping) or not isinstance(data.get("nodes"), list):
        raise InputError("expected a JSON object with a 'nodes' list", source=source)
    if len(data["nodes"]) > MAX_NODES:
        raise InputError(f"nodes: {len(data['nodes']):,} nodes; at most {MAX_NODES:,}", source=source)
    nodes = [_node_from_dict(raw, i, source) for i, raw in enumerate(data["nodes"])]
    return validate(Inventory(nodes=tuple(nodes)), source=source)


@dataclass(frozen=True)
class GpuRow:
    """One GPU as the database holds it (gpus joined with nodes)."""

    node: str
    minor: int | None
    model: str
    uuid: str


def inventory_from_rows(rows: Iterable[GpuRow]) -> Inventory:
    """Group database rows by node.  A GPU without a minor number cannot be given a device file:
    that is an error naming the GPUs, because a gres.conf missing a GPU would hide it from Slurm."""
    rows = list(rows)
    no_minor = [r for r in rows if r.minor is None]
    if no_minor:
        names = ", ".join(f"{r.node}/{r.uuid}" for r in no_minor[:5])
        more = f" and {len(no_minor) - 5} more" if len(no_minor) > 5 else ""
        raise InputError(f"GPUs without a minor number (re-run the agent on their nodes): {names}{more}")
    by_node: dict[str, list[InventoryGpu]] = {}
    for r in rows:
        by_node.setdefault(r.node, []).append(InventoryGpu(minor=int(r.minor), model=r.model))  # type: ignore[arg-type]
    nodes = tuple(InventoryNode(name=n, gpus=tuple(g)) for n, g in by_node.items())
    return validate(Inventory(nodes=nodes))


def validate(inv: Inventory, *, source: str | None = None) -> Inventory:
    """Nodes sorted by name and GPUs by minor; duplicate nodes or minors, names `name_problem`
    refuses (one stored in the database before imports checked them too), more than
    MAX_GPUS_PER_NODE GPUs on a node, and an inventory without a GPU (a gres.conf of nothing but
    AutoDetect=off) are errors."""
    seen: set[str] = set()
    nodes = []
    where = "" if source is not None else " (in the database: correct or remove it there)"
    if not any(node.gpus for node in inv.nodes):
        raise InputError("the inventory lists no GPUs: nothing to configure", source=source)
    for node in inv.nodes:
        if (problem := name_problem(node.name, "node")) is not None:
            raise InputError(f"{problem}{where}", source=source)
        if len(node.gpus) > MAX_GPUS_PER_NODE:
            raise InputError(f"node {node.name}: {len(node.gpus)} GPUs; at most {MAX_GPUS_PER_NODE}", source=source)
        for g in node.gpus:
            if (problem := name_problem(g.model, "model")) is not None:
                raise InputError(f"node {node.name}, GPU minor {g.minor}: {problem}{where}", source=source)
        if node.name in seen:
            raise InputError(f"node {node.name} is listed twice", source=source)
        seen.add(node.name)
        minors = [g.minor for g in node.gpus]
        dup = sorted({m for m in minors if minors.count(m) > 1})
        if dup:
            raise InputError(f"node {node.name}: GPU minor number {dup[0]} is listed twice", source=source)
        nodes.append(InventoryNode(node.name, tuple(sorted(node.gpus, key=lambda g: g.minor)), node.attributes))
    return Inventory(nodes=tuple(sorted(nodes, key=lambda n: natural_key(n.name))))


@lru_cache(maxsize=65536)
def natural_key(name: str) -> tuple[object, ...]:
    """Node names in the order people (and Slurm's hostlists) count them: n2 before n10."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


# ---------------------------------------------------------------- generation

def device_path(dev_dir: str, node: str, minor: int) -> str:
    """`<dev_dir>/nvidia<minor>`; `%n` in dev_dir becomes the node name (as in Slurm's own files)."""
    return f"{dev_dir.replace('%n', node).rstrip('/') or '/'}/nvidia{minor}".replace("//", "/")


def gres_conf_lines(inv: Inventory, *, dev_dir: str = "/dev") -> list[str]:
    lines = ["AutoDetect=off"]
    for node in inv.nodes:
        for g in node.gpus:
            path = device_path(dev_dir, node.name, g.minor)
            lines.append(f"NodeName={node.name} Name=gpu Type={g.gres_type} File={path}")
    return lines


def node_gres(node: InventoryNode) -> str:
    return ",".join(f"gpu:{g.gres_type}:1" for g in node.gpus)


def node_conf_lines(inv: Inventory) -> list[str]:
    """slurm.conf `NodeName=` lines; attributes from the inventory come first, then Gres and Features."""
    lines = []
    for node in inv.nodes:
        parts = [f"NodeName={node.name}", *(f"{k}={v}" for k, v in node.attributes)]
        if node.gpus:
            parts.append(f"Gres={node_gres(node)}")
            parts.append(f"Features={','.join(node.features)}")
        lines.append(" ".join(parts))
    return lines


HEADER = "# generated by `pal slurm gres-conf`; one GRES type per GPU slot (<model>_g<minor>), see docs/admin-guide.md"


def render_gres_conf(inv: Inventory, *, dev_dir: str = "/dev") -> str:
    return "\n".join([HEADER, *gres_conf_lines(inv, dev_dir=dev_dir)]) + "\n"


def render_nodes_conf(inv: Inventory) -> str:
    note = ("# slurm.conf needs GresTypes=gpu; merge these Gres= and Features= into your NodeName lines "
            "or Include this file")
    return "\n".join([HEADER, note, *node_conf_lines(inv)]) + "\n"


def inventory_json(inv: Inventory, *, dev_dir: str = "/dev") -> list[dict[str, Any]]:
    return [{"name": n.name, "features": list(n.features), "gres": node_gres(n),
             "attributes": dict(n.attributes),
             "gpus": [{"minor": g.minor, "model": g.model, "type": g.gres_type,
                       "file": device_path(dev_dir, n.name, g.minor)} for g in n.gpus]}
            for n in inv.nodes]
