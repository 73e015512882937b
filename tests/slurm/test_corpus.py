"""A corpus of unusual submissions: each ends exactly as it would without pal-slurm.

Every case is submitted twice on the real test cluster, in two batches:
  off  the filter's kill switch present and no placer: plain Slurm;
  pal  the filter in enforce mode and a real `pal placer` running (0.5 s cycle).
The module fixture runs both batches once (submit everything, then poll all jobs with one
`squeue --json` per round) and each parametrized test compares one case:
  - both rejected at submit: same exit code and the same first stderr line;
  - both accepted: the same final state class for every record of the job (array tasks, het
    components): finished with the same state and exit code, or still pending for the same
    reason once the others settled (user hold, dependency, begin time, a partition limit);
  - in the pal run nothing is left held by pal-slurm (pending with admin_comment `pal:held`,
    whether held through the begin time or, as earlier releases did, with priority 0).
Where pal-slurm is meant to act, the case also says what the placer must have done to it
("placed", "released unchanged", untouched), so the pal run is not plain Slurm by accident.

One intended difference, asserted as such: a bare model type (`--gres=gpu:v100:N`,
`--gpus=v100:N`) is refused by plain Slurm here (gres.conf has only per-slot types) and
accepted with the filter, which rewrites it to an untyped count plus the model feature.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.slurm.conftest import FINISHED, SlurmCluster
from tests.slurm.placer_support import PlacerProcess, make_db, write_config
from tests.slurm.records import exit_code, job_state, records_of, return_code, tagged_held
from tests.slurm.placer_rig import wait_idle

pytestmark = pytest.mark.slurm

STATE_CACHE_S = 2.2
SETTLE_TIMEOUT_S = 75
#: pending reasons that no amount of waiting changes (in this corpus)
STABLE_PENDING = frozenset({"JobHeldUser", "JobHeldAdmin", "Dependency", "BeginTime", "PartitionConfig",
                            "DependencyNeverSatisfied", "PartitionNodeLimit", "BadConstraints"})
ODD_NAME = 'x"; rm -rf / # ünï $(id)'
OFF = "untouched"        # pal-slurm must not have touched the job (no pal admin_comment)
PLACED = "placed"        # the placer retyped and placed it
RELEASED = "released"    # held, then released unchanged (with the reason in admin_comment)
REWRITE = "rewrite"      # the intended difference: plain Slurm refuses, pal accepts and places


@dataclass(frozen=True)
class Case:
    id: str
    args: tuple[str, ...]
    pal: str | None = None       # OFF, PLACED, RELEASED, REWRITE, or None: no claim
    wrap: str | None = "sleep 0.2"

    def argv(self, script: Path, dep: str) -> list[str]:
        args = [a.replace("{dep}", dep).replace("{script}", str(script)) for a in self.args]
        if self.wrap is not None and str(script) not in args:
            args += ["--wrap", self.wrap]
        return args


#: a job that exits with (its GPUs x 10 + its nodes): the corpus compares exit codes, so the
#: pal run must give the job exactly the shape plain Slurm gives it
SHAPE = 'n=$(echo "$SLURM_JOB_GPUS" | tr "," "\\n" | grep -c .); exit $(( n * 10 + SLURM_JOB_NUM_NODES ))'

CASES = [
    Case("plain-gres", ("--gres=gpu:1",), PLACED),
    Case("repeated-gres", ("--gres=gpu:1,gpu:1",), PLACED, wrap=SHAPE),
    Case("gres-two", ("--gres=gpu:2",), PLACED, wrap=SHAPE),
    Case("gpus-per-node-two", ("--gpus-per-node=2",), PLACED, wrap=SHAPE),
    Case("gpus-two-one-node", ("--gpus=2", "-N", "1"), PLACED, wrap=SHAPE),
    Case("plain-gpus", ("--gpus=2",), PLACED),
    Case("zero-gpus", ("--gres=gpu:0",), OFF),
    Case("no-gpus", ("-n", "1"), OFF),
    Case("gres-no-count", ("--gres=gpu",), PLACED),
    Case("more-gpus-than-any-node", ("--gres=gpu:9",)),
    Case("huge-gpus", ("--gpus=100000",)),
    Case("huge-gres", ("--gres=gpu:100000",)),
    Case("misspelt-type", ("--gres=gpu:v1000:1",)),
    # Slurm matches GRES types case-insensitively at submit (gpu:V100_G2:1 is accepted), so
    # the filter's case-insensitive rewrite of V100 is the same intended difference as v100
    Case("uppercase-model", ("--gres=gpu:V100:1",), REWRITE),
    Case("uppercase-slot-type", ("--gres=gpu:V100_G2:1",)),
    Case("uppercase-gres-name", ("--gres=GPU:1",)),
    Case("bare-model-gres", ("--gres=gpu:v100:2",), REWRITE),
    Case("bare-model-gpus", ("--gpus=v100:1",), REWRITE),
    Case("bare-model-with-constraint", ("--gres=gpu:v100:1", "--constraint=v100"), REWRITE),
    Case("slot-type", ("--gres=gpu:v100_g2:1",), OFF),
    Case("typed-and-untyped", ("--gres=gpu:1,gpu:v100_g2:1",)),
    Case("odd-name", ("-J", ODD_NAME, "--gres=gpu:1"), PLACED),
    Case("newline-comment", ("--comment", "a\nb", "--gres=gpu:1"), PLACED),
    Case("metachar-comment", ("--comment", "$(reboot) `id` ; | & > /etc/x ' \" \\", "--gpus=1"), PLACED),
    Case("forged-tag-comment", ("--comment", "pal:held class=A src=spank", "--gres=gpu:1"), PLACED),
    Case("unicode-name", ("-J", "学習ジョブ-ünï-🚀", "--gres=gpu:1"), PLACED),
    Case("array", ("--array=0-2", "--gres=gpu:1"), OFF),
    Case("array-throttled", ("--array=0-3%2", "--gpus=1"), OFF),
    Case("het", ("--gres=gpu:1", ":", "--gres=gpu:1", "{script}"), OFF, wrap=None),
    Case("exclusive", ("--exclusive", "--gres=gpu:1"), PLACED),
    Case("non-gpu-gres", ("--gres=mps:10",)),
    Case("gpus-per-task", ("--gpus-per-task=1", "-n", "2"), RELEASED),
    Case("gpus-per-socket-no-sockets", ("--gpus-per-socket=1",)),
    Case("gpus-per-socket", ("--gpus-per-socket=1", "--sockets-per-node=1")),
    Case("nodelist", ("--gres=gpu:1", "-w", "pal-n2"), OFF),
    Case("exclude", ("--gres=gpu:1", "-x", "pal-n1"), PLACED),
    Case("constraint", ("--gres=gpu:1", "--constraint=v100"), PLACED),
    Case("constraint-or", ("--gres=gpu:1", "--constraint=v100|nope")),
    Case("too-much-memory", ("--gres=gpu:1", "--mem=999999")),
    Case("whole-node-memory", ("--gres=gpu:1", "--mem=16000"), PLACED),
    Case("five-nodes", ("--gres=gpu:1", "--nodes=5"), RELEASED),
    Case("too-many-cpus", ("--gres=gpu:1", "-c", "9")),
    Case("user-hold", ("--hold", "--gres=gpu:1"), OFF),
    Case("priority-zero", ("--priority=0", "--gres=gpu:1"), PLACED),   # sbatch ignores --priority=0
    Case("begin-later", ("--begin=now+1hour", "--gres=gpu:1"), OFF),   # its own begin time: not held
    Case("dependency", ("--dependency=afterok:{dep}", "--gres=gpu:1")),
    Case("bad-dependency", ("--dependency=afterok:999999999", "--gres=gpu:1")),
    Case("pal-class-off", ("--pal-class=off", "--gres=gpu:1"), OFF),
    Case("pal-class-bogus", ("--pal-class=bogus", "--gres=gpu:1")),
    Case("comment-class-z", ("--comment", "pal:class=Z", "--gres=gpu:1"), PLACED),
    Case("gres-v100-2-typed-slots", ("--gres=gpu:v100_g0:1,gpu:v100_g3:1",), OFF),
    Case("gpus-per-node-two-nodes", ("--gpus-per-node=2", "-N", "2"), PLACED, wrap=SHAPE),
    Case("gpus-over-nodes", ("--gpus=6",), RELEASED),
    Case("gres-and-gpus", ("--gres=gpu:1", "--gpus=2")),
    Case("time-zero", ("--time=0", "--gres=gpu:1"), PLACED),
    Case("no-such-partition", ("-p", "nosuchpartition", "--gres=gpu:1")),
    Case("fails-exit-3", ("--gres=gpu:1",), PLACED, wrap="exit 3"),
    Case("killed", ("--gpus=1",), PLACED, wrap="kill -9 $$"),
]


# ---------------------------------------------------------------- running a batch


@dataclass
class Outcome:
    """What one submission came to: rejected (rc, first stderr line) or its jobs' records."""

    rc: int
    error: str
    job_id: str | None
    records: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> tuple[Any, ...]:
        if self.job_id is None:
            return ("rejected", self.rc, self.error)
        out = []
        for r in self.records:
            state = job_state(r)
            if state in FINISHED:
                out.append((state, exit_code(r)))
            else:
                out.append((state, r.get("state_reason")))
        return ("accepted", tuple(sorted(out, key=repr)))


