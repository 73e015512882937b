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

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pal_slurm.placer.db_worker import DbWorker

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from pal_slurm.config import PalConfig
    from pal_slurm.jobs.runtimes import LearnedRuntimes
    from pal_slurm.placer.cycle import Placer
    from pal_slurm.placer.db_worker import Runner
    from pal_slurm.placer.exporter import PlacerMetrics
    from pal_slurm.placer.lock import OnePlacer
    from pal_slurm.placer.wake import WakeWatch

__all__ = ["build_placer", "one_placer", "release_on_stop", "release_stale", "run_forever", "start_metrics",
           "tune_gc", "wake_watch"]

log = logging.getLogger(__name__)

#: failed cycles in a row after which every held job is released
FAILURES_BEFORE_RELEASE = 5


def tune_gc() -> None:
    """Collector settings for the daemon process (`pal placer` calls this once at start).

    Each cycle builds and drops a large graph of short-lived objects (megabytes of squeue
    JSON as dicts, thousands of job records) that holds no reference cycles; with the default
    gen-0 threshold (700 allocations) the collector walks it again and again, which took a
    third of a 1,000-job cycle (bench/placer_cycle.py). Freezing what start-up loaded and
    collecting gen 0 every 200,000 net allocations keeps memory bounded and the cycle short.
    """
    import gc

    gc.freeze()
    gc.set_threshold(200_000, 50, 100)


def build_placer(cfg: PalConfig, engine: Callable[[], Engine], *, mode: str | None = None,
                 policy: str | None = None, state_file: str | None = None,
                 metrics: PlacerMetrics | None = None, background_db: bool = False) -> Placer:
    """A Placer wired to the configured Slurm backend, database and class rules; `engine` is
    called only when the database is first needed (the fail-safe path reads none).
    `background_db`: every database read and write goes through a thread of its own
    (placer/db_worker.py), as the daemon runs; else inline (`--once`, the fail-safe)."""
    from pal_slurm.db.accounting_store import AccountingSink
    from pal_slurm.placer.accounting import Accounting
    from pal_slurm.placer.audit import AuditSink
    from pal_slurm.placer.class_rules import ClassRules
    from pal_slurm.placer.cycle import Placer
    from pal_slurm.placer.factors import FactorCache
    from pal_slurm.slurm.backend import make_backend

    pc = cfg.placer.model_copy(update={k: v for k, v in
                                       {"mode": mode, "policy": policy, "state_file": state_file}.items() if v})
    backend = make_backend(pc.slurm_backend, rest_url=pc.rest_url, rest_api=pc.rest_api,
                           timeout=pc.command_timeout_s)
    runner = DbWorker().start().submit if background_db else None
    factors = FactorCache(engine, refresh_s=pc.classes_refresh_s, classes=list(cfg.job_classes), runner=runner,
                          passive_min_paced=cfg.classification.passive_use_min_paced
                          if cfg.classification.passive == "use" else None,
                          benchmark_noise=cfg.classification.benchmark_noise)
    rules = ClassRules(engine, pc.classes_refresh_s, cfg.jobs.default_class, runner=runner)

    def identities(jobs: Any) -> None:
        from pal_slurm.db.engine import session_scope
        from pal_slurm.db.sensitivity_store import record_identities

        with session_scope(engine()) as session:
            record_identities(session, [(j.job_id, j.user, j.name, j.command) for j in jobs])

    from pal_slurm.db.history_store import HistoryReader, runtime_rule

    reader = HistoryReader(runtime_rule(cfg))  # kept across refreshes: each reads only the new rows

    def history() -> LearnedRuntimes:
        from pal_slurm.db.engine import session_scope
        from pal_slurm.db.history_store import learned_runtimes_all

        with session_scope(engine()) as session:
            return learned_runtimes_all(session, reader.rule, reader=reader)

    accounting = Accounting(AccountingSink(engine), pc.mode, on_record=metrics.add_records if metrics else None,
                            runner=runner)
    return Placer(backend, pc, factors, AuditSink(engine), classes=list(cfg.job_classes),
                  resolve_class=rules.resolve, rules=rules.filter_rules, identities=identities, history=history,
                  accounting=accounting, runner=runner, user_class=cfg.jobs.user_class, rules_snapshot=rules.table)


