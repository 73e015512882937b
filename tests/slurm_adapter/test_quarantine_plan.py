"""The planning of `pal gpus quarantine` / `release` without Slurm (pal_slurm/slurm/quarantine_model.py,
quarantine_shapes.py, quarantine_plan.py): which slot a name means, what a holder is, what would
run, and which pending jobs a quarantine would leave with nowhere to run. The real thing:
tests/slurm/test_gpu_quarantine.py."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pal_slurm.errors import SlurmError
from pal_slurm.placer.writer import quarantine, release_quarantine, restart_holder
from pal_slurm.slurm.quarantine import parse_partitions
from pal_slurm.slurm.quarantine_model import (
    HOLDER_NAME,
    Holder,
    Partition,
    Slot,
    QuarantineTag,
    Refused,
    SlurmState,
    clean_reason,
    find_slot,
    holder_partition,
    holders,
    job_id_of,
    jobs_on,
    parse_gpu,
    submit_argv,
    tag_argv,
)
from pal_slurm.slurm.quarantine_plan import plan_quarantine, plan_release
from pal_slurm.slurm.quarantine_shapes import check
from pal_slurm.slurm.model import SlurmJob, SlurmNode

FOUR = ",".join(f"gpu:v100_g{m}:1" for m in range(4))


def node(name: str, gres: str = FOUR, cpus: int = 8, features: frozenset[str] = frozenset({"v100"})) -> SlurmNode:
    return SlurmNode(name=name, state="IDLE", flags=frozenset(), cpus=cpus, alloc_cpus=0, real_memory_mb=16000,
                     alloc_memory_mb=0, features=features, active_features=features, partitions=("gpu",), gres=gres,
                     gres_used="")


def job(job_id: str, state: str = "PENDING", **kw: object) -> SlurmJob:
    base = SlurmJob(job_id=job_id, name="j", user="alice", state=state, state_reason="Resources", priority=1,
                    partition="gpu", submit_time=0.0)
    return replace(base, **kw)  # type: ignore[arg-type]


NODES = (node("n1"), node("n2"), node("n3"), node("n4"))
PARTS = (Partition("gpu", frozenset({"n1", "n2", "n3", "n4"}), 1), Partition("high", frozenset({"n3", "n4"}), 10),
         Partition("down", frozenset({"n4"}), 50, up=False))
SLOT = Slot("n4", 3, "v100_g3")
TAG = QuarantineTag(SLOT, 1_800_000_000, "root", "ECC errors")


def holder_job(job_id: str = "77", state: str = "RUNNING", admin: bool = True) -> SlurmJob:
    text = TAG.render()
    return job(job_id, state=state, name=HOLDER_NAME, user="root", tres_per_node="gres/gpu:v100_g3:1",
               required_nodes="n4", nodes="n4" if state == "RUNNING" else "", comment=text,
               admin_comment=text if admin else "", state_reason="None" if state == "RUNNING" else "Resources")


def state(*jobs: SlurmJob, nodes: tuple[SlurmNode, ...] = NODES) -> SlurmState:
    return SlurmState(nodes, jobs, PARTS, tuple(holders(jobs, "root")))


# ---------------------------------------------------------------- names, tags, holders

@pytest.mark.parametrize(("text", "want"), [("n4:3", ("n4", 3)), (" gpu-01.x:12 ", ("gpu-01.x", 12)),
                                            ("n4", None), ("n4:x", None), ("GPU-0a1b2c3d", None), (":3", None),
                                            ("n[1-2]:3", None), ("ALL:3", ("ALL", 3))])
def test_a_gpu_is_node_colon_minor(text: str, want: tuple[str, int] | None) -> None:
    assert parse_gpu(text) == want


def test_find_slot_names_what_slurm_has() -> None:
    assert find_slot(NODES, "n4", 3) == SLOT
    with pytest.raises(Refused, match=r"n9: not a node Slurm knows \(nodes: n1, n2, n3, n4\)"):
        find_slot(NODES, "n9", 3)
    with pytest.raises(Refused, match=r"n4 has no GPU slot 4 in Slurm \(slots: 0, 1, 2, 3\)"):
        find_slot(NODES, "n4", 4)
    with pytest.raises(Refused, match="no per-slot GRES types"):
        find_slot((node("n4", gres="gpu:4"),), "n4", 3)
    with pytest.raises(Refused, match="not a node Slurm knows"):
        find_slot(NODES, "ALL", 3)  # NodeName=ALL is never one node


def test_tag_round_trips_and_refuses_other_comments() -> None:
    assert QuarantineTag.parse(TAG.render()) == TAG
    assert QuarantineTag.parse(replace(TAG, reason="").render()) == replace(TAG, reason="")
    for other in ("pal: placed class=A", "pal:held class=A", "pal: quarantine slot=n4 type=x at=1 by=r", "", None):
        assert QuarantineTag.parse(other) is None
    assert clean_reason("  ECC\terrors |  ticket\n42 ") == "ECC errors ticket 42"
    assert len(clean_reason("x" * 500)) == 200
    with pytest.raises(Refused, match="give a reason"):
        clean_reason(" \n ")


def test_holders_are_known_by_the_admin_comment_or_by_pal_users_named_job() -> None:
    tagged = holder_job("77")
    untagged = holder_job("78", state="PENDING", admin=False)  # between sbatch and the tag
    forged = replace(holder_job("79", admin=False), user="mallory")  # a user's job named like one
    wrong_slot = replace(holder_job("80"), tres_per_node="gres/gpu:v100_g2:1")
    ended = holder_job("81", state="COMPLETED")
    found = holders([tagged, untagged, forged, wrong_slot, ended, job("5")], "root")
    assert [(h.job_id, h.holds, h.waiting, h.tagged) for h in found] == [("77", True, False, True),
                                                                         ("78", False, True, False)]
    assert all(h.slot == SLOT for h in found)


def test_jobs_on_the_slot_from_their_gres_detail() -> None:
    on = job("1", state="RUNNING", nodes="n3,n4", gres_detail=("gpu:v100_g3:1(IDX:3)", "gpu:v100_g3:1(IDX:3)"))
    beside = job("2", state="RUNNING", nodes="n4", gres_detail=("gpu:v100_g2:1(IDX:2),gpu:v100_g3:0(IDX:)",))
    elsewhere = job("3", state="RUNNING", nodes="n3", gres_detail=("gpu:v100_g3:1(IDX:3)",))
    assert jobs_on(SLOT, [on, beside, elsewhere, holder_job()]) == ["1"]


def test_the_holders_partition_is_the_up_one_of_the_highest_tier() -> None:
    assert holder_partition(PARTS, "n4") == "high"
    assert holder_partition(PARTS, "n1") == "gpu"
    with pytest.raises(Refused, match="in no partition that is UP"):
        holder_partition(PARTS, "n9")


def test_partitions_from_scontrol_show_partition() -> None:
    text = ("PartitionName=gpu AllowGroups=ALL Nodes=pal-n[1-4] PriorityTier=1 State=UP\n"
            "PartitionName=gpu-high Nodes=pal-n[3-4] PriorityTier=10 State=DOWN TotalNodes=2\n"
            "PartitionName=empty Nodes=(null) State=UP\n")
    assert parse_partitions(text) == [
        Partition("gpu", frozenset({"pal-n1", "pal-n2", "pal-n3", "pal-n4"}), 1, True),
        Partition("gpu-high", frozenset({"pal-n3", "pal-n4"}), 10, False),
        Partition("empty", frozenset(), 1, True)]


def test_the_commands_are_argument_lists() -> None:
    argv = submit_argv(SLOT, "high", TAG)
    assert argv[:2] == ["sbatch", "--parsable"]
    for want in ("--job-name=pal-quarantine", "--partition=high", "--nodelist=n4", "--nodes=1", "--ntasks=1",
                 "--cpus-per-task=1", "--mem=1", "--gres=gpu:v100_g3:1", "--priority=TOP", "--requeue",
                 "--wrap=exec sleep infinity", f"--comment={TAG.render()}"):
        assert want in argv
    assert not any(a.startswith("--time") for a in argv)  # the partition's default, then none by scontrol
    assert tag_argv("123", TAG) == ["scontrol", "update", "JobId=123", f"AdminComment={TAG.render()}",
                                    "TimeLimit=UNLIMITED"]
    assert job_id_of("123;paltest\n") == "123"
    with pytest.raises(Refused):
        job_id_of("sbatch: error: ...")


# ---------------------------------------------------------------- which pending jobs it would strand

def blocked(*jobs: SlurmJob, held_out: tuple[Slot, ...] = (), nodes: tuple[SlurmNode, ...] = NODES) -> list[str]:
    return [b.job_id for b in check(jobs, nodes, PARTS, held_out, SLOT).blocked]


def test_a_job_pinned_to_the_node_that_needs_every_gpu_or_the_node_whole_is_blocked() -> None:
    assert blocked(job("1", required_nodes="n4", tres_per_node="gres:gpu:4")) == ["1"]
    assert blocked(job("2", required_nodes="n4", tres_per_node="gres/gpu:3")) == []
    assert blocked(job("3", required_nodes="n4", tres_per_job="gres:gpu:4", node_count=1, max_nodes=1)) == ["3"]
    assert blocked(job("4", required_nodes="n4", exclusive=True)) == ["4"]
    assert blocked(job("5", required_nodes="n4", min_cpus_per_node=8)) == ["5"]  # every CPU: the holder takes one
    assert blocked(job("6", required_nodes="n4", tres_per_node="gres:gpu:v100_g3:1")) == ["6"]
    assert blocked(job("7", required_nodes="n4", tres_per_node="gres:gpu:v100_g2:1")) == []


def test_a_job_that_needs_as_many_full_nodes_as_there_are_is_blocked() -> None:
    assert blocked(job("1", tres_per_node="gres:gpu:4", node_count=4)) == ["1"]
    assert blocked(job("2", tres_per_node="gres:gpu:4", node_count=3)) == []
    assert blocked(job("3", exclusive=True, node_count=4)) == ["3"]
    assert blocked(job("4", exclusive=True, node_count=3)) == []
    assert blocked(job("5", tres_per_job="gres:gpu:16")) == ["5"]
    assert blocked(job("6", tres_per_job="gres:gpu:15")) == []
    # its partition, excluded nodes and features narrow where it may run
    assert blocked(job("7", tres_per_node="gres:gpu:4", node_count=2, partition="high")) == ["7"]
    assert blocked(job("8", tres_per_node="gres:gpu:4", node_count=3, excluded_nodes="n1")) == ["8"]
    odd = (*NODES[:3], node("n4", features=frozenset({"v100", "nvlink"})))
    assert blocked(job("9", tres_per_node="gres:gpu:4", features="nvlink"), nodes=odd) == ["9"]
    assert blocked(job("10", tres_per_node="gres:gpu:4", features="nvlink|ib"), nodes=odd) == []  # not modelled


def test_only_what_the_new_quarantine_strands_counts() -> None:
    other = Slot("n4", 2, "v100_g2")
    # already unplaceable with n4:2 out of service: not this quarantine's doing
    assert blocked(job("1", required_nodes="n4", tres_per_node="gres:gpu:4"), held_out=(other,)) == []
    assert blocked(job("2", required_nodes="n4", tres_per_node="gres:gpu:3"), held_out=(other,)) == ["2"]
    # running jobs, CPU-only jobs and the holders themselves are not checked
    assert blocked(job("3", state="RUNNING", required_nodes="n4", tres_per_node="gres:gpu:4")) == []
    assert blocked(job("4", required_nodes="n4")) == []


def test_gpus_per_task_are_named_not_checked() -> None:
    result = check([job("1", tres_per_task="gres/gpu:1", required_nodes="n4")], NODES, PARTS, (), SLOT)
    assert result.blocked == () and result.unchecked == ("1",)


# ---------------------------------------------------------------- plans

def test_plan_quarantine() -> None:
    busy = job("9", state="RUNNING", nodes="n4", gres_detail=("gpu:v100_g3:1(IDX:3)",))
    plan = plan_quarantine(state(busy), "n4", 3, reason="ECC errors", user="root", now=1_800_000_000.5)
    assert (plan.slot, plan.partition, plan.tag, plan.busy, plan.refused) == (SLOT, "high", TAG, ("9",), False)
    assert plan.commands == [submit_argv(SLOT, "high", TAG), tag_argv("<job id sbatch prints>", TAG)]
    assert plan_quarantine(state(), "n4", 3, reason="", user="root", now=0, partition="gpu").partition == "gpu"
    for part, why in (("nope", "not a partition Slurm knows"), ("down", "is not UP"), ("high", "does not hold n1")):
        with pytest.raises(Refused, match=why):
            plan_quarantine(state(), "n1" if part == "high" else "n4", 3, reason="", user="r", now=0, partition=part)


def test_plan_quarantine_refuses_for_stranded_jobs_unless_forced() -> None:
    whole = job("5", required_nodes="n4", tres_per_node="gres:gpu:4")
    plan = plan_quarantine(state(whole), "n4", 3, reason="x", user="root", now=0)
    assert plan.refused and [b.job_id for b in plan.blocked] == ["5"]
    assert "must run on n4, which would have 3 GPU(s) left" in plan.blocked[0].why
    assert not plan_quarantine(state(whole), "n4", 3, reason="x", user="root", now=0, force=True).refused


def test_plan_quarantine_of_a_slot_out_of_service_already_does_nothing() -> None:
    plan = plan_quarantine(state(holder_job("77")), "n4", 3, reason="again", user="root", now=0)
    assert [h.job_id for h in plan.present] == ["77"]
    # another slot of that node: the holder there counts as held out
    other = plan_quarantine(state(holder_job("77")), "n4", 2, reason="x", user="root", now=0)
    assert other.present == () and other.slot.gres_type == "v100_g2"


def test_plan_release() -> None:
    plan = plan_release(state(holder_job("77")), "n4", 3)
    assert [h.job_id for h in plan.holders] == ["77"] and plan.commands == [["scancel", "77"]]
    assert plan_release(state(), "n4", 3).holders == ()
    # a holder whose node Slurm no longer lists is still released
    gone = plan_release(state(holder_job("77"), nodes=NODES[:3]), "n4", 3)
    assert [h.job_id for h in gone.holders] == ["77"]
    with pytest.raises(Refused):
        plan_release(state(), "n4", 9)


# ---------------------------------------------------------------- the writes, through the one writer

class FakeSlurm:
    def __init__(self, tag_fails: bool = False, cancel_fails: bool = False) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.tag_fails, self.cancel_fails = tag_fails, cancel_fails

    def submit(self, argv: list[str]) -> str:
        self.calls.append(("submit", argv[0]))
        return "123"

    def tag(self, job_id: str, tag: QuarantineTag) -> None:
        self.calls.append(("tag", job_id))
        if self.tag_fails:
            raise SlurmError("scontrol update: Access/permission denied")

    def cancel(self, job_id: str) -> None:
        self.calls.append(("cancel", job_id))
        if self.cancel_fails:
            raise SlurmError("scancel: timed out")


def test_writer_submits_then_tags_and_cancels_an_untagged_holder() -> None:
    ok = FakeSlurm()
    assert quarantine(ok, "high", TAG) == "123"  # type: ignore[arg-type]
    assert ok.calls == [("submit", "sbatch"), ("tag", "123")]
    bad = FakeSlurm(tag_fails=True)
    with pytest.raises(SlurmError, match="holder job 123 not tagged .*; cancelled again"):
        quarantine(bad, "high", TAG)  # type: ignore[arg-type]
    assert bad.calls[-1] == ("cancel", "123")
    worse = FakeSlurm(tag_fails=True, cancel_fails=True)
    with pytest.raises(SlurmError, match=r"cancel it by hand \(scancel 123\)"):
        quarantine(worse, "high", TAG)  # type: ignore[arg-type]
    rel = FakeSlurm()
    release_quarantine(rel, Holder("77", TAG, "RUNNING", "None"))  # type: ignore[arg-type]
    assert rel.calls == [("cancel", "77")]


def test_a_holder_requeued_after_a_node_failure_is_started_again() -> None:
    requeued = replace(holder_job("77", state="PENDING"), state_reason="BeginTime")
    plan = plan_quarantine(state(requeued), "n4", 3, reason="", user="root", now=0)
    assert [h.job_id for h in plan.requeued] == ["77"]
    assert plan.commands == [["scontrol", "update", "JobId=77", "StartTime=now"]]
    waiting = plan_quarantine(state(holder_job("78", state="PENDING")), "n4", 3, reason="", user="root", now=0)
    assert waiting.present and not waiting.requeued and waiting.commands == []
    fake = FakeSlurm()
    fake.start_now = lambda job_id: fake.calls.append(("start_now", job_id))  # type: ignore[method-assign]
    restart_holder(fake, plan.requeued[0])  # type: ignore[arg-type]
    assert fake.calls == [("start_now", "77")]
