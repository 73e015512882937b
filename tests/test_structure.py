"""The layering rules of docs/architecture.md ("Rules we keep"), checked on the source.

Pure logic (placement, classification, the parsers, the simulator's core) never imports the
database layer, the CLI or `subprocess`: the simulator and the placement daemon call the same
code, the tests run it without a database or a cluster, and importing it stays cheap. Only the
CLI imports the CLI: everything else is reachable without click.

The modules are read with `ast`, never imported, so a violation is reported even when the
import sits inside a function or under `if TYPE_CHECKING:`, and checking costs no imports.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

from conftest import REPO

PACKAGE = REPO / "pal_slurm"

#: Modules that must stay pure, as paths under pal_slurm/ (a directory means every module in it).
PURE = (
    "placement/",
    "classify.py",
    "classify_fleet.py",
    "ingest/records.py",
    "ingest/artifact_csv.py",
    "ingest/jsonl.py",
    "simulate/event.py",
    "simulate/round.py",
    "simulate/metrics.py",
    "simulate/estimates.py",
    "simulate/result.py",
    "simulate/tax.py",
    "simulate/shake.py",
    "simulate/fleets.py",
    "simulate/drain.py",
    "replay/plan.py",
    "replay/fleet.py",
    "placer/holds.py",
    "placer/cluster_view.py",
    "placer/shapes.py",
    "placer/slurm_updates.py",
    "placer/ledger.py",
    "savings.py",
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
    "data as arguments and do the I/O in the caller (services, the CLI, a *_store module)"
)
CLI_RULE = (
    "only pal_slurm/cli/ imports pal_slurm.cli: the CLI calls the rest of the package, never the "
    "other way round; move what is shared out of cli/ (services, or the module that owns it)"
)

#: Modules outside pal_slurm/cli/ allowed to import it, and why.
CLI_IMPORTERS = {
    # `python -m pal_slurm` is the `pal` command itself.
    "pal_slurm.__main__",
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _module_path(name: str) -> Path | None:
    """The file of a pal_slurm module, or None for anything else (a third-party module, a name)."""
    base = REPO.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@cache
def _imports(path: Path) -> tuple[tuple[int, str], ...]:
    """Every (line, module) the file imports, at any depth. `from a import b` yields both `a`
    and `a.b`, since b may be a module (`from pal_slurm import db`)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: `from . import x`, `from ..db import store`
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{anchor}.{node.module}" if node.module else anchor
            else:
                module = node.module or ""
            found.append((node.lineno, module))
            found.extend((node.lineno, f"{module}.{alias.name}") for alias in node.names)
    return tuple(found)


def _matches(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _parents(module: str) -> Iterator[str]:
    """The packages importing `module` runs first: pal_slurm, pal_slurm.placement, ..."""
    parts = module.split(".")
    for i in range(1, len(parts)):
        yield ".".join(parts[:i])


def _pure_files() -> list[Path]:
    files: list[Path] = []
    for entry in PURE:
        path = PACKAGE / entry
        files.extend(sorted(path.rglob("*.py")) if entry.endswith("/") else [path])
    return files


def _forbidden_reached(start: Path) -> Iterator[str]:
    """Each forbidden import `start` reaches, with the chain of pal_slurm modules leading to it
    (an import through a helper module pulls in the database just the same)."""
    start_name = _module_name(start)
    via: dict[str, str | None] = {start_name: None}
    for parent in _parents(start_name):
        via[parent] = start_name
    queue = list(via)
    while queue:
        current = queue.pop()
        path = _module_path(current)
        if path is None:
            continue
        reported: set[tuple[int, str]] = set()
        for line, imported in _imports(path):
            for prefix, what in FORBIDDEN.items():
                if _matches(imported, prefix) and (line, prefix) not in reported:
                    reported.add((line, prefix))
                    chain = [current]
                    while (step := via[chain[-1]]) is not None:
                        chain.append(step)
                    route = " -> ".join(reversed(chain))
                    yield f"{start_name} imports {prefix} ({what}) via {route} (line {line}: {imported})"
            if any(_matches(imported, prefix) for prefix in FORBIDDEN):
                continue  # reported above; what the database layer imports is its own business
            for module in (imported, *_parents(imported)):
                if module.startswith("pal_slurm") and module not in via and _module_path(module):
                    via[module] = current
                    queue.append(module)


def test_pure_module_list_is_current() -> None:
    """A renamed or moved pure module must be renamed here too, or the rule silently stops."""
    missing = [entry for entry in PURE if not (PACKAGE / entry).exists()]
    assert not missing, f"listed as pure but not found under pal_slurm/: {missing}"


@pytest.mark.parametrize("path", _pure_files(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_pure_modules_import_no_database_cli_or_subprocess(path: Path) -> None:
    violations = sorted(set(_forbidden_reached(path)))
    assert not violations, "\n".join(violations) + f"\nrule: {PURE_RULE}"


def test_only_the_cli_imports_the_cli() -> None:
    violations = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = _module_name(path)
        if _matches(name, "pal_slurm.cli") or name in CLI_IMPORTERS:
            continue
        lines = sorted({line for line, imported in _imports(path) if _matches(imported, "pal_slurm.cli")})
        violations.extend(f"{name} imports pal_slurm.cli (the CLI) at line {line}" for line in lines)
    assert not violations, "\n".join(violations) + f"\nrule: {CLI_RULE}"