def one_placer(cfg: PalConfig, engine: Callable[[], Engine], *, state_file: str | None = None,
               runner: Runner | None = None, connect_timeout_s: int | None = None) -> OnePlacer:
    """The placer's locks (placer/lock.py): the file lock (`placer.lock_file`, default beside the
    state file) and, where the database is a server, its advisory lock. `connect_timeout_s`:
    a database engine of its own with this connect timeout (the fail-safe asks briefly)."""
    from pal_slurm.db.advisory_lock import AdvisoryLock
    from pal_slurm.placer.lock import FileLock, OnePlacer, default_lock_path

    pc = cfg.placer
    path = pc.lock_file or default_lock_path(state_file or pc.state_file)
    db = None
    if not cfg.db_url.startswith("sqlite"):
        if connect_timeout_s is not None:
            from pal_slurm.db.engine import make_engine

            db = AdvisoryLock(make_engine(cfg.db_url, connect_timeout_s=connect_timeout_s, create=False))
        else:
            db = AdvisoryLock(engine())
    return OnePlacer(FileLock(path), db, runner=runner)


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


def run_forever(p: Placer, interval: float, one: OnePlacer | None = None) -> None:
    """The service loop: cycles, watchdog pings, signals; transient Slurm failures are retried.

    With `one` (the daemon's locks, placer/lock.py), the loop places only while this placer
    holds them: until then, or when the database says another placer took over, it stands by,
    publishes nothing and changes no job, and on stop releases nothing (the jobs are the
    other placer's)."""
    from pal_slurm.placer.wake import woken_start
    from pal_slurm.systemd_notify import Notifier

    stop = threading.Event()

    def _stop(signum: int, _frame: Any) -> None:
        log.warning("signal %d: %s", signum, "releasing held jobs and stopping" if placing else "stopping")
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    notify = Notifier()
    failures = 0
    placing = False
    watch = wake_watch(p)
    if one is not None and not _stand_by(one, stop, notify):
        notify.stopping()
        log.warning("stopped while standing by; released nothing (%s)", one.why)
        return
    placing = True
    _start_placing(p, notify)
    while not stop.is_set():
        if one is not None:
            one.check()
            if not one.placing:
                placing = False
                log.error("%s: this placer stops placing and stands by; it releases nothing (the held jobs are "
                          "the other placer's)", one.why)
                if not _stand_by(one, stop, notify):
                    break
                placing = True
                p.publish()
        started = time.monotonic()
        failures = _one_cycle(p, notify, failures)
        notify.watchdog()
        ended = time.monotonic()
        left = max(0.0, interval - (ended - started))
        if watch is None:
            stop.wait(left)
        elif watch.wait(left, stop, not_before=woken_start(started, ended, p.cfg.wake_min_gap_s)):
            log.debug("woken by %s", watch.path)
    notify.stopping()
    _stop_placing(p, one, placing)


def _start_placing(p: Placer, notify: Any) -> None:
    """The heartbeat first, before any Slurm or database read (see Placer.publish, grace_s);
    then ready, and the first database reads waited for (Placer.prime)."""
    try:
        p.publish()
    except OSError as exc:
        log.error("filter state not written at start: %s", exc)
    notify.ready("placing")
    if not p.prime(PRIME_WAIT_S):
        log.warning("the database did not answer within %g s of the start; placing with what has come, the rest "
                    "follows on the database thread", PRIME_WAIT_S)


def _one_cycle(p: Placer, notify: Any, failures: int) -> int:
    """One cycle, its outcome told to systemd and the log; the failed cycles in a row after it.
    Slurm unavailable is retried; FAILURES_BEFORE_RELEASE failures in a row of any other kind
    release every held job (a placer that keeps failing fails open)."""
    from pal_slurm.errors import SlurmUnavailable

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
    return failures


