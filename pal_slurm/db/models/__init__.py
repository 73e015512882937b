"""The schema, as SQLAlchemy 2 declarative models: one `Base.metadata`, which Alembic's
environment and the schema test read, with every table in it once this package is imported.

Changes to these models ship only through an Alembic migration
(pal_slurm/db/migrations/versions); a test compares the two and fails on drift.
Identity of a GPU is its UUID: nodes and slots change, the UUID does not. A GPU that
a file names only by its slot has the uuid ``slot:<node>:<device>`` until its real UUID is
imported; `pal_slurm.db.gpu_identity` then merges the two (docs/import-formats.md, "GPU identity").
"""

# in the order the tables were first defined (Base.metadata keeps it)
from pal_slurm.db.models.base import NAMING, Base, UtcDateTime, utcnow
from pal_slurm.db.models.measurements import Benchmark, BenchmarkFailure, Gpu, Node, ProfileRun
from pal_slurm.db.models.classification import (
    ClassificationBin,
    ClassificationResult,
    ClassificationRun,
    GpuClass,
    GpuPassiveSpeed,
    JobClass,
)
from pal_slurm.db.models.placements import JobAccounting, Placement
from pal_slurm.db.models.jobs import ClassRule, GpuFlag, JobHistory, JobIdentity, JobProfile, JobSensitivity

__all__ = [
    "NAMING", "Base", "UtcDateTime", "utcnow",
    "Benchmark", "BenchmarkFailure", "Gpu", "Node", "ProfileRun",
    "ClassificationBin", "ClassificationResult", "ClassificationRun", "GpuClass", "GpuPassiveSpeed", "JobClass",
    "JobAccounting", "Placement",
    "ClassRule", "GpuFlag", "JobHistory", "JobIdentity", "JobProfile", "JobSensitivity",
]
