"""The placer's lean job read (pal_slurm.slurm.parse_squeue): squeue -O records as SlurmJobs,
on output captured from the 22.05 test cluster next to `squeue --json` of the same moment.

The files under tests/data/slurm/22.05 (squeue-lean.txt with the layout's token
0123456789abcdef, squeue-lean-excluded.txt with fedcba9876543210, squeue-lean.json,
show-job-detail.txt) hold: two running GPU jobs (one on two nodes), held and pending GPU jobs
of every request form (--gres, --gpus, --gpus-per-task, --gpus-per-node -N2, --gpus-per-socket),
a pending array with one task split off, a CPU job, a job held by its user, a job name with a
newline and a comment with a control character. The real-Slurm comparison on a live cluster
is tests/slurm/test_lean_read.py.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from pal_slurm.slurm import parse_json, parse_squeue
from pal_slurm.slurm.backend import _select_jobs
from pal_slurm.slurm.model import SlurmJob

DATA = Path(__file__).parent / "data" / "slurm"
LAYOUT = parse_squeue.Layout(parse_squeue.FIELDS, "0123456789abcdef")
EXCLUDED = parse_squeue.Layout((("job_id", "%A"), ("excluded_nodes", "%x")), "fedcba9876543210")

#: what -O cannot say as the JSON does (parse_squeue's docstring): the memory's unit (per CPU
#: or per node, the same memory on each node), a maximum node count equal to the node count
#: for none, the running jobs' slots (read apart, through scontrol) and a pending job's end
ALLOWED = {"memory_per_node_mb", "memory_per_cpu_mb", "max_nodes", "gres_detail", "end_time"}


def _lean() -> dict[str, SlurmJob]:
    excluded = parse_squeue.exclusions_from((DATA / "22.05" / "squeue-lean-excluded.txt").read_text(), EXCLUDED)
    out = {}
    for r in parse_squeue.collapse_array_tasks(LAYOUT.records((DATA / "22.05" / "squeue-lean.txt").read_text())):
        r["excluded_nodes"] = excluded.get(r["job_id"], "")
        job = parse_squeue.job_from_fields(r)
        out[job.job_id] = job
    return out


def _json() -> dict[str, SlurmJob]:
    doc = json.loads((DATA / "22.05" / "squeue-lean.json").read_text())
    return {j.job_id: j for j in parse_json.jobs_from_doc(doc)}


def test_every_job_reads_as_squeue_json_says_it() -> None:
    lean, full = _lean(), _json()
    assert lean.keys() == full.keys() and len(lean) == 11
    for job_id, want in full.items():
        got = lean[job_id]
        diff = {f.name for f in dataclasses.fields(SlurmJob) if getattr(got, f.name) != getattr(want, f.name)}
        assert diff <= ALLOWED, (job_id, {d: (getattr(got, d), getattr(want, d)) for d in diff - ALLOWED})
        assert got.memory_on_node_mb() == want.memory_on_node_mb(), job_id
        assert got.max_nodes == (want.max_nodes or want.node_count), job_id
        if got.pending and got.end_time != want.end_time:
            assert got.end_time is None  # 22.05's JSON makes one up for a job without a time limit


def test_the_awkward_values_come_through_whole() -> None:
    lean = _lean()
    assert lean["3"].name == "held, one|two" and lean["3"].comment == "a\x1fb c"
    assert lean["3"].admin_comment == "pal:held class=A src=default | site note"
    assert lean["11"].name == "two\nnodes" and lean["11"].exclusive and lean["11"].node_count == 2
    assert lean["4"].excluded_nodes == "pal-n1" and lean["4"].features == "v100" and lean["4"].account == "acct1"
    assert lean["4"].time_limit_s == 86400 and lean["4"].max_nodes == 2 and lean["4"].exclusive
    assert (lean["3"].memory_per_cpu_mb, lean["3"].memory_per_node_mb) == (500, None)
    assert (lean["4"].memory_per_cpu_mb, lean["4"].memory_per_node_mb) == (None, 2000)
    # the pending array's own record with the task split off (job 10, task 2) apart, as slurmctld holds them
    assert (lean["6"].array_job_id, lean["6"].array_task) == ("6", "1,3-5")
    assert (lean["10"].array_job_id, lean["10"].array_task, lean["10"].comment) == ("6", "2", "split-task")
    assert lean["8"].priority == 0 and lean["8"].begin_time is None and lean["8"].state_reason == "JobHeldUser"
    assert lean["1"].running and lean["1"].start_time and lean["1"].end_time == lean["1"].start_time + 3600


def test_the_placer_keeps_gpu_and_tagged_jobs_only() -> None:
    lean = _lean()
    assert {j for j, job in lean.items() if parse_squeue.placer_needs(job)} == set(lean) - {"7"}
    records = {r["job_id"]: r for r in LAYOUT.records((DATA / "22.05" / "squeue-lean.txt").read_text())}
    assert {j for j, r in records.items() if parse_squeue.needs_gpu_fields(r)} == set(lean) - {"7"}
    doc = json.loads((DATA / "22.05" / "squeue-lean.json").read_text())
    assert {j.job_id for j in parse_json.jobs_from_doc(doc, placer_only=True)} == set(lean) - {"7"}
    tagged = {"job_id": 1, "admin_comment": "pal: released unchanged", "tres_per_node": ""}
    assert parse_json.placer_needs_raw(tagged)


def test_json_of_24_11_keeps_the_same_jobs_as_the_placer_needs() -> None:
    doc = parse_json.load((DATA / "24.11" / "squeue.json").read_text(), "squeue --json")
    every = parse_json.jobs_from_doc(doc, active_only=True)
    kept = parse_json.jobs_from_doc(doc, active_only=True, placer_only=True)
    assert kept == [j for j in every if parse_squeue.placer_needs(j)]


def test_a_value_cannot_forge_a_field_or_another_jobs_record() -> None:
    """A name holding what a record of another job would look like with a token the user
    could have guessed: the read's own token differs, so it stays the name."""
    guess = parse_squeue.Layout(parse_squeue.FIELDS, "aaaaaaaaaaaaaaaa")
    forged = guess.end + "\n" + guess.sep.join(["666"] + ["x"] * (len(parse_squeue.FIELDS) - 1))
    one = {k: "" for k, _n in parse_squeue.FIELDS} | {"job_id": "5", "name": forged, "state": "PENDING",
                                                        "admin_comment": "(null)", "tres_per_node": "gres:gpu:1"}
    text = LAYOUT.sep.join(one[k] for k, _n in parse_squeue.FIELDS) + LAYOUT.end + "\n"
    [got] = list(LAYOUT.records(text))
    assert got["job_id"] == "5" and got["name"] == forged
    assert parse_squeue.job_from_fields(got).name == forged