def _stop_placing(p: Placer, one: OnePlacer | None, placing: bool) -> None:
    """On stop: release what this placer holds (with the restart grace) unless it stood by,
    let the database thread finish its queue, and give up the locks."""
    if placing:
        released = release_on_stop(p, "placer stopped", grace_s=p.cfg.restart_grace_s)
        log.warning("stopped; released %d held job(s)", len(released))
    else:
        log.warning("stopped while standing by; released nothing (%s)", one.why if one else "")
    if p.runner is not None and isinstance(getattr(p.runner, "__self__", None), DbWorker):
        p.runner.__self__.drain(5.0)
    if one is not None:
        one.release()


#: how long a starting placer waits for its first database reads before its first cycle
PRIME_WAIT_S = 5.0
#: how often a standing-by placer asks for the locks again
STANDBY_RETRY_S = 5.0


def _stand_by(one: OnePlacer, stop: threading.Event, notify: Any) -> bool:
    """Wait until this placer holds the locks (True) or is stopped (False), telling systemd
    it is up (a standby is a healthy state) and keeping its watchdog fed."""
    said = ""
    ready = False
    while not stop.is_set():
        if one.take(wait_db_s=5.0 if not said else 1.0):
            if said:
                log.warning("the placer lock is ours now: placing")
            return True
        if one.why != said:
            log.error("%s: standing by (placing nothing, publishing nothing) until it is free", one.why)
            said = one.why
        status = f"standby: {one.why}"[:200]
        if not ready:
            notify.ready(status)
            ready = True
        else:
            notify.status(status)
        notify.watchdog()
        stop.wait(STANDBY_RETRY_S)
    return False


def wake_watch(p: Placer) -> WakeWatch | None:
    """The wake-up file the loop watches between cycles (placer.wake): `placer-wake` beside the
    state file, created if missing; the heartbeat then tells the filter to poke it (`wake 1`).
    None when waking is off, the file is not a regular file, or the state directory is not the
    placer's alone (wake.state_dir_problem): then every job waits for the next cycle, as
    without it, slower but never stuck."""
    from pal_slurm.placer.wake import WakeWatch, default_path, ensure, state_dir_problem

    path = default_path(p.cfg.state_file)
    if p.cfg.wake_file and os.path.abspath(p.cfg.wake_file) != os.path.abspath(path):
        log.warning("placer.wake_file = %s is ignored: the wake-up file is always %s (placer-wake beside "
                    "state_file), the path the submit filter and EpilogSlurmctld compute themselves, so the "
                    "state file slurmctld reads names no file to write", p.cfg.wake_file, path)
    if not p.cfg.wake:
        return None
    directory = os.path.dirname(path) or "."
    with contextlib.suppress(OSError):  # a directory that cannot be made is named just below
        os.makedirs(directory, exist_ok=True)
    problem = state_dir_problem(directory)
    if problem is not None:
        log.error("%s: the submit filter is not told to wake the placer (slurmctld opens a file there); jobs wait "
                  "for the next cycle, every %g s", problem, p.cfg.interval_s)
        return None
    if not ensure(path):
        return None
    p.wake_ready = True
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
                  grace: bool = False, one: OnePlacer | None = None) -> dict[str, Any]:
    """The fail-safe: release every held job when the heartbeat is older than `max_age`
    (default placer.stale_after_s), missing, or `force`; what it found and did.

    With `one` (the placer's locks), nothing is released while another placer holds them:
    a live daemon on this host (the file lock), or one on another host (the database's lock,
    asked with a short timeout; a database that does not answer leaves the file lock in
    charge, so the fail-safe still works when the database is down). A hung daemon holds its
    file lock until systemd's watchdog kills it; the kernel then drops the lock and
    ExecStopPost's release-stale acts."""
    from pal_slurm.slurm.filter_state import heartbeat_age

    limit = max_age if max_age is not None else p.cfg.stale_after_s
    age = heartbeat_age(p.cfg.state_file)
    stale = force or age is None or age > limit
    out: dict[str, Any] = {"heartbeat_age_s": None if age is None else round(age, 1), "stale": stale,
                           "released": [], "locked_by": None}
    if not stale:
        return out
    if one is not None and not one.take(wait_db_s=0):
        out["locked_by"] = one.why
        return out
    try:
        out["released"] = p.release_all("placer heartbeat stale; released by the fail-safe",
                                        grace_s=p.cfg.restart_grace_s if grace else 0)
    finally:
        if one is not None:
            one.release()
    return out
