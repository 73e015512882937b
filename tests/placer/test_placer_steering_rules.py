"""The placer's pure rules: which held jobs are steered, onto which slots, and what Slurm is told."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from pal_slurm.placer import cluster_view, holds, slurm_updates
from pal_slurm.slurm import parse_json
from tests.support.steering import CLASSES, FOUR, NOW, SF, factors, job, node, place

DATA = Path(__file__).parents[1] / "data" / "slurm" / "22.05"


def test_view_from_captured_sinfo_marks_busy_slots() -> None:
    nodes = parse_json.nodes_from_doc(parse_json.load((DATA / "sinfo.json").read_text(), "sinfo"))
    view = cluster_view.build_view(nodes, [], {}, CLASSES)
    assert len(view.slots) == 16 and {s.gres_type for s in view.slots} == {f"v100_g{m}" for m in range(4)}
    busy = {(view.slots[g].node, view.slots[g].minor) for g in range(16)} - \
        {(view.slots[g].node, view.slots[g].minor) for g in view.free}
    assert busy == {("pal-n2", m) for m in range(4)}  # the two captured running jobs


def test_class_a_gets_the_best_gpu_class_d_the_worst_for_a() -> None:
    _view, _planned, ups = place([job("1", cls="A")])
    assert [(s.node, s.minor) for s in ups["1"].slots] == [("n2", 3)]
    _view, _planned, ups = place([job("2", cls="D")])
    assert [(s.node, s.minor) for s in ups["2"].slots] == [("n4", 0)]
    # with A placed first, D still keeps off A's best; PM-First's packing score comes
    # before class matching, so D packs onto the node A started (documented in PalMatch)
    _view, _planned, ups = place([job("1", cls="A"), job("2", cls="D")])
    assert ups["2"].slots[0].node == "n2" and ups["2"].slots[0].minor != 3
    assert ups["1"].tres_per_node == "gres:gpu:v100_g3:1" and ups["1"].node_list == "n2"
    assert ups["1"].clear_field == "TresPerNode" and ups["1"].original == ("tres_per_node", "gres:gpu:1")


def test_gpus_per_job_is_retyped_per_node_on_one_node_with_the_24_11_prefix() -> None:
    _v, _p, ups = place([job("1", tpn="", tpj="gres/gpu:2")])
    u = ups["1"]
    assert u.clear_field == "TresPerJob" and u.tres_per_node.startswith("gres/gpu:v100_g")
    assert len({s.node for s in u.slots}) == 1 and len(u.slots) == 2


def test_multi_node_job_gets_the_same_slots_on_each_node() -> None:
    nodes = [node("n1", used=(0,)), node("n2", used=(1,)), node("n3"), node("n4", used=(0, 1, 2))]
    _v, _p, ups = place([job("1", tpn="gres:gpu:2", nodes=2)], nodes)
    u = ups["1"]
    per_node = {}
    for s in u.slots:
        per_node.setdefault(s.node, set()).add(s.minor)
    assert len(per_node) == 2 and len({frozenset(v) for v in per_node.values()}) == 1
    assert u.tres_per_node.count("gpu:v100_g") == 2


@pytest.mark.parametrize(("kw", "reason"), [
    ({"tpn": "", "tres_per_task": "gres:gpu:1"}, "per task"),
    ({"tpn": "gres:gpu:v100_g1:1"}, "GPU type"),
    ({"required_nodes": "n1"}, "names nodes"),
    ({"tpn": "gres:gpu:9"}, "per node"),
    ({"tpn": "", "tpj": "gres:gpu:6"}, "several nodes"),
    ({"features": "v100|a100"}, "feature expression"),
    ({"tpn": "gres:gpu:1", "features": "a100"}, "needs 1 node"),
    ({"tpn": "gres:mps:10"}, "no GPUs"),
])
def test_unsteerable_jobs_are_released_unchanged_with_a_reason(kw: dict[str, object], reason: str) -> None:
    _v, planned, ups = place([job("1", **kw)])
    assert not ups and len(planned.skips) == 1 and reason in planned.skips[0].reason


def test_a_job_that_does_not_fit_now_waits_and_takes_nothing() -> None:
    nodes = [node(f"n{i}", used=(0, 1, 2)) for i in range(1, 5)]
    _v, planned, ups = place([job("1", tpn="gres:gpu:2"), job("2", tpn="gres:gpu:1")], nodes)
    assert "1" in planned.waiting and set(ups) == {"2"}


def test_promised_slots_of_released_jobs_are_not_free() -> None:
    promised = job("9", tpn="gres:gpu:v100_g3:1", required_nodes="n2", priority=100, state_reason="Resources",
                   admin_comment="pal: placed class=A gpus=n2:3 sf=0.900 policy=pal-match at=5 was tres_per_node gres:gpu:1")
    _view, _p, ups = place([promised, job("1", cls="A")])
    assert [(s.node, s.minor) for s in ups["1"].slots] != [("n2", 3)]
    # waiting for a begin time or another job, it keeps its placement but not the GPU meanwhile
    for reason in ("BeginTime", "Dependency"):
        _view, _p, ups = place([replace(promised, state_reason=reason), job("1", cls="A")])
        assert [(s.node, s.minor) for s in ups["1"].slots] == [("n2", 3)]
    assert holds.original_request(promised) == ("tres_per_node", "gres:gpu:1") and holds.placed_at(promised) == 5.0


def test_the_slot_a_waiting_quarantine_holder_takes_is_not_free() -> None:
    """`pal gpus quarantine` on a busy GPU: its holder job waits for the job on it and takes it
    next (top priority); a job placed there meanwhile would wait behind it."""
    tag = "pal: quarantine slot=n2:3 type=v100_g3 at=5 by=root: ECC"
    holder = job("9", tpn="gres:gpu:v100_g3:1", required_nodes="n2", state_reason="Resources", admin_comment=tag)
    g = {(s.node, s.minor): i for i, s in enumerate(cluster_view.build_view(FOUR, [], factors(SF), CLASSES).slots)}
    assert g[("n2", 3)] not in cluster_view.build_view(FOUR, [holder], factors(SF), CLASSES, NOW).free
    # the same job without an administrator's tag is a user's and promises nothing
    assert g[("n2", 3)] in cluster_view.build_view(FOUR, [replace(holder, admin_comment="")], factors(SF),
                                                   CLASSES, NOW).free


def test_gpus_slurm_is_about_to_start_or_just_started_a_job_on_are_not_free() -> None:
    """Two reads a cycle takes can lag behind Slurm (seen in the replay: a 16-GPU job placed on the
    GPUs of one released a cycle earlier waited 120 s until it was re-planned):
    - a job we just released still shows reason BeginTime, its begin time (the release) passed;
    - a job that started after the nodes were read shows in squeue with its GPUs, not yet in sinfo."""
    released = job("9", tpn="gres:gpu:v100_g3:1", required_nodes="n2", begin_time=NOW - 1,
                   admin_comment="pal: placed class=A gpus=n2:3 sf=0.900 policy=pal-match at=5 was tres_per_node gres:gpu:1")
    g = {(s.node, s.minor): i for i, s in enumerate(cluster_view.build_view(FOUR, [], factors(SF), CLASSES).slots)}
    assert g[("n2", 3)] not in cluster_view.build_view(FOUR, [released], factors(SF), CLASSES, NOW).free
    assert g[("n2", 3)] in cluster_view.build_view(FOUR, [released], factors(SF), CLASSES).free  # no clock: as before
    ahead = replace(released, begin_time=NOW + 60)  # a begin time still ahead: its GPU is free meanwhile
    assert g[("n2", 3)] in cluster_view.build_view(FOUR, [ahead], factors(SF), CLASSES, NOW).free
    started = replace(released, state="RUNNING", state_reason="None", nodes="n1",
                      gres_detail=("gpu:v100_g1:1(IDX:1),gpu:v100_g2:1(IDX:2)",))
    view = cluster_view.build_view(FOUR, [started], factors(SF), CLASSES, NOW)
    assert g[("n1", 1)] not in view.free and g[("n1", 2)] not in view.free and g[("n1", 0)] in view.free
    assert view.running == {"9": (g[("n1", 1)], g[("n1", 2)])}


def test_unschedulable_nodes_partitions_cpus_and_exclusions_are_respected() -> None:
    nodes = [node("n1", state="IDLE", flags=frozenset({"DRAIN"})), node("n2", partitions=("other",)),
             node("n3", alloc_cpus=8), node("n4")]
    _view, planned, ups = place([job("1", excluded_nodes="n4"), job("2")], nodes)
    assert {s.node for s in ups["2"].slots} == {"n4"}
    # job 1 may only use n1 (drained) and n3 (CPUs taken): both could take it later, so it waits
    assert "1" not in ups and "1" in planned.waiting and not planned.skips


def test_nodes_down_or_busy_make_a_job_wait_not_leave() -> None:
    """After a slurmctld restart every node reads UNKNOWN for a few seconds: held jobs wait for
    them (they used to be released unchanged: 'needs 1 node(s) ... (0)'). Only what no node
    could ever give (more memory or CPUs than a node has, a feature none has) is released."""
    unknown = [node(f"n{i}", state="UNKNOWN") for i in range(1, 5)]
    _v, planned, ups = place([job("1"), job("2", tpn="gres:gpu:2", nodes=2), job("3", exclusive=True)], unknown)
    assert not ups and not planned.skips and set(planned.waiting) == {"1", "2", "3"}
    busy = [node(f"n{i}", alloc_cpus=4) for i in range(1, 5)]
    _v, planned, ups = place([job("1", exclusive=True), job("2", min_cpus_per_node=8, cpus=8)], busy)
    assert not ups and set(planned.waiting) == {"1", "2"}
    _v, planned, ups = place([job("1", min_cpus_per_node=9, cpus=9), job("2", memory_per_node_mb=16001)], FOUR)
    assert not ups and {k.job.job_id for k in planned.skips if "needs 1 node" in k.reason} == {"1", "2"}


def test_summary_round_trip_and_match() -> None:
    _v, _planned, ups = place([job("1")])
    u = ups["1"]
    text = replace(slurm_updates.summary(u, "A", "pal-match", 3, [0.9], 1796000000),
                   was=(("tres_per_node", "gres:gpu:1"),)).render()
    placed = job("1", admin_comment=text, tres_per_node=u.tres_per_node, required_nodes=u.node_list, priority=5)
    assert holds.is_placed_by_pal(placed) and not holds.is_held_by_pal(placed, NOW)
    assert holds.original_request(placed) == ("tres_per_node", "gres:gpu:1") and holds.placed_at(placed) == 1796000000
    assert slurm_updates.matches(placed, u)
    assert not slurm_updates.matches(replace(placed, tres_per_node="gres:gpu:1"), u)


def test_unknown_gpus_get_the_worst_factor() -> None:
    known = {k: v for k, v in SF.items() if k != ("n1", 1)}
    view = cluster_view.build_view(FOUR, [], factors(known), CLASSES)
    g = next(i for i, s in enumerate(view.slots) if (s.node, s.minor) == ("n1", 1))
    assert view.cluster.sf("A")[g] == max(known.values())


def test_held_by_pal_begin_time_hold_and_the_old_priority_zero_hold() -> None:
    held = job("1")
    assert holds.is_held_by_pal(held, NOW) and not holds.held_by_priority(held)
    # just re-held with scontrol (reason not yet BeginTime), or reason BeginTime a moment past the time
    assert holds.is_held_by_pal(replace(held, state_reason="None"), NOW)
    assert holds.is_held_by_pal(replace(held, begin_time=NOW - 1), NOW)
    # the begin time passed and Slurm schedules it: not held any more, only the tag is left
    lapsed = replace(held, begin_time=NOW - 5, state_reason="Resources")
    assert not holds.is_held_by_pal(lapsed, NOW) and holds.hold_lapsed(lapsed, NOW)
    # the hold of earlier releases (priority 0 + tag) still counts, released with scontrol release
    old = replace(held, priority=0, state_reason="JobHeldAdmin", begin_time=None)
    assert holds.is_held_by_pal(old, NOW) and holds.held_by_priority(old) and not holds.hold_lapsed(old, NOW)
    # neither the tag alone, nor a begin time without the tag (the user's own --begin), nor a running job
    assert not holds.is_held_by_pal(replace(held, admin_comment="ticket 7"), NOW)
    assert not holds.is_held_by_pal(replace(held, state="RUNNING"), NOW)
    assert not holds.hold_lapsed(replace(held, state="RUNNING", begin_time=NOW - 5, state_reason="None"), NOW)


def test_begin_time_parsed_from_eligible_time_in_both_versions() -> None:
    for version in ("22.05", "24.11"):
        doc = parse_json.load((DATA.parent / version / "squeue.json").read_text(), "squeue --json")
        jobs = parse_json.jobs_from_doc(doc)
        running = [j for j in jobs if j.running]
        assert running and all(j.begin_time and j.begin_time > 1.7e9 for j in running), version
        # priority-0 holds have no eligible time yet (0): unset, not 1970
        assert all(j.begin_time is None for j in jobs if j.pending and j.priority == 0), version