def _settled(rec: dict[str, Any]) -> bool:
    state = job_state(rec)
    if state in FINISHED:
        return True
    return state == "PENDING" and rec.get("state_reason") in STABLE_PENDING and not tagged_held(rec)


def _array_expanded(recs: Sequence[dict[str, Any]]) -> bool:
    """A pending array record still stands for tasks not started yet."""
    return not any(r.get("array_task_string") for r in recs if job_state(r) not in FINISHED
                   and r.get("state_reason") not in STABLE_PENDING)


def run_batch(cluster: SlurmCluster, cases: Sequence[Case], script: Path, tag: str) -> dict[str, Outcome]:
    """Submit every case, then poll (one squeue --json per round) until all settled or timeout.
    Both batches start on an idle cluster: a node still registering after a slurmctld restart
    makes Slurm refuse requests it accepts a moment later."""
    wait_idle(cluster)
    dep = cluster.submit(["-J", f"corpus-{tag}-dep", "--hold", "-o", "/dev/null", "--wrap", "true"])
    out: dict[str, Outcome] = {}
    for case in cases:
        argv = ["sbatch", "--parsable", "-o", "/dev/null", "-J", f"corpus-{tag}-{case.id}", *case.argv(script, dep)]
        proc = cluster.run(argv, check=False)
        first = next((ln.strip() for ln in proc.stderr.splitlines() if ln.strip()), "")
        job_id = proc.stdout.strip().split(";")[0] if proc.returncode == 0 else None
        if job_id is not None:
            assert job_id.isdigit(), (case.id, proc.stdout, proc.stderr)
            cluster.submitted.append(job_id)
        out[case.id] = Outcome(proc.returncode, first.replace(dep, "<dep>"), job_id)
    accepted = {cid: o for cid, o in out.items() if o.job_id}
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        jobs = cluster.squeue_json()["jobs"]
        for o in accepted.values():
            o.records = records_of(jobs, o.job_id or "")
        if all(o.records and all(_settled(r) for r in o.records) and _array_expanded(o.records)
               for o in accepted.values()) or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    cluster.cancel([dep] + [o.job_id for o in accepted.values() if o.job_id])
    return out


