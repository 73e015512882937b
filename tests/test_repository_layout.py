"""The repository's layout rules of docs/architecture.md ("Rules we keep") that are not about
imports between layers (those: test_structure.py): a bench script is an entry point into
pal_eval, the repository root holds what the layout names, and no sbatch the code runs leaves
its output in the working directory.

The files are read with `ast` and `git ls-files`, never imported or run.
"""

from __future__ import annotations

import ast

import pytest

from conftest import REPO
from tests.support.source_imports import PACKAGE, imports_of


# -- bench/*.py are entry points ---------------------------------------------------------------------

#: How long a function of a bench script may be: parsing its arguments and one call to pal_eval.
BENCH_FUNCTION_LINES = 60
BENCH_RULE = (
    "a bench script parses its arguments and calls pal_eval (bench/pal_eval): no sys.path edits (python "
    "bench/X.py has bench/ on its path; pal_slurm is installed, or on PYTHONPATH), no imports of another bench "
    "script, and what it does lives in pal_eval as named steps (docs/architecture.md, 'The evaluation harness')"
)


def test_bench_scripts_are_entry_points() -> None:
    """bench/gpu/check.py is not one of them: it runs on GPU nodes from a bare checkout, where
    pal_slurm is not installed, and finds the profiler's core by its path."""
    scripts = sorted((REPO / "bench").glob("*.py"))
    names = {p.stem for p in scripts}
    violations = []
    for path in scripts:
        rel = path.relative_to(REPO).as_posix()
        tree = ast.parse(path.read_text(), filename=rel)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "path" and getattr(node.value, "id", "") == "sys":
                violations.append(f"{rel}:{node.lineno} edits sys.path")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if lines > BENCH_FUNCTION_LINES:
                    violations.append(f"{rel}:{node.lineno} {node.name}() is {lines} lines")
        for line, imported in imports_of(path):
            if imported.split(".")[0] in names:
                violations.append(f"{rel}:{line} imports another bench script ({imported})")
    assert not violations, "\n".join(violations) + f"\nrule: {BENCH_RULE}"


# -- the repository root holds what the layout names ------------------------------------------------

#: The repository root's files and folders (README.md, "Layout"); anything else there is a stray.
ROOT_ENTRIES = frozenset({
    ".ci", ".gitignore", "Makefile", "README.md", "bench", "docs", "pal_slurm", "profiler", "pyproject.toml",
    "setup.cfg", "spank_hooks", "sql", "systemd", "tests",
})


def test_the_repository_root_holds_only_what_the_layout_names() -> None:
    """No committed stray at the root (a job's slurm-<id>.out from an sbatch without --output run
    from the checkout, an editor file), and no slurm-*.out left there by a test run."""
    import subprocess

    listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, timeout=60)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    committed = {line.split("/", 1)[0] for line in listed.stdout.splitlines() if line}
    assert committed <= ROOT_ENTRIES, f"committed at the repository root but not in its layout: {sorted(committed - ROOT_ENTRIES)}"
    job_outputs = sorted(p.name for p in REPO.glob("slurm-*.out"))
    assert not job_outputs, f"Slurm job output at the repository root (an sbatch without --output): {job_outputs}"


#: Functions allowed to build an sbatch command line without naming the output: they add one.
SBATCH_HELPERS = {("tests/slurm/conftest.py", "submit")}


def _names_output(items: list[ast.expr]) -> bool:
    for item in items:
        text = item.value if isinstance(item, ast.Constant) else (
            item.values[0].value if isinstance(item, ast.JoinedStr) and item.values
            and isinstance(item.values[0], ast.Constant) else None)
        if isinstance(text, str) and (text in ("-o", "--output") or text.startswith("--output=")):
            return True
    return False


def test_every_sbatch_the_code_runs_names_its_output() -> None:
    """sbatch without --output writes slurm-<id>.out into the working directory, which for the
    tests and the tools is the checkout: every sbatch argument list names its output."""
    bare: list[str] = []
    for path in sorted([*PACKAGE.rglob("*.py"), *(REPO / "tests").rglob("*.py"), *(REPO / "bench").rglob("*.py")]):
        rel = path.relative_to(REPO).as_posix()
        tree = ast.parse(path.read_text(), filename=rel)
        for func in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
            for node in ast.walk(func):
                if not (isinstance(node, ast.List) and node.elts and isinstance(node.elts[0], ast.Constant)
                        and node.elts[0].value == "sbatch" and len(node.elts) > 2):
                    continue
                if (rel, func.name) not in SBATCH_HELPERS and not _names_output(node.elts):
                    bare.append(f"{rel}:{node.lineno} ({func.name})")
    assert not bare, f"sbatch without --output (its slurm-<id>.out lands in the working directory): {bare}"
