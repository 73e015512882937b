"""What a module of the product or the harness imports, read from its source with `ast`, never
imported: so an import inside a function or under `if TYPE_CHECKING:` counts, and reading costs
no imports. The layering rules (tests/test_structure.py) and the bench-script rule
(tests/test_repository_layout.py) read the source through it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

from conftest import REPO

PACKAGE = REPO / "pal_slurm"
#: the evaluation harness: a package beside the product, in no wheel (setup.cfg ships pal_slurm only)
HARNESS = REPO / "bench" / "pal_eval"
#: the folder each top-level package's module names start from
ROOTS = {"pal_slurm": REPO, "pal_eval": HARNESS.parent}


def module_name(path: Path) -> str:
    root = ROOTS["pal_eval"] if path.is_relative_to(HARNESS) else REPO
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_path(name: str) -> Path | None:
    """The file of a pal_slurm or pal_eval module, or None for anything else (a third-party
    module, a name)."""
    root = ROOTS.get(name.split(".")[0])
    if root is None:
        return None
    base = root.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@cache
def imports_of(path: Path) -> tuple[tuple[int, str], ...]:
    """Every (line, module) the file imports, at any depth. `from a import b` yields both `a`
    and `a.b`, since b may be a module (`from pal_slurm import db`)."""
    name = module_name(path)
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


def within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def parents_of(module: str) -> Iterator[str]:
    """The packages importing `module` runs first: pal_slurm, pal_slurm.placement, ..."""
    parts = module.split(".")
    for i in range(1, len(parts)):
        yield ".".join(parts[:i])
