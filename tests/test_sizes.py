"""Size limits on the code: no module over 400 lines, no function over 60 (docs/architecture.md,
"Rules we keep").

Why: a module is the unit a newcomer opens to learn one job, and a function the unit they hold in
their head; past these sizes both stopped saying what they do (the placer's cycle once held 38
functions, the simulator's loop was one 143-line function with 25 variables). The limits apply to
everything that runs: the product, the profiler's programs, the evaluation harness and the
tests. The database migrations are exempt: each is a fixed record of one schema change, written
once and never read as code again.

Lines are counted as `wc -l` does; a function runs from its `def` line to its last line
(decorators not counted), as `ast` reports them.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from conftest import REPO

MODULE_LINES = 400
FUNCTION_LINES = 60
#: the trees the limits apply to, relative to the repository root
TREES = ("pal_slurm", "profiler", "bench", "spank_hooks", "tests")
#: what the limits leave alone, and why (the module doc)
EXEMPT = ("pal_slurm/db/migrations/",)


def _sources() -> Iterator[Path]:
    for tree in TREES:
        for path in sorted((REPO / tree).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if not rel.startswith(EXEMPT) and "__pycache__" not in path.parts:
                yield path


def oversized(path: Path, root: Path = REPO) -> list[str]:
    """What in one file is over the limits, one line per finding ("file: what", file relative to root)."""
    rel = path.relative_to(root).as_posix()
    text = path.read_text()
    found = []
    if text.count("\n") > MODULE_LINES:
        found.append(f"{rel}: {text.count(chr(10))} lines (limit {MODULE_LINES})")
    for node in ast.walk(ast.parse(text, filename=rel)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
            if lines > FUNCTION_LINES:
                found.append(f"{rel}:{node.lineno} {node.name}() is {lines} lines (limit {FUNCTION_LINES})")
    return found


def test_no_module_or_function_is_over_its_limit() -> None:
    found = [f for path in _sources() for f in oversized(path)]
    assert not found, "split along a seam (a module per job, a function per step):\n" + "\n".join(found)


def test_the_size_check_finds_a_long_function_and_a_long_module(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(FUNCTION_LINES))
    probe = tmp_path / "probe.py"
    probe.write_text(f"def long():\n{body}\n")
    assert oversized(probe, tmp_path) == [f"probe.py:1 long() is {FUNCTION_LINES + 1} lines (limit {FUNCTION_LINES})"]
    probe.write_text("\n".join(f"x{i} = {i}" for i in range(MODULE_LINES + 1)) + "\n")
    assert oversized(probe, tmp_path) == [f"probe.py: {MODULE_LINES + 1} lines (limit {MODULE_LINES})"]
    probe.write_text(f"def short():\n{body[: body.rindex(chr(10))]}\n")
    assert oversized(probe, tmp_path) == [], "a function of exactly the limit passes"
