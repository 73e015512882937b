"""The placer's heartbeat: the filter state file job_submit.lua reads before it holds a job.

Why its own step: the submit filter holds GPU jobs only while this heartbeat is fresh, so it
is written at start before anything else is read, every cycle while Slurm answers, and with
a stopping beat when the daemon goes (docs/admin-guide.md, "The placement daemon"). It
carries the mode, the GPU models the filter steers, the class rules it applies itself and
the classes it may leave to Slurm, and whether it pokes the wake-up file when it holds a job.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from pal_slurm.config import PlacerConfig
from pal_slurm.placement.base import Policy, unheld_classes
from pal_slurm.placement.model import PlacementContext
from pal_slurm.placer.factors import Factors
from pal_slurm.slurm import filter_state
from pal_slurm.slurm.gresconf import slot_of_type
from pal_slurm.slurm.model import SlurmNode
from pal_slurm.slurm.tres import parse_gres_alloc

log = logging.getLogger(__name__)

#: the class rules the filter applies itself (placer.class_rules.ClassRules.filter_rules)
Rules = Callable[[], list[dict[str, object]]]



def classes_left_to_slurm(policy: Policy, classes: Sequence[str], factors: Factors,
                          ctx: PlacementContext) -> frozenset[str]:
    """Classes the filter need not hold on these factors (all or none: `unheld_classes`;
    none when no GPU is classified, so nothing changes before the first classification)."""
    if not factors.by_slot:
        return frozenset()
    gpus = list(factors.by_slot.values())
    perfvar = {c: [g.perfvar.get(c, 1.0) for g in gpus] for c in classes}
    return unheld_classes(policy, perfvar, ctx)

class Heartbeat:
    """What the filter is told: the GPU models (configured, else from the nodes' features,
    else the last state file's), the rules, and `unheld`, the classes left to Slurm."""

    def __init__(self, cfg: PlacerConfig, clock: Callable[[], float], rules: Rules | None = None) -> None:
        self.cfg = cfg
        self.clock = clock
        self.rules = rules
        self.models: tuple[str, ...] = tuple(m.lower() for m in cfg.models)
        self.unheld: frozenset[str] = frozenset()
        #: whether the filter pokes the wake-up file when it holds a job (False until the loop
        #: has checked the file and its directory: placer.service.wake_watch, placer.wake)
        self.wake_ready = False

    def publish(self, *, alive: bool = True, nodes: Sequence[SlurmNode] = (), grace_s: int = 0) -> None:
        """Write the filter state.

        alive=False: the daemon is stopping. With grace_s 0 the heartbeat is 0 and the
        filter stops holding at once. With grace_s > 0 the filter keeps holding new GPU jobs
        for grace_s more seconds, each only briefly (hold_s = grace_s + 5): a restart within
        that time finds them held and places them (no unheld window), and without one they
        start by themselves a few seconds later."""
        if not self.models and nodes:
            self.models = tuple(sorted({f.lower() for n in nodes for f in n.features
                                        if any(slot_of_type(u) is not None for u in _gres_types(n))}))
        if not self.models:
            self.models = filter_state.read_models(self.cfg.state_file)
        rules: list[dict[str, object]] = []
        if self.rules is not None and alive:
            try:
                rules = self.rules()
            except Exception as exc:  # noqa: BLE001 - rules are a hint; the heartbeat must go out
                log.warning("class rules not refreshed: %s", exc)
        if alive:
            beat, stale, hold = int(self.clock()), self.cfg.stale_after_s, self.cfg.hold_s
        elif grace_s > 0:
            beat, stale, hold = int(self.clock()) - max(self.cfg.stale_after_s - grace_s, 0), self.cfg.stale_after_s, \
                grace_s + 5
        else:
            beat, stale, hold = 0, self.cfg.stale_after_s, self.cfg.hold_s
        state = filter_state.FilterState(mode=self.cfg.mode, heartbeat=beat, stale_after=stale, models=self.models,
                                         rules=filter_state.rules_from(rules), hold_s=max(hold, 10),
                                         unheld_classes=tuple(sorted(self.unheld)) if alive else (),
                                         wake=self.wake_ready and alive)
        filter_state.write(self.cfg.state_file, state)


def _gres_types(node: SlurmNode) -> list[str | None]:
    return [u.type for u in parse_gres_alloc(node.gres) if u.name == "gpu"]


__all__ = ["Heartbeat", "Rules", "classes_left_to_slurm"]
