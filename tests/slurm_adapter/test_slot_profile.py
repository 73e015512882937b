"""Re-profiling a GPU out of service, without Slurm: where each GPU is profiled
(pal_slurm/cli/reprofile.py), the profiling job in the slot (pal_slurm/profiler/submit.py), the
holder's hand-over through the one writer (pal_slurm/placer/writer.py, `profile_in_slot`), the
minor numbers a job inside the slot profiles, and when the GPU passes
(pal_slurm/classification/release_check.py). The real thing: tests/slurm/test_gpu_quarantine.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pal_slurm.classification.actions import DRAIN, PLACEMENT, REPROFILE, GpuAction
from pal_slurm.classification.release_check import verdict
from pal_slurm.cli.reprofile import Target, plan_reprofile
from pal_slurm.errors import PalError, SlurmError
from pal_slurm.gpu.choose import SimOptions, open_backend
from pal_slurm.placer.writer import profile_in_slot
from pal_slurm.profiler.service import indices_of_minors
from pal_slurm.profiler.submit import SLOT_JOB_NAME, SubmitOptions, slot_sbatch_argv
from pal_slurm.slurm.quarantine_model import Holder, QuarantineTag, Slot

SLOT = Slot("n4", 3, "v100_g3")
TAG = QuarantineTag(SLOT, 1_800_000_000, "root", "ECC errors")
RUNNING = Holder("77", TAG, "RUNNING", "None")


class FakeSlurm:
    """Records the writes; `fail` names the call (by its position) that raises."""

    def __init__(self, fail: int | None = None, cancel_fails: bool = False) -> None:
        self.calls: list[tuple[str, str]] = []
        self.fail, self.cancel_fails = fail, cancel_fails
        self.next_id = 100

    def _step(self, what: str, arg: str) -> None:
        self.calls.append((what, arg))
        if self.fail == len(self.calls):
            raise SlurmError(f"{what} failed")

    def submit(self, argv: list[str]) -> str:
        self.next_id += 1
        self._step("submit", next(a for a in argv if a.startswith("--job-name=")))
        return str(self.next_id)

    def tag(self, job_id: str, tag: QuarantineTag) -> None:
        self._step("tag", job_id)

    def cancel(self, job_id: str) -> None:
        if self.cancel_fails and ("cancel", job_id) not in self.calls and job_id != "77":
            self.calls.append(("cancel", job_id))
            raise SlurmError("scancel: timed out")
        self._step("cancel", job_id)


def test_the_hand_over_keeps_the_slot_held_at_every_step() -> None:
    argv = slot_sbatch_argv("n4", 3, "v100_g3", "high", SubmitOptions())
    ok = FakeSlurm()
    assert profile_in_slot(ok, RUNNING, "high", argv) == ("101", "102")  # type: ignore[arg-type]
    # the profiling job first, then the new holder (younger, same priority), only then the old one goes
    assert ok.calls == [("submit", f"--job-name={SLOT_JOB_NAME}"), ("submit", "--job-name=pal-quarantine"),
                        ("tag", "102"), ("cancel", "77")]
    # a new holder that cannot be submitted: the profiling job is cancelled, the old holder untouched
    no_holder = FakeSlurm(fail=2)
    with pytest.raises(SlurmError, match="profiling job 101 cancelled; holder job 77 keeps the slot"):
        profile_in_slot(no_holder, RUNNING, "high", argv)  # type: ignore[arg-type]
    assert ("cancel", "77") not in no_holder.calls and no_holder.calls[-1] == ("cancel", "101")
    # the old holder's cancel fails (it may have been carried out all the same): the profiling job goes, the
    # new holder stays, so one of the two holds the slot
    stuck = FakeSlurm(fail=4)
    with pytest.raises(SlurmError, match="holder job 77 maybe not cancelled .* holder job 102 kept"):
        profile_in_slot(stuck, RUNNING, "high", argv)  # type: ignore[arg-type]
    assert stuck.calls[-1] == ("cancel", "101") and ("cancel", "102") not in stuck.calls
    # and when undoing fails too, the jobs left are named for the operator
    worse = FakeSlurm(fail=2, cancel_fails=True)
    with pytest.raises(SlurmError, match=r"scancel 101"):
        profile_in_slot(worse, RUNNING, "high", argv)  # type: ignore[arg-type]


def test_the_slot_job_asks_for_the_slot_alone_at_the_holders_priority() -> None:
    argv = slot_sbatch_argv("n4", 3, "v100_g3", "high", SubmitOptions(account="ops", extra_run_args=("--passes", "5")))
    assert "--gres=gpu:v100_g3:1" in argv and "--nodelist=n4" in argv and "--partition=high" in argv
    assert "--priority=TOP" in argv and "--account=ops" in argv
    assert "--exclusive" not in argv and not any(a.startswith("--nice") for a in argv)
    assert "--export=PAL_CONFIG,PATH,HOME,LANG,TZ" in argv
    tail = argv[argv.index("profile"):]
    assert tail[:2] == ["profile", "run"] and tail[tail.index("--minors") + 1] == "3" and tail[-2:] == ["--passes", "5"]
    with pytest.raises(PalError, match="not a node name"):
        slot_sbatch_argv("n4;rm", 3, "v100_g3", "high", SubmitOptions())


def holder(minor: int, state: str = "RUNNING", node: str = "n4", job: str = "77") -> Holder:
    slot = Slot(node, minor, f"v100_g{minor}")
    return Holder(job, QuarantineTag(slot, 1, "root"), state, "None" if state == "RUNNING" else "Resources")


def test_each_gpu_is_profiled_whole_in_its_slot_or_not_now() -> None:
    targets = [Target("a", "n1", 0), Target("b", "n1", 2), Target("c", "n4", 3), Target("d", "n4", 1),
               Target("e", "n3", 1), Target("f", "n2", None)]
    plan = plan_reprofile(targets, [holder(3), holder(1, "PENDING", node="n3", job="80")])
    assert plan.nodes == ("n1", "n2")  # each node once, in the order asked
    assert [(t.uuid, h.job_id) for t, h in plan.in_slot] == [("c", "77")]
    assert [(t.uuid, h.job_id) for t, h in plan.waiting] == [("e", "80")]
    assert [(t.uuid, h.job_id) for t, h in plan.blocked] == [("d", "77")]  # n4 cannot take an exclusive job
    # during a hand-over the slot has two holders: the one on it counts
    twice = plan_reprofile([Target("c", "n4", 3)], [holder(3, "PENDING", job="90"), holder(3, job="77")])
    assert [h.job_id for _, h in twice.in_slot] == ["77"] and not twice.waiting


def test_a_job_in_the_slot_profiles_the_gpus_of_its_minor_numbers() -> None:
    backend = open_backend("sim", node="x", sim=SimOptions(nodes=1, gpus_per_node=4))
    try:
        assert indices_of_minors(backend, (3, 1)) == (3, 1)
        with pytest.raises(PalError, match=r"no GPU with minor number 7 on this node \(minors: 0, 1, 2, 3\)"):
            indices_of_minors(backend, (7,))
    finally:
        backend.close()


T0 = datetime(2026, 11, 1, tzinfo=UTC)


def action(kind: str) -> GpuAction:
    return GpuAction("u", "n4", "V100", kind, "slow on gemm-fp16", ("gemm-fp16",), 1.4)


@pytest.mark.parametrize(("profiled", "graded", "passed", "why"), [
    ([T0 - timedelta(days=3)], None, False, "no profile run since it went out of service"),
    ([], None, False, "not profiled"),
    ([T0 + timedelta(hours=3)], None, False, "after classification 7 was computed: run `pal classify`"),
    ([T0 + timedelta(hours=1), T0 - timedelta(days=1)], None, True, "an outlier on no benchmark"),
    ([T0 + timedelta(hours=1)], PLACEMENT, True, "placement handles it"),
    ([T0 + timedelta(hours=1)], REPROFILE, False, "graded re-profile"),
    ([T0 + timedelta(hours=1)], DRAIN, False, "graded drain"),
])
def test_a_gpu_passes_when_classified_runs_since_its_quarantine_grade_it_no_worse_than_placement(
        profiled: list[datetime], graded: str | None, passed: bool, why: str) -> None:
    v = verdict(profiled, None if graded is None else action(graded), T0, classified_at=T0 + timedelta(hours=2),
                version=7)
    assert v.passed is passed and why in v.why, v
