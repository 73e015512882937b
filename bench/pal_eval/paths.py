"""Where the harness finds the checkout and the PAL artifact's data (hal-uw/blox-pal, MIT)."""

from __future__ import annotations

import os
from pathlib import Path

#: the checkout bench/ belongs to
REPO = Path(__file__).resolve().parents[2]


def artifact_dir() -> Path:
    """The PAL artifact's data: $PAL_ARTIFACT_DIR, else the copy shipped in tests/data."""
    return Path(os.environ.get("PAL_ARTIFACT_DIR", REPO / "tests/data/pal-artifact"))


def sia_philly(artifact: Path, workload: int) -> Path:
    """One of the six Sia-Philly traces of the artifact."""
    return artifact / "traces" / "sia-philly" / f"workload-{workload}.csv"


def longhorn(artifact: Path) -> Path:
    """The artifact's Longhorn V100 profiles (the variability the simulator draws from)."""
    return artifact / "variability" / "longhorn"
