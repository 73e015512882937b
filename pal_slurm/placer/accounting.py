"""The placer's books: the ledger (pure, pal_slurm.placer.ledger) fed by the cycle, its
records written to `job_accounting` (pal_slurm.db.accounting_store).

Why a module of its own: the daemon calls it at three points (each cycle; observe mode's
and enforce mode's decisions) and nothing else; every error is caught here and logged, so
accounting can never stop or change a placement.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from pal_slurm.db.accounting_store import AccountingSink
from pal_slurm.placement.model import Decision, PlacementContext, Snapshot
from pal_slurm.placement.orders import QueueOrder
from pal_slurm.placer.cluster_view import View
from pal_slurm.placer.db_worker import Runner
from pal_slurm.placer.factors import Factors
from pal_slurm.placer.ledger import JobAccount, Ledger, first_fit_alternatives, placer_alternatives
from pal_slurm.placer.shapes import Planned
from pal_slurm.slurm.model import SlurmJob

log = logging.getLogger(__name__)


class Accounting:
    """One placer's ledger and its sink; `on_record` sees each finished job (the exporter)."""

    def __init__(self, sink: AccountingSink, mode: str,
                 on_record: Callable[[Sequence[JobAccount]], None] | None = None,
                 runner: Runner | None = None) -> None:
        self.ledger = Ledger(mode=mode)
        self.sink = sink
        self.on_record = on_record
        #: the database thread the records are written on (placer/db_worker.py); None: inline
        self.runner = runner

    def cycle(self, jobs: Sequence[SlurmJob], factors: Factors, now: float,
              class_of: Callable[[SlurmJob], str]) -> list[JobAccount]:
        """Follow this cycle's jobs; record (and flush) the ones that ended."""
        try:
            done = self.ledger.cycle(jobs, factors.by_slot, now, factors.version, class_of)
        except Exception:  # noqa: BLE001 - accounting must never stop placement
            log.exception("accounting: cycle not followed")
            return []
        if done:
            self.sink.add(done)
            if self.on_record is not None:
                try:
                    self.on_record(done)
                except Exception:  # noqa: BLE001
                    log.exception("accounting: exporter not updated")
        if self.runner is None:
            self.sink.flush()
        elif self.sink.pending:
            self.runner("accounting", lambda: self.sink.flush(raise_errors=True) and None)
        return done

    def observed(self, view: View, planned: Planned, decision: Decision, version: int | None) -> None:
        """Observe mode: note what the placer would have chosen."""
        try:
            for job_id, alt in placer_alternatives(view, planned, decision, version).items():
                self.ledger.chose(job_id, alt)
        except Exception:  # noqa: BLE001
            log.exception("accounting: observe choices not noted")

    def placed(self, view: View, planned: Planned, decision: Decision, snapshot: Snapshot, order: QueueOrder,
               ctx: PlacementContext, version: int | None) -> None:
        """Enforce mode: note what Slurm's first fit would have given the placed jobs."""
        try:
            alts = first_fit_alternatives(view, planned, decision, snapshot, order, ctx, version)
            for job_id, alt in alts.items():
                self.ledger.chose(job_id, alt)
        except Exception:  # noqa: BLE001
            log.exception("accounting: first-fit alternatives not noted")


__all__ = ["Accounting"]
