"""setup.cfg ships every directory of Python code as a package: a directory it misses is
installed as data with a setuptools warning per file ("Package ... is absent from the
`packages` configuration": 80 lines in `make demo` before), or not at all."""

from __future__ import annotations

import ast
import configparser
from pathlib import Path

from setuptools import find_namespace_packages, find_packages

REPO = Path(__file__).resolve().parent.parent


def _setup_cfg() -> configparser.ConfigParser:
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    return cfg


def _listed(cfg: configparser.ConfigParser, section: str, key: str) -> list[str]:
    return [p.strip() for p in cfg[section].get(key, "").replace("\n", ",").split(",") if p.strip()]


def shipped_packages() -> set[str]:
    """The packages the wheel holds, found as setuptools finds them from setup.cfg."""
    cfg = _setup_cfg()
    find = {"find_namespace:": find_namespace_packages, "find:": find_packages}[cfg["options"]["packages"].strip()]
    return set(find(where=str(REPO), include=_listed(cfg, "options.packages.find", "include"),
                    exclude=_listed(cfg, "options.packages.find", "exclude")))


def test_every_directory_with_python_code_is_a_package() -> None:
    shipped = shipped_packages()
    with_code = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "pal_slurm").rglob("*.py")}
    assert with_code - shipped == set(), f"not packaged: {sorted(with_code - shipped)}"
    assert not any("__pycache__" in p for p in shipped)
    assert {"pal_slurm.db.migrations", "pal_slurm.db.migrations.versions"} <= shipped


#: Shipped modules that start the source checkout's test cluster (tests/services/slurm-cluster.sh:
#: munge, slurmctld, slurmd as root), and why: `pal demo --slurm` is the demo's real-Slurm leg, run
#: from a checkout (it finds the script there and refuses without one).
STARTS_SLURM = {"pal_slurm/demo/slurm_cluster.py"}


def test_the_wheel_holds_no_evaluation_harness() -> None:
    """The wheel holds what a site runs: no replay, no benchmark, nothing of bench/ (the harness,
    pal_eval, stays in the checkout: bench/pal_eval), and no module that starts Slurm daemons but
    the demo's."""
    shipped = shipped_packages()
    harness = sorted(p for p in shipped if "replay" in p.split(".") or p.split(".")[0] in ("pal_eval", "bench"))
    assert not harness, f"the wheel would ship the evaluation harness: {harness}"
    cfg = _setup_cfg()
    data = " ".join(cfg["options.data_files"].values()) + " ".join(cfg["options.package_data"].values())
    assert "bench" not in data, f"setup.cfg ships files of bench/: {data}"
    starters = sorted(str(f.relative_to(REPO)) for p in shipped for f in REPO.joinpath(*p.split(".")).glob("*.py")
                      if any("slurm-cluster.sh" in text for text in _code_strings(f)))
    assert set(starters) <= STARTS_SLURM, f"shipped modules that start the test cluster: {starters}"


def _code_strings(path: Path) -> list[str]:
    """The string constants of a module's code, its docstrings left out (help texts may name things)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {id(body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and (body := node.body) and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)}
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docs]
