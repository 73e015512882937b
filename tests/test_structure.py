"""The layering rules of docs/architecture.md ("Rules we keep"), checked on the source.

Pure logic (placement, classification, the parsers, the simulator's core) never imports the
database layer, the CLI or `subprocess`: the simulator and the placement daemon call the same
code, the tests run it without a database or a cluster, and importing it stays cheap. Only the
CLI imports the CLI: everything else is reachable without click. Imports go one way: no module
imports one of a higher layer (LAYERS), and no chain of imports comes back to where it began,
so every module can be read, tested and imported knowing only what lies below it.

The evaluation harness (bench/pal_eval: the replay on a real cluster, the benchmarks' shared
parts) is checked with the product: it lies in a layer above the command line, so it may import
any of pal_slurm and nothing of pal_slurm may import it (the wheel ships pal_slurm alone).

The modules are read with `ast`, never imported, so a violation is reported even when the
import sits inside a function or under `if TYPE_CHECKING:`, and checking costs no imports.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import REPO
from tests.support.source_imports import (
    HARNESS,
    PACKAGE,
    imports_of,
    module_name,
    module_path,
    parents_of,
    within,
)

#: Modules that must stay pure, as paths under pal_slurm/ (a directory means every module in it).
PURE = (
    "placement/",
    "classification/",
    "jobs/",
    "ingest/",
    "gpu/simulated_fleet.py",
    "gpu/sim_specs.py",
    "gpu/sim_traits.py",
    "gpu/sim_physics.py",
    "simulate/event.py",
    "simulate/running.py",
    "simulate/round.py",
    "simulate/metrics.py",
    "simulate/estimates.py",
    "simulate/result.py",
    "simulate/tax.py",
    "simulate/shake.py",
    "simulate/fleets.py",
    "simulate/drain.py",
    "simulate/drift.py",
    "simulate/pacing.py",
    "simulate/learning.py",
    "simulate/traces.py",
    "simulate/sacct_trace.py",
    "simulate/trace_rows.py",
    "placer/holds.py",
    "placer/cluster_view.py",
    "placer/shapes.py",
    "placer/slurm_updates.py",
    "placer/refresh.py",
    "placer/cycle_report.py",
    "slurm/hostlist.py",
    "slurm/gres_detail.py",
    "slurm/gres_compare.py",
    "slurm/quarantine_model.py",
    "slurm/quarantine_plan.py",
    "slurm/quarantine_shapes.py",
    "placer/waits.py",
    "placer/ledger.py",
    "savings.py",
    "report/fairness.py",
    "numfmt.py",
)

#: The harness's pure modules, as paths under bench/pal_eval/: the replay's plan, its fleets and
#: its sacct export (tested without a cluster, and the prediction's inputs), its arms and the
#: prediction itself; the slow-slot experiment's workload and checks.
HARNESS_PURE = (
    "replay/plan.py",
    "replay/fleet.py",
    "replay/history.py",
    "replay/arms.py",
    "replay/prediction.py",
    "slow_slot_model.py",
)

#: Imports a pure module may not reach, directly or through the pal_slurm modules it imports,
#: and what each of them is.
FORBIDDEN = {
    "pal_slurm.db": "the database layer",
    "sqlalchemy": "the database layer",
    "pal_slurm.cli": "the CLI",
    "click": "the CLI",
    "subprocess": "running programs",
}

PURE_RULE = (
    "pure modules never import the database layer (pal_slurm.db, sqlalchemy), the CLI "
    "(pal_slurm.cli, click) or subprocess (docs/architecture.md, 'Rules we keep'); take the "
    "data as arguments and do the I/O in the caller (an area's service, the CLI, a *_store module)"
)
CLI_RULE = (
    "only pal_slurm/cli/ imports pal_slurm.cli: the CLI calls the rest of the package, never the "
    "other way round; move what is shared out of cli/ (an area's service, or the module that owns it)"
)

#: The layers, bottom first, each with the packages in it: a package (a folder under pal_slurm/,
#: or a module at its top) lies in one layer whole, so the folders show the layers. "pal_slurm"
#: covers the package root and the small modules at the top that every layer uses. A module
#: imports its own layer or lower ones.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # the package root and what every layer uses: errors, number formats, atomic writes, the
    # systemd notifier, the bounded metrics server, the benchmark sets
    ("base", ("pal_slurm",)),
    # what needs neither configuration nor a database: the placement vocabulary and policies,
    # classification, the import parsers, job classes and runtimes, the simulator, the Slurm and
    # GPU adapters
    ("core", ("pal_slurm.placement", "pal_slurm.classification", "pal_slurm.ingest", "pal_slurm.jobs",
              "pal_slurm.simulate", "pal_slurm.savings", "pal_slurm.slurm", "pal_slurm.gpu")),
    ("configuration", ("pal_slurm.config",)),
    # the schema, the migrations and every store (what reads and writes the tables)
    ("storage", ("pal_slurm.db",)),
    # the use cases that touch the database: classify, import, import job history
    ("services", ("pal_slurm.services",)),
    # the programs built on them: the placer, the profiler, the agent, reports, the demo
    ("programs", ("pal_slurm.placer", "pal_slurm.profiler", "pal_slurm.agent", "pal_slurm.report",
                  "pal_slurm.demo")),
    ("command line", ("pal_slurm.cli", "pal_slurm.__main__")),
    # the evaluation harness (bench/pal_eval, not in the wheel): the replay on a real cluster and
    # the benchmarks' parts; it uses the product, the product never uses it
    ("evaluation", ("pal_eval",)),
)

LAYER_RULE = (
    "a module imports only its own layer or lower ones (LAYERS in tests/test_structure.py, "
    "docs/architecture.md 'Rules we keep'): move what both need down, or pass it in from above"
)
CIRCLE_RULE = (
    "imports go one way (docs/architecture.md, 'Rules we keep'): move what both modules need into "
    "one of them, or into a module below both"
)

#: Modules outside pal_slurm/cli/ allowed to import it, and why.
CLI_IMPORTERS = {
    # `python -m pal_slurm` is the `pal` command itself.
    "pal_slurm.__main__",
}


def _pure_entries() -> list[Path]:
    return [PACKAGE / entry for entry in PURE] + [HARNESS / entry for entry in HARNESS_PURE]


def _pure_files() -> list[Path]:
    files: list[Path] = []
    for path in _pure_entries():
        files.extend(sorted(path.rglob("*.py")) if path.is_dir() else [path])
    return files


def _forbidden_reached(start: Path) -> Iterator[str]:
    """Each forbidden import `start` reaches, with the chain of pal_slurm modules leading to it
    (an import through a helper module pulls in the database just the same)."""
    start_name = module_name(start)
    via: dict[str, str | None] = {start_name: None}
    for parent in parents_of(start_name):
        via[parent] = start_name
    queue = list(via)
    while queue:
        current = queue.pop()
        path = module_path(current)
        if path is None:
            continue
        reported: set[tuple[int, str]] = set()
        for line, imported in imports_of(path):
            for prefix, what in FORBIDDEN.items():
                if within(imported, prefix) and (line, prefix) not in reported:
                    reported.add((line, prefix))
                    chain = [current]
                    while (step := via[chain[-1]]) is not None:
                        chain.append(step)
                    route = " -> ".join(reversed(chain))
                    yield f"{start_name} imports {prefix} ({what}) via {route} (line {line}: {imported})"
            if any(within(imported, prefix) for prefix in FORBIDDEN):
                continue  # reported above; what the database layer imports is its own business
            for module in (imported, *parents_of(imported)):
                if module not in via and module_path(module):
                    via[module] = current
                    queue.append(module)


def test_pure_module_list_is_current() -> None:
    """A renamed or moved pure module must be renamed here too, or the rule silently stops."""
    missing = [str(path.relative_to(REPO)) for path in _pure_entries() if not path.exists()]
    assert not missing, f"listed as pure but not found: {missing}"


@pytest.mark.parametrize("path", _pure_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_pure_modules_import_no_database_cli_or_subprocess(path: Path) -> None:
    violations = sorted(set(_forbidden_reached(path)))
    assert not violations, "\n".join(violations) + f"\nrule: {PURE_RULE}"


def test_only_the_cli_imports_the_cli() -> None:
    violations = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = module_name(path)
        if within(name, "pal_slurm.cli") or name in CLI_IMPORTERS:
            continue
        lines = sorted({line for line, imported in imports_of(path) if within(imported, "pal_slurm.cli")})
        violations.extend(f"{name} imports pal_slurm.cli (the CLI) at line {line}" for line in lines)
    assert not violations, "\n".join(violations) + f"\nrule: {CLI_RULE}"


HARNESS_RULE = (
    "the product never imports the evaluation harness (pal_eval) or the tests: the wheel ships "
    "pal_slurm alone, and a site runs what it ships; move what the product needs into pal_slurm "
    "(a pure package such as simulate/ or placement/), and let the harness import it from there"
)


def test_the_product_never_imports_the_harness_or_the_tests() -> None:
    violations = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for line, imported in sorted(set(imports_of(path))):
            if any(within(imported, outside) for outside in ("pal_eval", "tests", "conftest")):
                violations.append(f"{module_name(path)} imports {imported} at line {line}")
    assert not violations, "\n".join(violations) + f"\nrule: {HARNESS_RULE}"


def _all_modules() -> dict[str, Path]:
    """The product's modules and the harness's."""
    return {module_name(path): path for path in sorted([*PACKAGE.rglob("*.py"), *HARNESS.rglob("*.py")])}


def _import_graph() -> dict[str, dict[str, int]]:
    """module -> {pal_slurm or pal_eval module it imports: first line}, at any depth (inside
    functions and under TYPE_CHECKING too: such an import is still a dependency a reader has to
    follow)."""
    graph: dict[str, dict[str, int]] = {}
    for name, path in _all_modules().items():
        edges: dict[str, int] = {}
        for line, imported in imports_of(path):
            if imported != name and module_path(imported):
                edges.setdefault(imported, line)
        graph[name] = edges
    return graph


def _layer_of(module: str) -> int | None:
    best: tuple[int, int] | None = None  # (length of the covering name, layer)
    for rank, (_, names) in enumerate(LAYERS):
        for prefix in names:
            if within(module, prefix) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), rank)
    return None if best is None else best[1]


def test_layer_list_is_current() -> None:
    """Every module has a layer, and every name in LAYERS still names a module or a package."""
    modules = _all_modules()
    unplaced = sorted(m for m in modules if _layer_of(m) is None)
    assert not unplaced, f"modules in no layer of LAYERS (tests/test_structure.py): {unplaced}"
    stale = [p for _, names in LAYERS for p in names if not any(within(m, p) for m in modules)]
    assert not stale, f"names in LAYERS that no module has any more: {stale}"


def _package_of(module: str) -> str:
    """The top-level package a module belongs to: pal_slurm.placer.cycle -> pal_slurm.placer;
    a module at the top is its own (pal_slurm.config); the root's small modules are pal_slurm's;
    the harness is one package (pal_eval.replay.plan -> pal_eval)."""
    parts = module.split(".")
    if parts[0] != "pal_slurm":
        return parts[0]
    top = ".".join(parts[:2])
    if len(parts) == 1 or module_path(top) is None:
        return "pal_slurm"
    is_folder = (REPO.joinpath(*parts[:2]) / "__init__.py").is_file()
    return top if is_folder or any(top == n for _, names in LAYERS for n in names) else "pal_slurm"


def test_layers_name_whole_packages() -> None:
    """A layer holds packages whole (no package split across layers), so the folders show the
    layers; and every top-level package (a folder) is named."""
    named = {n for _, names in LAYERS for n in names}
    partial = sorted(n for n in named if n != "pal_slurm" and _package_of(n) != n)
    assert not partial, f"LAYERS names part of a package (name the package whole): {partial}"
    folders = {f"pal_slurm.{p.parent.name}" for p in PACKAGE.glob("*/__init__.py")} | {"pal_eval"}
    unnamed = sorted(folders - named)
    assert not unnamed, f"packages under pal_slurm/ in no layer of LAYERS: {unnamed}"


def _package_graph() -> dict[str, dict[str, int]]:
    """top-level package -> {package it imports: 1}: the module graph seen from the folders."""
    graph: dict[str, dict[str, int]] = {}
    for module, edges in _import_graph().items():
        own = _package_of(module)
        graph.setdefault(own, {})
        for imported in edges:
            theirs = _package_of(imported)
            if theirs != own:
                graph[own][theirs] = 1
                graph.setdefault(theirs, {})
    return graph


def test_packages_import_each_other_one_way() -> None:
    """No circle between packages either (db -> classification -> db was one: a service beside a
    pure core). The modules behind the first edge of a circle are named, to show where to cut."""
    graph = _package_graph()
    circle = _circle(graph)
    if circle is None:
        return
    a, b = circle[0], circle[1]
    why = sorted(f"{m} -> {i}" for m, edges in _import_graph().items() if _package_of(m) == a
                 for i in edges if _package_of(i) == b)[:5]
    raise AssertionError("package import circle: " + " -> ".join(circle) + f"\n{a} -> {b}: {why}\nrule: {CIRCLE_RULE}")


def test_no_module_imports_a_higher_layer() -> None:
    violations = []
    for module, edges in sorted(_import_graph().items()):
        own = _layer_of(module)
        for imported, line in sorted(edges.items()):
            theirs = _layer_of(imported)
            if own is not None and theirs is not None and theirs > own:
                violations.append(f"{module} (layer {LAYERS[own][0]!r}) imports {imported} "
                                  f"(layer {LAYERS[theirs][0]!r}) at line {line}")
    assert not violations, "\n".join(violations) + f"\nrule: {LAYER_RULE}"


def _circle(graph: dict[str, dict[str, int]]) -> list[str] | None:
    """One import circle (its modules in import order, the first repeated at the end), or None.
    A depth-first walk: a module met again while still on the walk's path closes a circle."""
    done: set[str] = set()
    for start in sorted(graph):
        if start in done:
            continue
        path, pending = [start], [iter(sorted(graph[start]))]
        while pending:
            nxt = next(pending[-1], None)
            if nxt is None:
                done.add(path.pop())
                pending.pop()
            elif nxt in path:
                return path[path.index(nxt):] + [nxt]
            elif nxt not in done:
                path.append(nxt)
                pending.append(iter(sorted(graph[nxt])))
    return None


def test_the_import_graph_has_no_circle() -> None:
    circle = _circle(_import_graph())
    assert circle is None, "import circle: " + " -> ".join(circle or ()) + f"\nrule: {CIRCLE_RULE}"


def test_the_circle_check_finds_one() -> None:
    """The check itself, on a small graph: a -> b -> c -> a is found, a diamond is not a circle."""
    assert _circle({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {}}) == ["a", "b", "c", "a"]
    assert _circle({"a": {"b": 1, "c": 1}, "b": {"d": 1}, "c": {"d": 1}, "d": {}}) is None
