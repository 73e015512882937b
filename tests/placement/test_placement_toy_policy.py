"""Adding a policy as docs/architecture.md ("Adding a policy") says, and nothing more: one
chooser and one row of placement/table.py. The row is added the way an edit of `ROWS` would
add it (monkeypatched here, so the table stays as shipped), and the toy policy then runs
through everything that reads the table: the decision step the simulators and the daemon
call, the event simulator, `pal simulate --policy`, the configuration's `[placer] policy`
and the error that lists the valid names. Last, the docs' policy table, which names the
shipped rows.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import REPO
from pal_slurm.placement import table
from pal_slurm.placement.base import Choice, Policy, as_gpus, describe_gpus
from pal_slurm.placement.chooser import ShapedChooser
from pal_slurm.placement.decide import decide
from pal_slurm.placement.first_fit import FirstFit
from pal_slurm.placement.index import FreeState
from pal_slurm.placement.model import JobRequest, PlacementContext, PolicyRow, Snapshot
from pal_slurm.placement.orders import get_order
from pal_slurm.placement.policies import get_policy, policy_names
from tests.support.placement_cases import check_decision, cluster, job, random_case


# --------------------------------------------------------------------------- step 1: the chooser


@dataclass(frozen=True)
class Lowest(ShapedChooser):
    """The lowest free ids on the first nodes that have them."""

    def pick(self, job: JobRequest, cand: np.ndarray, state: FreeState, ctx: PlacementContext) -> Choice | None:
        gpus = as_gpus(cand[: job.gpus])
        tab = state.index.table(job.job_class)
        return Choice(gpus, why=f"{self.label}: lowest ids; {describe_gpus(state.index, tab, gpus)}")

    def pick_split(self, job: JobRequest, cand: np.ndarray, state: FreeState, ctx: PlacementContext,
                   per_node: int, nodes: int) -> Choice | None:
        return FirstFit(self.label).pick_split(job, cand, state, ctx, per_node, nodes)


# --------------------------------------------------------------------------- step 2: the row


def _lowest(row: PolicyRow[Policy]) -> Policy:
    from pal_slurm.placement.easy import EasyBackfill, by_time_limit
    from pal_slurm.placement.waiting import NeverWait
    return EasyBackfill(row, Lowest(row.name), by_time_limit, NeverWait())


ROW = PolicyRow("lowest", "Lowest free ids, EASY backfill on time limits.", sticky=True, build=_lowest)


@pytest.fixture
def with_lowest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(table, "ROWS", (*table.ROWS, ROW))


# --------------------------------------------------------------------------- what reads the table


@pytest.mark.usefixtures("with_lowest")
def test_the_row_makes_it_a_policy_by_name() -> None:
    assert policy_names()[-1] == "lowest"
    policy = get_policy("lowest")
    assert (policy.name, policy.sticky, policy.description) == ("lowest", True, ROW.description)
    assert policy.backfills and policy.deterministic and policy.lookahead == 64


@pytest.mark.usefixtures("with_lowest")
def test_the_decision_step_places_with_it_and_keeps_every_shape() -> None:
    """decide(), as the simulators and the daemon call it; the head blocks, a short job is
    backfilled past it with the toy chooser's GPUs."""
    snap = Snapshot(cluster=cluster([4, 4]), free=frozenset({1, 2, 5}), running={"r": (0, 3, 4, 6, 7)}, now=0.0,
                    expected_end={"r": 100.0})
    queue = [job("head", 4, max_nodes=1, remaining_s=500.0), job("short", 1, submit=1, remaining_s=50.0)]
    d = decide(get_policy("lowest"), get_order("fifo"), snap, queue, PlacementContext())
    assert d.blocked == "head" and d.as_dict() == {"short": (1,)}
    assert d.assignments[0].reason.startswith("lowest: lowest ids; g1@n0 sf=1.000; backfilled past head")
    policy = get_policy("lowest")
    for seed in range(60):
        snap, queue = random_case(seed)
        check_decision(snap, queue, decide(policy, None, snap, queue, PlacementContext(rng=random.Random(seed))))


@pytest.mark.usefixtures("with_lowest")
def test_pal_simulate_runs_it_beside_the_baseline() -> None:
    from pal_slurm.cli.main import cli

    res = CliRunner().invoke(cli, ["simulate", "--synthetic", "40", "--variability", "parametric:wide",
                                   "--mode", "event", "--policy", "lowest,slurm-backfill", "--format", "json"])
    assert res.exit_code == 0, res.output
    runs = json.loads(res.stdout)["runs"]
    assert {r["policy"] for r in runs} == {"lowest", "slurm-backfill"} and all(r["jobs"] == 40 for r in runs)


@pytest.mark.usefixtures("with_lowest")
def test_the_configuration_takes_it_and_lists_it_among_the_valid_names() -> None:
    from pal_slurm.config import PlacerConfig

    assert PlacerConfig(policy="lowest").policy == "lowest"
    with pytest.raises(ValueError, match=r"unknown policy 'lowset' \(did you mean 'lowest'\?\); valid: .*, lowest"):
        PlacerConfig(policy="lowset")
    with pytest.raises(ValueError, match=r"unknown policy 'lowset'; valid: .*pal-guard, lowest$"):
        get_policy("lowset")


def test_without_the_row_it_is_no_policy() -> None:
    """The fixture's row is gone again: the table is as shipped."""
    assert "lowest" not in policy_names()
    with pytest.raises(ValueError, match="unknown policy 'lowest'"):
        get_policy("lowest")


def test_the_policy_table_of_the_docs_names_every_row_and_no_other() -> None:
    """docs/simulation.md ("Policies") describes each policy of the table in more words than its
    row; it names exactly the table's policies (a row added or renamed fails here until the
    docs say it)."""
    text = (REPO / "docs" / "simulation.md").read_text(encoding="utf-8")
    lines = text.split("\n## Policies\n", 1)[1].splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next(i for i in range(first, len(lines)) if not lines[i].startswith("|"))
    rows = lines[first + 2:end]  # the table, without its header
    named: list[str] = []
    for line in rows:
        cell = re.sub(r"\(.*?\)|\*", "", line.split("|")[1])
        named += [n.strip() for n in cell.split("/")]
    assert sorted(named) == sorted(policy_names())
