"""What an operator should do about each outlier GPU: one graded action with its reason.

Pure logic (no database, no clock, no Slurm): the caller passes the stored results, the
inventory's health counters and "now". Why graded: draining a node for a GPU that is
10 % slow wastes its healthy GPUs while placement already steers sensitive jobs around
it; draining is for what placement cannot fix (a failing GPU), and a measurement that is
stale or noisy must be repeated before anyone acts on it.

The grades, first match wins (docs/admin-guide.md, "Outliers: what each action means"):

1. ``re-profile`` -- the node is unknown (no node, "-", "unknown") or its name is not one
   Slurm node name (a hostlist such as ``gpu[01-16]`` would drain many): nobody can drain or
   find it; profile it where it runs so the next import learns its node. Never ``drain``.
2. ``drain`` -- the inventory reports uncorrected ECC errors or retired pages at or above
   the configured counts: hardware evidence, whatever the measurement says.
3. ``re-profile`` -- the GPU is *faster* than the typical GPU by an outlier margin on every
   benchmark it is an outlier on: an impossible speed-up is a measurement error, not a good
   GPU. (Fast on one benchmark and slow on another goes on to the slow grades below.)
4. ``re-profile`` -- the last run is older than ``stale_after_days``, or the GPU's runs
   spread wider than ``noisy_spread`` (interquartile range / median): the number may not
   describe the GPU today, or may be noise.
5. ``drain`` -- PerfVar >= ``drain_perfvar`` on a compute benchmark: severely slow.
6. ``placement`` -- otherwise: placement handles it, because only the classes that are
   insensitive to it (their benchmark does not see it slow) land there.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from pal_slurm.benchmark_sets import PROFILER
from pal_slurm.numfmt import fmt_num

PLACEMENT = "placement"
REPROFILE = "re-profile"
DRAIN = "drain"
#: Strongest first: a GPU's action is the strongest over its outlier benchmarks.
ACTION_ORDER = (DRAIN, REPROFILE, PLACEMENT)
#: Node names that mean "we do not know the node" (imports write these for missing values).
UNKNOWN_NODES = frozenset({"", "-", "?", "unknown", "none", "null", "n/a", "na"})
#: What each action tells the operator to do (shown in tables next to the reason).
ACTION_TEXT = {
    PLACEMENT: "placement handles it",
    REPROFILE: "re-profile",
    DRAIN: "drain and run diagnostics",
}


@dataclass(frozen=True)
class ActionPolicy:
    """Thresholds of the graded actions (config `[report]`, documented in docs/admin-guide.md)."""

    drain_perfvar: float = 1.3
    compute_benchmarks: tuple[str, ...] = PROFILER.compute_benchmarks
    stale_after_days: float = 30.0
    noisy_spread: float = 0.10
    drain_ecc_uncorrected: int = 1  # 0: ECC counters never drain
    drain_retired_pages: int = 1  # 0: retired pages never drain
    diagnostics: str = "run `dcgmi diag -r 3` on it, then re-profile"


@dataclass(frozen=True)
class Finding:
    """One outlier benchmark result of a GPU, with what the action grading needs."""

    benchmark: str
    perfvar: float | None
    last_profiled: datetime | None = None
    run_spread: float | None = None  # interquartile range / median of the GPU's runs of this benchmark


@dataclass(frozen=True)
class GpuAction:
    uuid: str
    node: str | None
    model: str
    action: str  # PLACEMENT | REPROFILE | DRAIN
    reason: str
    benchmarks: tuple[str, ...]
    worst_perfvar: float | None
    classes_avoiding: tuple[str, ...] = field(default=())
    classes_landing: tuple[str, ...] = field(default=())

    @property
    def text(self) -> str:
        """One line: what to do and why (the report's recommendation column)."""
        return f"{ACTION_TEXT[self.action]}: {self.reason}"

    def as_dict(self) -> dict[str, object]:
        return {"uuid": self.uuid, "node": self.node, "model": self.model, "action": self.action,
                "reason": self.reason, "recommendation": self.text, "benchmarks": list(self.benchmarks),
                "worst_perfvar": self.worst_perfvar, "classes_avoiding": list(self.classes_avoiding),
                "classes_landing": list(self.classes_landing)}


def node_known(node: str | None) -> bool:
    return node is not None and node.strip().lower() not in UNKNOWN_NODES


def _pv(v: float | None) -> str:
    return fmt_num(v, none="?")


#: One grade: (action, reason); each grade's rule gives one, or None to let the next decide.
Grade = tuple[str, str]


def grade_gpu(uuid: str, node: str | None, model: str, findings: Sequence[Finding], *,
              job_classes: Mapping[str, str], policy: ActionPolicy, now: datetime,
              measured: frozenset[str] | None = None,
              ecc_uncorrected: int | None = None, retired_pages: int | None = None) -> GpuAction:
    """The one action for an outlier GPU (`findings`: its outlier benchmarks, not empty): the
    grades of the module docstring in order, the first that applies.

    `measured`: the benchmarks the GPU has a factor on (None: every class's). A class whose
    benchmark is unmeasured does not "land there because insensitive": nothing ranks it."""
    benches = tuple(sorted({f.benchmark for f in findings}))
    finite = [f for f in findings if f.perfvar is not None and math.isfinite(f.perfvar)]
    worst = max(finite, key=lambda f: f.perfvar or 0.0, default=None)
    worst_pv = worst.perfvar if worst else None
    avoiding = tuple(sorted(c for c, b in job_classes.items() if b in benches))
    landing = tuple(sorted(c for c, b in job_classes.items() if b not in benches
                           and (measured is None or b in measured)))
    unmeasured = tuple(sorted(c for c, b in job_classes.items() if b not in benches
                              and measured is not None and b not in measured))
    action, reason = (_node_undrainable(node)
                      or _hardware_failing(policy, ecc_uncorrected, retired_pages)
                      or _impossibly_fast(findings, finite)
                      or _stale_or_noisy(findings, policy, now)
                      or _severely_slow(finite, policy)
                      or _placement(worst, benches, avoiding, landing, unmeasured))
    return GpuAction(uuid, node, model, action, reason, benches, worst_pv, avoiding, landing)


def _node_undrainable(node: str | None) -> Grade | None:
    """Grade 1: no node, or a name that is not one Slurm node: nobody can drain or find it."""
    if not node_known(node):
        return (REPROFILE, "node unknown, so it cannot be drained: profile it on its node so the "
                           "next import records where it is")
    if not one_node_name(node):  # type: ignore[arg-type]
        return (REPROFILE, f"node name {node!r} is not one Slurm node name, so it is not drained: "
                           "profile it on its node so the next import records its host name")
    return None


def _hardware_failing(policy: ActionPolicy, ecc_uncorrected: int | None, retired_pages: int | None) -> Grade | None:
    """Grade 2: the inventory's ECC or retired-page counts at the configured limits."""
    hw = []
    if policy.drain_ecc_uncorrected > 0 and (ecc_uncorrected or 0) >= policy.drain_ecc_uncorrected:
        hw.append(f"{ecc_uncorrected} uncorrected ECC errors")
    if policy.drain_retired_pages > 0 and (retired_pages or 0) >= policy.drain_retired_pages:
        hw.append(f"{retired_pages} retired memory pages")
    if hw:
        return (DRAIN, " and ".join(hw) + f"; {policy.diagnostics}")
    return None


def _impossibly_fast(findings: Sequence[Finding], finite: Sequence[Finding]) -> Grade | None:
    """Grade 3: faster than the typical GPU on every benchmark it is an outlier on."""
    fast = [f for f in finite if (f.perfvar or 1.0) < 1.0]
    if fast and len(fast) == len(findings):
        f = min(fast, key=lambda f: f.perfvar or 1.0)
        return (REPROFILE, f"faster than the typical GPU (PerfVar {_pv(f.perfvar)} on {f.benchmark}): "
                           "check the measurement")
    return None


def _stale_or_noisy(findings: Sequence[Finding], policy: ActionPolicy, now: datetime) -> Grade | None:
    """Grade 4: the oldest run past `stale_after_days`, else the widest spread past `noisy_spread`."""
    stale = [f for f in findings if f.last_profiled is not None
             and (now - f.last_profiled).total_seconds() > policy.stale_after_days * 86400]
    if stale:
        f = min(stale, key=lambda f: f.last_profiled)  # type: ignore[arg-type, return-value]
        days = int((now - f.last_profiled).total_seconds() // 86400)  # type: ignore[operator]
        return (REPROFILE, f"last {f.benchmark} run {days} days ago (stale after "
                           f"{policy.stale_after_days:g})")
    noisy = [f for f in findings if f.run_spread is not None and f.run_spread > policy.noisy_spread]
    if noisy:
        f = max(noisy, key=lambda f: f.run_spread or 0.0)
        return (REPROFILE, f"its {f.benchmark} runs spread {100 * (f.run_spread or 0):.0f} % "
                           f"(noisy above {100 * policy.noisy_spread:g} %)")
    return None


def _severely_slow(finite: Sequence[Finding], policy: ActionPolicy) -> Grade | None:
    """Grade 5: the worst PerfVar on a compute benchmark at or above `drain_perfvar`."""
    severe = [f for f in finite if f.benchmark in policy.compute_benchmarks
              and (f.perfvar or 0.0) >= policy.drain_perfvar]
    if severe:
        f = max(severe, key=lambda f: f.perfvar or 0.0)
        return (DRAIN, f"PerfVar {_pv(f.perfvar)} on {f.benchmark} (>= {policy.drain_perfvar:g}); "
                       f"{policy.diagnostics}")
    return None


def _placement(worst: Finding | None, benches: tuple[str, ...], avoiding: tuple[str, ...],
               landing: tuple[str, ...], unmeasured: tuple[str, ...]) -> Grade:
    """Grade 6: placement handles it, saying which classes land there and which it cannot keep off."""
    worst_pv = worst.perfvar if worst else None
    what = f"PerfVar {_pv(worst_pv)} on {worst.benchmark if worst else benches[0]}"
    blind = (f"; job class{'es' if len(unmeasured) > 1 else ''} {', '.join(unmeasured)} "
             "unmeasured on it, so placement cannot keep them off") if unmeasured else ""
    if not landing and not avoiding:  # no class is measured at all: nothing keeps any job off it
        return (REPROFILE, f"{what}; no job class is measured on it{blind}: profile it with the job "
                           "classes' benchmarks")
    if not landing:  # every class is measured by a benchmark it is slow on: its factor puts it last
        return (PLACEMENT, f"{what}; every measured class sees it slow, so placement gives it out last"
                + blind)
    return (PLACEMENT, f"{what}; only classes insensitive to it land there ({', '.join(landing)})" + blind)


def drain_plan(actions: Sequence[GpuAction]) -> list[tuple[str, str]]:
    """(node, Slurm reason) for every node with a GPU graded `drain`, one per node, sorted.

    The reason names the GPUs (short UUIDs) and the first GPU's reason, so `sinfo -R` says
    why; it never includes a node that is unknown (grade_gpu never drains one).
    """
    per_node: dict[str, list[GpuAction]] = {}
    for a in actions:
        if a.action == DRAIN and node_known(a.node) and one_node_name(a.node):  # type: ignore[arg-type]
            per_node.setdefault(a.node, []).append(a)  # type: ignore[arg-type]
    out = []
    for node in sorted(per_node):
        gpus = sorted(per_node[node], key=lambda a: a.uuid)
        reason = gpus[0].reason.split(";")[0]
        names = ",".join(short_uuid(a.uuid) for a in gpus)
        out.append((node, f"pal: GPU {names}: {reason}"))
    return out


#: One Slurm node name: no hostlist brackets, commas, spaces or newlines (NodeName= takes a hostlist).
_ONE_NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def one_node_name(node: str) -> bool:
    """Whether `NodeName=node` names exactly one node by its syntax: not a hostlist, and not
    `ALL`, which scontrol expands to every node (a NodeSet name is caught by `pal gpus drain`,
    which drains only names Slurm lists)."""
    return bool(_ONE_NODE.fullmatch(node)) and node.upper() != "ALL"
_NVML_UUID = re.compile(r"(?:GPU|MIG)-([0-9a-fA-F]{8})-[0-9a-fA-F]{4}-")


def short_uuid(uuid: str) -> str:
    """The first 8 hex digits after "GPU-" of an NVML UUID (what `nvidia-smi -L` users
    recognise); any other identity (a cabinet-node-device name, a test id) unchanged."""
    m = _NVML_UUID.match(uuid)
    return m.group(1) if m else uuid