# ---------------------------------------------------------------- the two batches


@dataclass
class Runs:
    off: dict[str, Outcome]
    pal: dict[str, Outcome]
    placer_log: str


@pytest.fixture(scope="module")
def runs(slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    tmp = tmp_path_factory.mktemp("corpus")
    script = tmp / "het.sh"
    script.write_text("#!/bin/sh\nsleep 0.2\n", encoding="utf-8")
    cluster = slurm_cluster
    cluster.kill_switch.touch()
    off = run_batch(cluster, CASES, script, "off")

    cfg = write_config(tmp, make_db(tmp), cluster.filter_state, mode="enforce", interval=0.5)
    before = _heartbeat(cluster)
    time.sleep(1.1)
    assert _heartbeat(cluster) <= 0 or _heartbeat(cluster) == before, "another placer runs on this cluster"
    started = int(time.time())
    placer = PlacerProcess(cfg, cluster.env, tmp / "placer.log")
    try:
        deadline = time.monotonic() + 30
        first = None
        while first is None or _heartbeat(cluster) <= first:   # a later heartbeat: cycle 1 is over
            assert placer.proc.poll() is None and time.monotonic() < deadline, placer.output()
            if first is None and _heartbeat(cluster) >= started:
                first = _heartbeat(cluster)
            time.sleep(0.1)
        cluster.kill_switch.unlink(missing_ok=True)
        time.sleep(STATE_CACHE_S)
        pal = run_batch(cluster, CASES, script, "pal")
        assert placer.proc.poll() is None, placer.output()
    finally:
        cluster.kill_switch.touch()
        placer.stop()
        cluster.filter_state.unlink(missing_ok=True)
    yield Runs(off, pal, placer.output())


def _heartbeat(cluster: SlurmCluster) -> int:
    try:
        m = re.search(r"^heartbeat (\d+)$", cluster.filter_state.read_text(encoding="utf-8"), flags=re.M)
    except OSError:
        return -1
    return int(m.group(1)) if m else -1


# ---------------------------------------------------------------- the comparison


def test_corpus_is_large_enough() -> None:
    assert len(CASES) >= 30 and len({c.id for c in CASES}) == len(CASES)


#: Slurm skips its submit-time "can this job ever run" test for a job held with priority 0 at
#: submit (`sbatch --hold --gres=gpu:9` is accepted by plain Slurm too), so the filter holds through
#: job_desc.begin_time instead: these requests must be refused at submit exactly as without pal-slurm.
VALIDATED_AT_SUBMIT = {"more-gpus-than-any-node", "huge-gpus", "huge-gres", "too-much-memory", "too-many-cpus"}


def test_nothing_is_left_held_by_pal_slurm(runs: Runs) -> None:
    """Nobody stranded: after the placer's cycles no job of the pal run is held by pal-slurm."""
    stuck = {cid: [r["job_id"] for r in o.records if tagged_held(r)] for cid, o in runs.pal.items()}
    assert not {cid: ids for cid, ids in stuck.items() if ids}
    assert sum(len(o.records) for o in runs.pal.values()) >= len(CASES) // 2


def test_validated_cases_are_rejected_by_plain_slurm(runs: Runs) -> None:
    """The cases the begin-time hold is for really are refused at submit (so the comparison below says so)."""
    assert all(runs.off[cid].job_id is None and runs.off[cid].rc != 0 for cid in VALIDATED_AT_SUBMIT), \
        {cid: runs.off[cid].summary() for cid in VALIDATED_AT_SUBMIT}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_submission_ends_as_without_pal_slurm(runs: Runs, case: Case) -> None:
    off, pal = runs.off[case.id], runs.pal[case.id]
    if case.pal == REWRITE:
        assert off.job_id is None and off.rc != 0, off
        assert pal.job_id is not None, f"{case.id}: the filter did not rewrite the bare model type: {pal.error}"
        assert [(job_state(r), return_code(r)) for r in pal.records] == [("COMPLETED", 0)], pal.summary()
        assert pal.records[0]["admin_comment"].startswith("pal: placed"), pal.records[0]["admin_comment"]
        assert "v100" in pal.records[0]["features"]
        return
    assert all(o.job_id is None or o.records for o in (off, pal)), (off, pal)   # accepted jobs were seen
    assert pal.summary() == off.summary(), f"{case.id}: without pal-slurm {off.summary()}, with {pal.summary()}"
    comments = [r.get("admin_comment") or "" for r in pal.records]
    if case.pal == OFF:
        assert not any(c.startswith("pal") for c in comments), comments
    elif case.pal == PLACED:
        # placed, or (multi-node) Slurm's own first fit on other slots per node than one
        # per-node request can name, which the default policy leaves to Slurm as submitted
        assert comments and all(c.startswith(("pal: placed class=", "pal: released unchanged: first fit, left to Slurm"))
                                for c in comments), comments
    elif case.pal == RELEASED and pal.job_id is not None:  # 24.11 refuses some at submit, as it does without us
        assert comments and all(c.startswith("pal: released unchanged: ") for c in comments), comments


def test_odd_strings_reach_slurm_intact(runs: Runs) -> None:
    """Names and comments full of quotes, shell syntax, newlines and unicode come back as sent."""
    rec = runs.pal["odd-name"].records[0]
    assert rec["name"] == ODD_NAME
    assert runs.pal["newline-comment"].records[0]["comment"] == "a\nb"
    assert runs.pal["unicode-name"].records[0]["name"] == "学習ジョブ-ünï-🚀"


def test_placer_log_has_no_traceback(runs: Runs) -> None:
    assert "Traceback" not in runs.placer_log, runs.placer_log[-3000:]

