"""`pal placer` as a service: the Placer wired from configuration, the timed loop around
`Placer.cycle`, and the release paths (on stop, on persistent failure, by the fail-safe).

Kept out of the CLI so the command only parses, calls and renders, the way
`agent/service.py` does it for the agent. Startup publishes the heartbeat before any
Slurm or database read (a restart leaves no window in which the submit filter lets GPU
jobs through unheld); SIGTERM/SIGINT release every held job (with the restart grace) and
stop; five failed cycles in a row release everything, because a placer that keeps failing
must fail open rather than keep jobs held. Between cycles the loop watches the wake-up file
(placer/wake.py): a job the filter holds, or a job's end, starts a cycle at once.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pal_slurm.placer.refresh import Refreshed

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from pal_slurm.config import PalConfig
    from pal_slurm.jobs.rules import ClassRuleTable
    from pal_slurm.jobs.runtimes import LearnedRuntimes
    from pal_slurm.placer.cycle import Placer
    from pal_slurm.placer.exporter import PlacerMetrics
    from pal_slurm.placer.wake import WakeWatch

__all__ = ["ClassRules", "build_placer", "release_on_stop", "release_stale", "run_forever", "start_metrics",
           "wake_watch"]

log = logging.getLogger(__name__)

#: failed cycles in a row after which every held job is released
FAILURES_BEFORE_RELEASE = 5


class ClassRules:
    """The job-class rules, reloaded from the database at most every `refresh_s`; the last
    table is kept while the database is down (placement goes on with what it knew), and a
    failed reload is tried again within 10 s, as the classes are (placer/factors.py)."""

    def __init__(self, engine: Callable[[], Engine], refresh_s: float, default_class: str,
                 clock: Callable[[], float] = time.time) -> None:
        self._engine = engine
        self._default = default_class
        self._cache: Refreshed[ClassRuleTable | None] = Refreshed(
            self._load, refresh_s, initial=None, clock=clock, retry_s=min(refresh_s, 10.0),
            on_error=lambda error: log.warning("class rules not reloaded: %s", error))

    def _load(self, _now: float) -> ClassRuleTable:
        from pal_slurm.db.engine import session_scope
        from pal_slurm.jobs.rules import load_class_rules

        with session_scope(self._engine()) as session:
            return load_class_rules(session)

    def table(self) -> ClassRuleTable | None:
        return self._cache.get()

    def resolve(self, job: Any) -> tuple[str, str]:
        """(class, why) for a job; the configured default class when no table was ever read."""
        from pal_slurm.jobs.rules import resolve_class

        table = self.table()
        if table is None:
            return self._default, "default"
        return resolve_class(table, job.user, job.name, job.command, job.account, job.partition,
                             default=self._default)

    def filter_rules(self) -> list[Any]:
        """The rules the submit filter applies itself (published in its state file)."""
        from pal_slurm.jobs.rules import filter_rules

        table = self.table()
        return [] if table is None else filter_rules(table)


def build_placer(cfg: PalConfig, engine: Callable[[], Engine], *, mode: str | None = None,
                 policy: str | None = None, state_file: str | None = None,
                 metrics: PlacerMetrics | None = None) -> Placer:
    """A Placer wired to the configured Slurm backend, database and class rules; `engine` is
    called only when the database is first needed (the fail-safe path reads none)."""
    from pal_slurm.db.accounting_store import AccountingSink
    from pal_slurm.placer.accounting import Accounting
    from pal_slurm.placer.audit import AuditSink
    from pal_slurm.placer.cycle import Placer
    from pal_slurm.placer.factors import FactorCache
    from pal_slurm.slurm.backend import make_backend

    pc = cfg.placer.model_copy(update={k: v for k, v in
                                       {"mode": mode, "policy": policy, "state_file": state_file}.items() if v})
    backend = make_backend(pc.slurm_backend, rest_url=pc.rest_url, rest_api=pc.rest_api,
                           timeout=pc.command_timeout_s)
    factors = FactorCache(engine, refresh_s=pc.classes_refresh_s, classes=list(cfg.job_classes))
    rules = ClassRules(engine, pc.classes_refresh_s, cfg.jobs.default_class)

    def identities(jobs: Any) -> None:
        from pal_slurm.db.engine import session_scope
        from pal_slurm.jobs.sensitivity_store import record_identities

        with session_scope(engine()) as session:
            record_identities(session, [(j.job_id, j.user, j.name, j.command) for j in jobs])

    from pal_slurm.jobs.history_store import HistoryReader, runtime_rule

    reader = HistoryReader(runtime_rule(cfg))  # kept across refreshes: each reads only the new rows

    def history() -> LearnedRuntimes:
        from pal_slurm.db.engine import session_scope
        from pal_slurm.jobs.history_store import learned_runtimes_all

        with session_scope(engine()) as session:
            return learned_runtimes_all(session, reader.rule, reader=reader)

    accounting = Accounting(AccountingSink(engine), pc.mode, on_record=metrics.add_records if metrics else None)
    return Placer(backend, pc, factors, AuditSink(engine), classes=list(cfg.job_classes),
                  resolve_class=rules.resolve, rules=rules.filter_rules, identities=identities, history=history,
                  accounting=accounting)


def start_metrics(cfg: PalConfig, engine: Callable[[], Engine]) -> PlacerMetrics | None:
    """The placer's Prometheus endpoint (`[placer] metrics_port`, 0: none), its GPU facts read
    from the database every classes_refresh_s by a thread of its own; None when off or when
    the port cannot be opened (logged: the placer runs on without metrics)."""
    from pal_slurm.placer.exporter import Exporter, PlacerMetrics, gpu_facts

    pc = cfg.placer
    if not pc.metrics_port:
        return None

    def load() -> list[Any]:
        from sqlalchemy import select

        from pal_slurm.db.engine import session_scope
        from pal_slurm.db.models import Gpu
        from pal_slurm.report.service import load_gpu_rows

        eng = engine()
        with session_scope(eng) as session:
            minors = {u: m for u, m in session.execute(select(Gpu.uuid, Gpu.minor_number))}
        return gpu_facts(load_gpu_rows(eng, None, cfg), minors)

    metrics = PlacerMetrics(load)
    exporter = Exporter(metrics, pc.metrics_port, pc.metrics_address, refresh_s=pc.classes_refresh_s)
    return metrics if exporter.start() else None


def run_forever(p: Placer, interval: float) -> None:
    """The service loop: cycles, watchdog pings, signals; transient Slurm failures are retried."""
    from pal_slurm.errors import SlurmUnavailable
    from pal_slurm.placer.wake import woken_start
    from pal_slurm.systemd_notify import Notifier

    stop = threading.Event()

    def _stop(signum: int, _frame: Any) -> None:
        log.warning("signal %d: releasing held jobs and stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    notify = Notifier()
    failures = 0
    watch = wake_watch(p)
    try:
        # the heartbeat first, before any Slurm or database read (see Placer.publish, grace_s)
        p.publish()
    except OSError as exc:
        log.error("filter state not written at start: %s", exc)
    notify.ready("placing")
    while not stop.is_set():
        started = time.monotonic()
        try:
            report = p.cycle()
            failures = 0
            notify.status(f"held {report.held}, placed {len(report.placed)}, waiting {len(report.waiting)}")
            if report.changed:
                log.info("cycle: %s", report.line())
        except SlurmUnavailable as exc:
            failures += 1
            log.warning("Slurm unavailable (%d in a row): %s", failures, exc)
            notify.status(f"Slurm unavailable: {exc}")
        except Exception as exc:
            failures += 1
            log.exception("cycle failed (%d in a row)", failures)
            if failures >= FAILURES_BEFORE_RELEASE:
                release_on_stop(p, f"placer failing ({exc})"[:200])
        notify.watchdog()
        ended = time.monotonic()
        left = max(0.0, interval - (ended - started))
        if watch is None:
            stop.wait(left)
        elif watch.wait(left, stop, not_before=woken_start(started, ended, p.cfg.wake_min_gap_s)):
            log.debug("woken by %s", watch.path)
    notify.stopping()
    released = release_on_stop(p, "placer stopped", grace_s=p.cfg.restart_grace_s)
    log.warning("stopped; released %d held job(s)", len(released))


def wake_watch(p: Placer) -> WakeWatch | None:
    """The wake-up file the loop watches between cycles (placer.wake), created if missing and
    published to the filter through the heartbeat; None when waking is off or the path is
    unusable (then every job waits for the next cycle, as without it)."""
    from pal_slurm.placer.wake import WakeWatch, default_path, ensure

    if not p.cfg.wake:
        return None
    path = p.cfg.wake_file or default_path(p.cfg.state_file)
    if not ensure(path):
        return None
    p.wake_file = path
    log.info("woken at once by %s (a held job, a job's end); else every %g s", path, p.cfg.interval_s)
    return WakeWatch(path, poll_s=p.cfg.wake_poll_s)


def release_on_stop(p: Placer, why: str, grace_s: int = 0) -> list[str]:
    """Release every held job; a failure is logged (the fail-safe timer retries), never raised."""
    try:
        return p.release_all(why, grace_s=grace_s)
    except Exception as exc:  # noqa: BLE001
        log.error("release on stop failed: %s (the fail-safe timer will retry)", exc)
        return []


def release_stale(p: Placer, *, max_age: float | None = None, force: bool = False,
                  grace: bool = False) -> dict[str, Any]:
    """The fail-safe: release every held job when the heartbeat is older than `max_age`
    (default placer.stale_after_s), missing, or `force`; what it found and did."""
    from pal_slurm.slurm.filter_state import heartbeat_age

    limit = max_age if max_age is not None else p.cfg.stale_after_s
    age = heartbeat_age(p.cfg.state_file)
    stale = force or age is None or age > limit
    released = p.release_all("placer heartbeat stale; released by the fail-safe",
                             grace_s=p.cfg.restart_grace_s if grace else 0) if stale else []
    return {"heartbeat_age_s": None if age is None else round(age, 1), "stale": stale, "released": released}
