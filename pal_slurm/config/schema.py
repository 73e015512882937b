"""The configuration's schema: one pydantic model per section of pal.toml, each setting with its
default and its check, and `PalConfig`, the whole.

Why apart from the loading (pal_slurm.config): what a setting means and what values it takes is
read and changed far more often than how the file, the environment and the credentials are
found; nothing here reads a file or the environment (default_data_dir is given the environment).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from pal_slurm.benchmark_sets import BENCHMARK_SETS, DEFAULT_SET, known_benchmarks, set_of
from pal_slurm.placement.model import DEFAULT_POLICY, JOB_CLASSES, NOISE, WAIT_FRACTION
from pal_slurm.placement.table import policy_names

if TYPE_CHECKING:
    from pal_slurm.classification.actions import ActionPolicy

def job_classes_of(benchmark_set: str) -> dict[str, dict[str, str]]:
    """The [job_classes] a benchmark set gives by default (pal_slurm/benchmark_sets.py)."""
    return {k: {"benchmark": b, "description": d} for k, (b, d) in BENCHMARK_SETS[benchmark_set].job_classes.items()}


#: what `pal profile run` measures: the default
DEFAULT_JOB_CLASSES: dict[str, dict[str, str]] = job_classes_of(DEFAULT_SET)


def _check_benchmark(value: str) -> str:
    """A benchmark name a class or [report] may read: one some supported source produces."""
    if set_of(value) is None:
        names = known_benchmarks()
        raise ValueError(f"unknown benchmark {value!r}{did_you_mean(value, names)}: no source measures it "
                         f"(pal profile run: {', '.join(BENCHMARK_SETS['profiler'].benchmarks)}; the PAL "
                         f"artifact's: {', '.join(BENCHMARK_SETS['pal-artifact'].benchmarks)})")
    return value


def default_data_dir(env: Mapping[str, str] | None = None, *, is_root: bool | None = None) -> Path:
    """/var/lib/pal for root (a service), the XDG data dir for everyone else (a user trying it out)."""
    env = os.environ if env is None else env
    if is_root is None:
        is_root = os.geteuid() == 0
    if is_root:
        return Path("/var/lib/pal")
    xdg = env.get("XDG_DATA_HOME") or str(Path(env.get("HOME", "~")).expanduser() / ".local" / "share")
    return Path(xdg) / "pal"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DatabaseConfig(_Section):
    url: str | None = Field(default=None, description="SQLAlchemy URL; default: SQLite file in the data dir")
    #: a credentials file whose one line is the URL (mode 0640 root:pal), instead of `url`: one
    #: pal.toml for every host, each host's own login in its own file (the GPU nodes' roles)
    url_file: Path | None = None
    echo: bool = False
    connect_timeout_s: int = Field(default=10, ge=1, le=600)
    #: how long a migration's ALTER waits for a table lock before `pal db upgrade` gives up (not
    #: queued behind a long reader for ever, with the placer's reads queued behind it)
    migration_lock_timeout_s: float = Field(default=5.0, ge=0.1, le=3600)


class ClassificationConfig(_Section):
    min_runs: int = Field(default=3, ge=1)
    max_bins: int = Field(default=8, ge=1, le=64)
    outlier_z: float = Field(default=3.5, gt=0)
    outlier_min_excess: float = Field(default=0.10, ge=0)
    hysteresis: float = Field(default=0.0, ge=0)
    min_bin_gap: float = Field(default=0.01, ge=0)
    #: shrink (per-GPU factors, bins split down to measurement noise), bic or pal-k2: docs/classification.md
    method: Literal["shrink", "bic", "pal-k2"] = "shrink"
    #: a run more than this many times off its GPU's own median is dropped as broken (0 = off)
    run_ratio: float = Field(default=10.0, ge=0)
    #: whose benchmark names the job classes read by default: "profiler" (what `pal profile run`
    #: measures) or "pal-artifact" (the PAL artifact's profiles): pal_slurm/benchmark_sets.py
    benchmark_set: Literal["profiler", "pal-artifact"] = Field(
        default=DEFAULT_SET, description="the default [job_classes] and [report] compute_benchmarks")
    #: passive speed, each GPU's factor learned from its finished jobs' run times (`pal gpus learn`,
    #: docs/classification.md): off (not learned), flag (learned, shown, and fail-slow GPUs flagged
    #: for re-profiling) or use (also placed by, where a GPU's evidence suffices)
    passive: Literal["off", "flag", "use"] = "flag"
    passive_window_days: float = Field(default=30.0, gt=0, description="finished jobs of the last N days count")
    passive_min_paced: int = Field(default=3, ge=1, description="jobs a GPU must have paced for an estimate")
    passive_use_min_paced: int = Field(default=10, ge=1, description="passive = use: jobs a GPU must have paced "
                                                                    "before placement takes its passive factor")
    #: the benchmark factor's own uncertainty (relative) when a passive estimate is set beside it
    benchmark_noise: float = Field(default=0.02, ge=0, lt=1)
    failslow_ratio: float = Field(default=1.3, gt=1, description="the least slowdown fail-slow flags look for")
    failslow_max_ratio: float = Field(default=2.0, gt=1, description="the largest slowdown the fail-slow CUSUM fits "
                                                                     "(= failslow_ratio: a fixed ratio)")
    failslow_threshold: float = Field(default=12.0, gt=0, description="the CUSUM's threshold (log-likelihood)")
    failslow_sigma: float = Field(default=0.05, gt=0, description="run-to-run noise of a job's log run time")

    @field_validator("run_ratio")
    @classmethod
    def _run_ratio(cls, value: float) -> float:
        """What ClassifyParams takes: refused here, the error names the key, not pal classify later."""
        if not (value == 0 or 1 < value < math.inf):
            raise ValueError(f"must be 0 (off) or a finite number > 1, got {value}")
        return value


class IngestConfig(_Section):
    """[ingest]: plausibility checks of `pal profile import` (pal_slurm.ingest.validate has the rule)."""

    max_factor: float = Field(default=10.0, gt=1, description="a score more than this many times off its "
                              "(model x benchmark) group's running median, either way, is suspect")
    keep_suspect: bool = Field(default=False, description="store suspect scores quarantined instead of leaving "
                               "them out (never classified either way)")


class JobClassConfig(_Section):
    benchmark: str = Field(min_length=1)
    description: str = ""

    @field_validator("benchmark")
    @classmethod
    def _benchmark(cls, value: str) -> str:
        return _check_benchmark(value)


class LoggingConfig(_Section):
    """[logging]: how much `pal` logs to stderr (the journal, for the services) without -v or --debug."""

    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        default="WARNING", description="applies from when a command reads the configuration; -v, -vv, --debug win")


class ReportConfig(_Section):
    """[report]: the graded action each outlier GPU gets (pal_slurm.classification.actions; docs/admin-guide.md)."""

    outlier_action: str = Field(default="run `dcgmi diag -r 3` on it, then re-profile",
                                description="what the drain action says to do once the node is drained")
    drain_perfvar: float = Field(default=1.3, gt=1.0,
                                 description="an outlier this slow on a compute benchmark is drained")
    compute_benchmarks: list[str] | None = Field(
        default=None, description="benchmarks on which drain_perfvar drains; empty: the benchmark set's")
    stale_after_days: float = Field(default=30.0, gt=0,
                                    description="an outlier whose last run is older is re-profiled first")
    noisy_spread: float = Field(default=0.10, gt=0,
                                description="an outlier whose runs spread wider (IQR / median) is re-profiled")
    drain_ecc_uncorrected: int = Field(default=1, ge=0,
                                       description="uncorrected ECC errors that drain an outlier's node (0: never)")
    drain_retired_pages: int = Field(default=1, ge=0,
                                     description="retired memory pages that drain an outlier's node (0: never)")

    @field_validator("compute_benchmarks")
    @classmethod
    def _compute_benchmarks(cls, value: list[str] | None) -> list[str] | None:
        if value is not None:
            for name in value:
                _check_benchmark(name)
        return value

    def policy(self) -> "ActionPolicy":
        from pal_slurm.classification.actions import ActionPolicy

        compute = self.compute_benchmarks if self.compute_benchmarks is not None else \
            BENCHMARK_SETS[DEFAULT_SET].compute_benchmarks
        return ActionPolicy(drain_perfvar=self.drain_perfvar, compute_benchmarks=tuple(compute),
                            stale_after_days=self.stale_after_days, noisy_spread=self.noisy_spread,
                            drain_ecc_uncorrected=self.drain_ecc_uncorrected,
                            drain_retired_pages=self.drain_retired_pages, diagnostics=self.outlier_action)


class JobsConfig(_Section):
    """[jobs]: learning job classes from job profiles (pal_slurm.jobs.sensitivity documents the rule)."""

    thresholds: dict[str, float] = Field(
        default_factory=lambda: {"A": 0.50, "B": 0.35, "C": 0.20},
        description="minimum compute score per class, most sensitive first; the last class takes the rest",
    )
    min_samples: int = Field(default=300, ge=1, description="GPU-samples a fingerprint needs before it gets a class")
    history: int = Field(default=20, ge=1, description="newest job profiles per fingerprint that count")
    runtime_min_jobs: int = Field(default=3, ge=1, description="past runs a fingerprint, or a user + job name of "
                                                               "the imported sacct history, needs before its "
                                                               "runtime is learned")
    default_class: str = Field(default="A", min_length=1, description="class of a job nothing is known about")
    user_class: Literal["any", "lower", "off"] = Field(
        default="lower", description="a class a user declares (--pal-class, pal:class=): any: taken; lower: taken "
                                     "only when no more sensitive than the rules' or learned class; off: ignored")

    @field_validator("default_class")
    @classmethod
    def _default_class(cls, value: str) -> str:
        if value not in JOB_CLASSES:
            raise ValueError(f"unknown job class {value!r}; the classes are {', '.join(JOB_CLASSES)}")
        return value


class AgentConfig(_Section):
    """[agent]: the node telemetry agent (`pal agent`, docs/agent.md)."""

    interval_s: float = Field(default=1.0, ge=0.05, le=60)
    backend: Literal["auto", "nvml", "sim"] = "auto"
    node: str = Field(default="", description="node name; empty: the short host name")
    jobmap_dir: str = Field(default="/run/pal/jobs", description="where pal-prolog.sh writes; %n = node name")
    gpu_id: Literal["minor", "index"] = Field(default="minor", description="what the GPU ids in mapping files are")
    metrics_address: str = Field(default="127.0.0.1", description="address the metrics port listens on: the "
                                                                  "scrape network's; 0.0.0.0: every one")
    metrics_port: int = Field(default=9477, ge=0, le=65535, description="0 turns the metrics endpoint off")
    pending_max: int = Field(default=10000, ge=1, description="job profiles/flags kept while the database is down")
    retry_min_s: float = Field(default=1.0, gt=0)
    retry_max_s: float = Field(default=300.0, gt=0)
    facts_refresh_s: float = Field(default=600.0, ge=1, description="how often classes/scores are re-read")
    drift_margin: float = Field(default=0.05, ge=0, lt=1)
    drift_minutes: int = Field(default=10, ge=1)
    drift_load_pct: float = Field(default=80.0, ge=0, le=100)
    state_file: str = Field(default="", description="empty: <data_dir>/agent-state.json")


class PlacerConfig(_Section):
    """The placement daemon on the controller (`pal placer`)."""

    mode: Literal["observe", "enforce"] = Field(default="observe", description="observe: log only; enforce: hold and place")
    policy: str = Field(default=DEFAULT_POLICY, description="placement policy (see `pal simulate --help`)")
    interval_s: float = Field(default=2.0, gt=0, le=300, description="seconds between cycles")
    state_file: str = Field(default="/var/lib/pal/placer/filter-state",
                            description="the file job_submit.lua reads; its directory must be the placer's alone")
    stale_after_s: int = Field(default=30, ge=5, description="heartbeat age after which the filter stops holding")
    replan_after_s: float = Field(default=120.0, gt=0, description="re-plan a released job that has not started")
    max_hold_s: float = Field(default=3600.0, gt=0, description="release a held job unchanged after this long")
    order: Literal["slurm", "fifo"] = Field(
        default="slurm", description="order held jobs are served in: slurm (PriorityTier, priority, submit) or fifo")
    locality_penalty: float = Field(default=1.7, ge=1.0, le=100.0,
                                    description="lambda: slowdown a job pays across nodes (PAL's trade-off)")
    wait_fraction: float = Field(default=WAIT_FRACTION, ge=0, le=100,
                                 description="a job may wait for better GPUs up to this fraction of its estimate "
                                             "(0: never wait)")
    max_wait_s: float | None = Field(default=None, ge=0,
                                     description="and at most this many seconds (empty: only max_hold_s bounds it)")
    noise: float = Field(default=NOISE, ge=0, le=1,
                         description="PerfVars closer than this fraction count as equal: pal-guard never moves a job "
                                     "or makes it wait for less, and does not hold jobs of a class whose GPUs all lie "
                                     "within it")
    restart_grace_s: int = Field(default=10, ge=0, le=300,
                                 description="on stop, the filter keeps holding (briefly) this long, so a restart "
                                             "leaves no unheld window; 0: stop holding at once")
    hold_s: int = Field(default=90, ge=10, le=3600,
                        description="a held job's begin time is this far ahead; the hold ends by itself after it")
    wake: bool = Field(default=True, description="run a cycle at once when the submit filter holds a job or a job "
                                                 "ends (they poke placer-wake beside state_file); false: only every "
                                                 "interval_s")
    wake_file: str = Field(default="", description="ignored (a warning says so when set): the wake-up file is always "
                                                   "placer-wake beside state_file, so the state file names no path")
    wake_poll_s: float = Field(default=0.02, gt=0, le=1, description="how often the placer looks at the wake-up file")
    lock_file: str = Field(default="", description="the lock one placer at a time holds (flock); empty: placer.lock "
                                                   "beside state_file")
    wake_min_gap_s: float = Field(default=0.5, ge=0, le=60,
                                  description="a woken cycle starts at least this long after the last cycle "
                                              "started, and after an idle time as long as that cycle took "
                                              "(a burst of submissions never reads the queue back to back)")
    slurm_backend: Literal["cli", "rest", "pyslurm"] = "cli"
    rest_url: str | None = None
    rest_api: str = "v0.0.38"
    command_timeout_s: float = Field(default=20.0, gt=0)
    classes_refresh_s: float = Field(default=60.0, gt=0)
    models: list[str] = Field(default_factory=list, description="GPU model features; empty: from the nodes' features")
    metrics_port: int = Field(default=9478, ge=0, le=65535,
                              description="Prometheus metrics of the placer (per-GPU factors, the variability tax); "
                                          "0: off")
    metrics_address: str = Field(default="127.0.0.1", description="address the metrics port listens on: the scrape "
                                                                  "network's; 0.0.0.0: every one")

    @field_validator("policy")
    @classmethod
    def _policy(cls, value: str) -> str:
        """Refused at load, so `pal config show` and every other command say so, not only `pal placer`."""
        if value not in (names := policy_names()):  # the table's rows: reading them imports no policy, nor numpy
            raise ValueError(f"unknown policy {value!r}{did_you_mean(value, names)}; valid: {', '.join(names)}")
        return value

    @model_validator(mode="after")
    def _rest_needs_url(self) -> "PlacerConfig":
        if self.slurm_backend == "rest" and not self.rest_url:
            raise ValueError('slurm_backend = "rest" needs rest_url (slurmrestd\'s URL)')
        return self


class PalConfig(_Section):
    """The whole effective configuration. `source` says where it came from (for `pal config show`)."""

    data_dir: Path = Field(default_factory=default_data_dir)
    database: DatabaseConfig = DatabaseConfig()
    classification: ClassificationConfig = ClassificationConfig()
    ingest: IngestConfig = IngestConfig()
    job_classes: dict[str, JobClassConfig] = Field(default_factory=dict, validate_default=True)
    logging: LoggingConfig = LoggingConfig()
    report: ReportConfig = ReportConfig()
    jobs: JobsConfig = JobsConfig()
    agent: AgentConfig = AgentConfig()
    placer: PlacerConfig = PlacerConfig()

    @field_validator("job_classes", mode="before")
    @classmethod
    def _class_names(cls, value: Any, info: ValidationInfo) -> Any:
        """Only A-D: the submit filter, the SPANK option and the policies know no other class.
        A file configures a class's benchmark or description; the classes it leaves out keep
        the defaults of [classification] benchmark_set, so every class a user can ask for is
        always read from a benchmark some source measures."""
        classification = info.data.get("classification")
        defaults = job_classes_of(classification.benchmark_set if classification is not None else DEFAULT_SET)
        if not isinstance(value, dict):
            return value
        unknown = [name for name in value if name not in JOB_CLASSES]
        if unknown:
            raise ValueError(f"unknown job class {unknown[0]!r}: the classes are {', '.join(JOB_CLASSES)} "
                             "(the submit filter and --pal-class know no others); set each one's benchmark "
                             "under [job_classes.X]")
        merged: dict[str, Any] = {k: dict(v) for k, v in defaults.items()}
        for name, settings in value.items():
            # a table is laid over the default; anything else goes to pydantic as it is, for its typed error
            merged[name] = {**merged[name], **settings} if isinstance(settings, Mapping) else settings
        return dict(sorted(merged.items()))

    @model_validator(mode="after")
    def _set_defaults(self) -> "PalConfig":
        """What defaults to the benchmark set's: the compute benchmarks (the job classes were
        merged with it field by field above)."""
        if self.report.compute_benchmarks is None:
            compute = list(BENCHMARK_SETS[self.classification.benchmark_set].compute_benchmarks)
            object.__setattr__(self, "report", self.report.model_copy(update={"compute_benchmarks": compute}))
        return self

    @model_validator(mode="after")
    def _url_default(self) -> "PalConfig":
        if self.database.url is None:
            url = f"sqlite:///{self.data_dir / 'pal.db'}"
            object.__setattr__(self, "database", self.database.model_copy(update={"url": url}))
        return self

    @property
    def db_url(self) -> str:
        assert self.database.url is not None
        return self.database.url


def did_you_mean(value: str, names: Any) -> str:
    import difflib

    close = difflib.get_close_matches(value, list(names), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
