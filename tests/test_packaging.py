"""setup.cfg ships every directory of Python code as a package: a directory it misses is
installed as data with a setuptools warning per file ("Package ... is absent from the
`packages` configuration": 80 lines in `make demo` before), or not at all."""

from __future__ import annotations

import configparser
from pathlib import Path

from setuptools import find_namespace_packages, find_packages

REPO = Path(__file__).resolve().parent.parent


def test_every_directory_with_python_code_is_a_package() -> None:
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    how = cfg["options"]["packages"].strip()
    include = [p.strip() for p in cfg["options.packages.find"]["include"].replace("\n", ",").split(",") if p.strip()]
    exclude = [p.strip() for p in cfg["options.packages.find"].get("exclude", "").replace("\n", ",").split(",")
               if p.strip()]
    find = {"find_namespace:": find_namespace_packages, "find:": find_packages}[how]
    shipped = set(find(where=str(REPO), include=include, exclude=exclude))
    with_code = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "pal_slurm").rglob("*.py")}
    assert with_code - shipped == set(), f"not packaged: {sorted(with_code - shipped)}"
    assert not any("__pycache__" in p for p in shipped)
    assert {"pal_slurm.db.migrations", "pal_slurm.db.migrations.versions", "pal_slurm.replay"} <= shipped
