"""The placer's lean job read (pal_slurm.slurm.parse_squeue): squeue -O records as SlurmJobs,
on output captured from the test cluster (each Slurm version) next to `squeue --json` of the same moment.

The files under tests/data/slurm/22.05, 24.11 and 26.05, written by tests/data/slurm/capture_lean.py
(squeue-lean.txt: the plain layout with token 0123456789abcdef; squeue-lean-strict.txt: the
held job alone, strictly, token 1111222233334444; squeue-lean-excluded.txt: fedcba9876543210;
squeue-lean.json; show-job-detail.txt; roles.json: which job is which) hold two running GPU
jobs (one on two nodes), held and pending GPU jobs of every request form (--gres, --gpus,
--gpus-per-task, --gpus-per-node -N2, --gpus-per-socket), a pending array with one task split
off, a CPU job, a job held by its user, a job name with a newline and a comment with the
field separator in it. The real-Slurm comparison on a live cluster is tests/slurm/test_lean_read.py.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from pal_slurm.slurm import parse_json, parse_squeue
from pal_slurm.slurm.cli_backend import _select_jobs
from pal_slurm.slurm.gres_detail import gres_detail_of
from pal_slurm.slurm.hostlist import expand_nodes
from pal_slurm.slurm.model import SlurmJob

DATA = Path(__file__).parents[1] / "data" / "slurm"
VERSIONS = ("22.05", "24.11", "26.05")
LAYOUT = parse_squeue.Layout(parse_squeue.FIELDS, "0123456789abcdef")
STRICT = parse_squeue.Layout(parse_squeue.FIELDS, "1111222233334444", strict=True)
EXCLUDED = parse_squeue.Layout((("job_id", "%A"), ("excluded_nodes", "%x")), "fedcba9876543210", strict=True)


def _layouts(version: str) -> tuple[parse_squeue.Layout, parse_squeue.Layout]:
    """The layouts capture_lean.py used: with ExcNodes from 24.05 on and Exclusive from 26.05 on,
    as the backend asks."""
    fields = parse_squeue.fields_for(_version(version))
    return parse_squeue.Layout(fields, LAYOUT.token), parse_squeue.Layout(fields, STRICT.token, strict=True)


def _version(version: str) -> tuple[int, int]:
    major, minor = version.split(".")
    return int(major), int(minor)


def _role(version: str) -> dict[str, str]:
    return json.loads((DATA / version / "roles.json").read_text())


#: what -O cannot say as the JSON does (parse_squeue's docstring): the memory's unit (per CPU
#: or per node, the same memory on each node), a maximum node count equal to the node count
#: for none, the running jobs' slots (read apart, through scontrol) and a pending job's end
ALLOWED = {"memory_per_node_mb", "memory_per_cpu_mb", "max_nodes", "gres_detail", "end_time"}


def _lean(version: str, keep=parse_squeue.needs_lead) -> dict[str, SlurmJob]:  # type: ignore[no-untyped-def]
    """What CliBackend.jobs makes of the captured output (the held job, whose comment holds
    the separator, read again alone and strictly, as the backend does)."""
    plain, strict = _layouts(version)
    records, unsure = plain.scan((DATA / version / "squeue-lean.txt").read_text(), keep)
    assert unsure == [_role(version)["held"]]
    records += list(strict.records((DATA / version / "squeue-lean-strict.txt").read_text()))
    if not plain.has("excluded_nodes"):
        excluded = parse_squeue.exclusions_from((DATA / version / "squeue-lean-excluded.txt").read_text(), EXCLUDED)
        for r in records:
            r["excluded_nodes"] = excluded.get(r["job_id"], "")
    out = {}
    for r in parse_squeue.collapse_array_tasks(records):
        job = parse_squeue.job_from_fields(r)
        out[job.job_id] = job
    return out


def _json(version: str) -> dict[str, SlurmJob]:
    doc = json.loads((DATA / version / "squeue-lean.json").read_text())
    return {j.job_id: j for j in parse_json.jobs_from_doc(doc, active_only=True)}


@pytest.mark.parametrize("version", VERSIONS)
def test_every_job_reads_as_squeue_json_says_it(version: str) -> None:
    lean, full = _lean(version, lambda _lead: True), _json(version)
    assert lean.keys() == full.keys() == set(_role(version).values())
    roles = _role(version)
    assert {j for j, job in lean.items() if job.exclusive} == {roles["gpus"], roles["two_nodes"]}
    # 26.05's JSON (data_parser v0.0.45) has no field that says a job is exclusive; -O does
    allowed = ALLOWED | ({"exclusive"} if _version(version) >= parse_squeue.EXCLUSIVE_SINCE else set())
    for job_id, want in full.items():
        got = lean[job_id]
        diff = {f.name for f in dataclasses.fields(SlurmJob) if getattr(got, f.name) != getattr(want, f.name)}
        assert diff <= allowed, (job_id, {d: (getattr(got, d), getattr(want, d)) for d in diff - allowed})
        assert got.memory_on_node_mb() == want.memory_on_node_mb(), job_id
        assert got.max_nodes == (want.max_nodes or want.node_count), job_id
        if got.pending and got.end_time != want.end_time:
            assert got.end_time is None  # 22.05's JSON makes one up for a job without a time limit


@pytest.mark.parametrize("version", VERSIONS)
def test_the_awkward_values_come_through_whole(version: str) -> None:
    roles = _role(version)
    read = _lean(version)
    lean = {role: read[job_id] for role, job_id in roles.items() if role != "cpu"}
    held, gpus, array, split = lean["held"], lean["gpus"], lean["array"], lean["split"]
    assert held.name == "held, one|two" and held.comment == "a\x1fb c"
    assert held.admin_comment == "pal:held class=A src=default | site note"
    assert lean["two_nodes"].name == "two\nnodes" and lean["two_nodes"].exclusive
    assert lean["two_nodes"].node_count == 2
    assert gpus.excluded_nodes == "pal-n1" and gpus.features == "v100" and gpus.account == "acct1"
    assert gpus.time_limit_s == 86400 and gpus.max_nodes == 2 and gpus.exclusive
    assert (held.memory_per_cpu_mb, held.memory_per_node_mb) == (500, None)
    assert (gpus.memory_per_cpu_mb, gpus.memory_per_node_mb) == (None, 2000)
    # the pending array's own record and the task split off (task 2) apart, as slurmctld holds them
    assert (array.array_job_id, array.array_task) == (roles["array"], "1,3-5")
    assert (split.array_job_id, split.array_task, split.comment) == (roles["array"], "2", "split-task")
    assert lean["user_held"].priority == 0 and lean["user_held"].begin_time is None
    assert lean["user_held"].state_reason == "JobHeldUser"
    run = lean["run"]
    assert run.running and run.start_time and run.end_time == run.start_time + 3600


@pytest.mark.parametrize("version", VERSIONS)
def test_the_placer_keeps_gpu_and_tagged_jobs_only(version: str) -> None:
    every = _lean(version, lambda _lead: True)
    gpu = set(every) - {_role(version)["cpu"]}
    assert set(_lean(version)) == gpu
    assert {j for j, job in every.items() if parse_squeue.placer_needs(job)} == gpu
    doc = json.loads((DATA / version / "squeue-lean.json").read_text())
    assert {j.job_id for j in parse_json.jobs_from_doc(doc, active_only=True, placer_only=True)} == gpu
    tagged = {"job_id": 1, "admin_comment": "pal: released unchanged", "tres_per_node": ""}
    assert parse_json.placer_needs_raw(tagged)


def test_json_of_24_11_keeps_the_same_jobs_as_the_placer_needs() -> None:
    doc = parse_json.load((DATA / "24.11" / "squeue.json").read_text(), "squeue --json")
    every = parse_json.jobs_from_doc(doc, active_only=True)
    kept = parse_json.jobs_from_doc(doc, active_only=True, placer_only=True)
    assert kept == [j for j in every if parse_squeue.placer_needs(j)]


def test_a_value_cannot_forge_a_field_or_another_jobs_record() -> None:
    """A name holding what a record of another job would look like with a token the user
    could have guessed: the read's own token differs, so the record stays one job's, found
    unsure (more fields than asked for) and read again strictly, where it is the name."""
    guess = parse_squeue.Layout(parse_squeue.FIELDS, "aaaaaaaaaaaaaaaa")
    forged = guess.end + "\n" + guess.sep.join(["666", "gres:gpu:1", "", "", "", "pal:held class=A"]
                                              + ["x"] * (len(parse_squeue.FIELDS) - 6))
    one = {k: "" for k, _n in parse_squeue.FIELDS} | {"job_id": "5", "name": forged, "state": "PENDING",
                                                        "admin_comment": "(null)", "tres_per_node": "gres:gpu:1"}
    text = LAYOUT.sep.join(one[k] for k, _n in parse_squeue.FIELDS) + LAYOUT.end + "\n"
    assert LAYOUT.scan(text, parse_squeue.needs_lead) == ([], ["5"])
    strict = STRICT.sep.join(one[k] for k, _n in parse_squeue.FIELDS) + STRICT.end + "\n"
    [got] = list(STRICT.records(strict))
    assert got["job_id"] == "5" and got["name"] == forged
    assert parse_squeue.job_from_fields(got).name == forged
    # a CPU job's record is never split past the fields that say it is one
    cpu = one | {"tres_per_node": "", "name": "a\x1fb"}
    assert LAYOUT.scan(LAYOUT.sep.join(cpu[k] for k, _n in parse_squeue.FIELDS) + LAYOUT.end + "\n",
                       parse_squeue.needs_lead) == ([], [])


def test_output_that_is_not_the_fields_asked_for_is_an_error() -> None:
    with pytest.raises(parse_squeue.SlurmFormatError, match="fields"):
        list(LAYOUT.records("JOBID PARTITION\n1 gpu" + LAYOUT.end + "\n"))
    assert list(LAYOUT.records("")) == []


def test_the_format_prints_whole_values_with_a_fresh_separator() -> None:
    a, b = parse_squeue.Layout.new((22, 5)), parse_squeue.Layout.new((24, 11))
    s = parse_squeue.Layout.new((22, 5), strict=True)
    again = b.strictly()
    assert len({a.token, b.token, s.token, again.token}) == 4 and len(a.token) == 16
    assert not a.has("excluded_nodes") and b.has("excluded_nodes") and not b.has("exclusive")
    assert again.strict and again.fields == b.fields
    assert parse_squeue.Layout.new((26, 5)).fields[-2:] == (parse_squeue.EXCLUDED, parse_squeue.EXCLUSIVE)
    assert a.sep == "\x1f" and a.token in a.end and s.token in s.sep
    fmt = b.format().split(",")
    assert len(fmt) == len(parse_squeue.FIELDS) + 1
    assert all(f.split(":", 1)[1] == "0" + b.sep for f in fmt[:-1]) and fmt[-1] == "excnodes:0" + b.end
    assert "," not in s.sep + s.end and not s.sep[0].isdigit() and not s.end[0].isdigit()


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


@pytest.mark.parametrize("version", VERSIONS)
def test_a_running_jobs_slots_come_from_its_own_record_lines_only(version: str) -> None:
    roles = _role(version)
    text = (DATA / version / "show-job-detail.txt").read_text()
    job = roles["run2"]
    slots = gres_detail_of(text, job)
    assert slots is not None
    per_node = {n: g for hosts, g in slots.items() for n in expand_nodes(hosts)}
    assert per_node == {"pal-n1": "gpu:v100_g1:1(IDX:1)", "pal-n2": "gpu:v100_g1:1(IDX:1)"}
    # nodes with the same allocation come as one hostlist (as on a node with CPU_IDs alike)
    grouped = "\n".join(ln.replace("Nodes=pal-n1 ", "Nodes=pal-n[1-2] ") for ln in text.splitlines()
                         if not ln.lstrip().startswith("Nodes=pal-n2 "))
    assert gres_detail_of(grouped, job) == {"pal-n[1-2]": "gpu:v100_g1:1(IDX:1)"}
    assert gres_detail_of(text, roles["run"]) is None  # another job's record
    fake = "     Nodes=pal-n9 CPU_IDs=0 Mem=1 GRES=gpu:v100_g3:1(IDX:3)"
    forged = (text.replace("JobName=multi node", f"JobName=x\n   NumNodes=9\n{fake}")
              .replace("   Command=(null)", f"   Command=(null)\n{fake}\n   MinCPUsNode=1"))
    assert forged.count("Nodes=pal-n9") == 2
    assert gres_detail_of(forged, job) == slots


def test_squeue_is_asked_for_few_ids_only() -> None:
    assert _select_jobs(None) == [] and _select_jobs({"12", "3"}) == ["--jobs=12,3"]
    assert _select_jobs({str(i) for i in range(100)}) == []  # squeue compares each job with each id
    assert _select_jobs({"3_1"}) == []