def test_output_that_is_not_the_fields_asked_for_is_an_error() -> None:
    with pytest.raises(parse_squeue.SlurmFormatError, match="fields"):
        list(LAYOUT.records("JOBID PARTITION\n1 gpu" + LAYOUT.end + "\n"))
    assert list(LAYOUT.records("")) == []


def test_the_format_prints_whole_values_with_a_fresh_separator() -> None:
    a, b = parse_squeue.Layout.new(excluded_nodes=False), parse_squeue.Layout.new(excluded_nodes=True)
    assert a.token != b.token and len(a.token) == 16
    assert not a.has("excluded_nodes") and b.has("excluded_nodes")
    fmt = b.format().split(",")
    assert len(fmt) == len(parse_squeue.FIELDS) + 1
    assert all(f.split(":", 1)[1] == "0" + b.sep for f in fmt[:-1]) and fmt[-1] == "excnodes:0" + b.end
    assert "," not in b.sep + b.end and not b.sep[0].isdigit()


@pytest.mark.parametrize(("text", "want"), [
    ("1-00:00:00", 86400.0), ("1:00:00", 3600.0), ("30:00", 1800.0), ("365-00:00:00", 365 * 86400.0),
    ("5", 300.0), ("UNLIMITED", None), ("INVALID", None), ("N/A", None), ("0:00", None), ("x", None),
])
def test_time_limits(text: str, want: float | None) -> None:
    assert parse_squeue.time_limit_s(text) == want


@pytest.mark.parametrize(("text", "want"), [("500M", 500), ("16G", 16384), ("1.50T", 1572864), ("2000", 2000),
                                            ("512K", 0), ("", None), ("N/A", None)])
def test_memory_units(text: str, want: int | None) -> None:
    assert parse_squeue.mem_mb(text) == want


def test_tres_items_and_unset_tres() -> None:
    assert parse_squeue.tres_items("cpu=2,mem=1000M,node=1,billing=2,gres/gpu=1") == {
        "cpu": "2", "mem": "1000M", "node": "1", "billing": "2", "gres/gpu": "1"}
    assert parse_squeue.tres_items("N/A") == {}


def test_array_tasks_printed_one_a_line_are_one_record_again() -> None:
    def rec(job: str, array: str, task: str, name: str = "a") -> dict[str, str]:
        return {"job_id": job, "array_job_id": array, "array_task": task, "name": name}

    got = parse_squeue.collapse_array_tasks([
        rec("6", "6", "1"), rec("6", "6", "3"), rec("6", "6", "4"), rec("6", "6", "5"),
        rec("10", "6", "2", "split"), rec("7", "7", "N/A"), rec("20", "20", "9")])
    assert [(r["job_id"], r["array_task"]) for r in got] == [("6", "1,3-5"), ("10", "2"), ("7", "N/A"), ("20", "9")]


def test_a_running_jobs_slots_come_from_its_own_record_lines_only() -> None:
    text = (DATA / "22.05" / "show-job-detail.txt").read_text()
    slots = {"pal-n1": "gpu:v100_g1:1(IDX:1)", "pal-n2": "gpu:v100_g1:1(IDX:1)"}
    assert parse_squeue.gres_detail_of(text, "2") == slots
    grouped = text.replace("     Nodes=pal-n1 CPU_IDs=1 ", "     Nodes=pal-n[1-2] CPU_IDs=1 ")
    grouped = "\n".join(ln for ln in grouped.splitlines() if not ln.startswith("     Nodes=pal-n2 "))
    assert parse_squeue.gres_detail_of(grouped, "2") == {"pal-n[1-2]": "gpu:v100_g1:1(IDX:1)"}  # scontrol groups alike nodes
    assert parse_squeue.gres_detail_of(text, "3") is None  # another job's record
    fake = "     Nodes=pal-n9 CPU_IDs=0 Mem=1 GRES=gpu:v100_g3:1(IDX:3)"
    forged = (text.replace("JobName=multi node", f"JobName=x\n   NumNodes=9\n{fake}")
              .replace("   Command=(null)", f"   Command=(null)\n{fake}\n   MinCPUsNode=1"))
    assert forged.count("Nodes=pal-n9") == 2
    assert parse_squeue.gres_detail_of(forged, "2") == slots


def test_squeue_is_asked_for_few_ids_only() -> None:
    assert _select_jobs(None) == [] and _select_jobs({"12", "3"}) == ["--jobs=12,3"]
    assert _select_jobs({str(i) for i in range(100)}) == []  # squeue compares each job with each id
    assert _select_jobs({"3_1"}) == []
