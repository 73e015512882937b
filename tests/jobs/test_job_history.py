"""Runtime history from sacct exports: the parser, the learning rule, the importer on every
backend, the CLI, and the placer's estimate (fingerprint > history > time limit)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import Engine, func, select

from pal_slurm.cli.main import cli
from pal_slurm.db.engine import session_scope
from pal_slurm.db.models import JobHistory
from pal_slurm.errors import InputError
from pal_slurm.jobs.fingerprint import fingerprint
from pal_slurm.db.history_store import delete_history, import_history, learned_from_history
from pal_slurm.jobs.runtimes import (LEARNED_END_GRACE_S, SOURCE_FINGERPRINT, SOURCE_HISTORY, SOURCE_LIMIT,
                                     SOURCE_NONE, LearnedRuntimes, RuntimeRule, learn_runtimes)
from pal_slurm.jobs.sacct_history import SACCT_COMMAND, ExportJob, format_elapsed, read_history, write_export
from pal_slurm.placer.problem import estimate_of, expected_end
from pal_slurm.slurm.model import SlurmJob

HEADER = "JobID|JobName|User|Submit|Start|End|Elapsed|State|AllocTRES|NodeList"
GPU4 = "billing=4,cpu=4,gres/gpu=4,node=1"


def row(job: str, *, name: str = "train", user: str = "alice", start: str = "2026-11-30T07:00:00",
        end: str = "2026-11-30T07:10:00", elapsed: str = "00:10:00", state: str = "COMPLETED", tres: str = GPU4,
        nodes: str = "n1") -> str:
    return "|".join([job, name, user, "2026-11-30T06:59:00", start, end, elapsed, state, tres, nodes])


def parse(*rows: str, header: str = HEADER):
    return read_history([header + "\n", *(r + "\n" for r in rows)], source="jobs.txt")


# -- the parser -----------------------------------------------------------------------------
def test_parser_keeps_finished_gpu_jobs_and_says_why_it_skips_the_rest() -> None:
    h = parse(row("10"), row("10.batch", name="batch", user=""), row("10.0"),
              row("11", tres="billing=4,cpu=4,node=1"), row("12", start="Unknown", end="Unknown", state="PENDING"),
              row("13", state="RUNNING", end="Unknown"), row("14", state="CANCELLED by 0"),
              row("15", state="TIMEOUT", elapsed="1-00:00:30"), row("16_3", name="array"), row("10"),
              row("17", tres="cpu=8,gres/gpu:a100=2,gres/gpu=2,node=2", nodes="n[1-2]"))
    assert [j.job_id for j in h.jobs] == ["10", "14", "15", "16_3", "17"]
    assert h.steps == 2
    by_id = {j.job_id: j for j in h.jobs}
    assert by_id["14"].state == "CANCELLED" and by_id["15"].elapsed_s == 86430.0
    assert by_id["17"].gpus == 2 and by_id["17"].nodes == 2 and by_id["10"].gpus == 4 and by_id["10"].nodes == 1
    assert by_id["10"].started_at.tzinfo is not None
    assert h.skipped_by_reason() == {"duplicate JobID": 1, "never started": 1, "no GPUs": 1, "not ended": 1}
    assert dict(h.skipped)[11] == "duplicate JobID (first on line 2)"


def test_runtime_from_end_minus_start_without_elapsed_and_optional_columns() -> None:
    h = read_history(["JobID|JobName|User|Start|End|State\n",
                      "7|train|bob|2026-11-30T07:00:00|2026-11-30T07:02:30|COMPLETED\n"], source="x")
    (j,) = h.jobs
    assert j.elapsed_s == 150.0 and j.gpus is None and j.nodes is None and j.user == "bob"


@pytest.mark.parametrize(("text", "message"), [
    ("", "jobs.txt: the file is empty"),
    ("\n\n", "jobs.txt: the file is empty"),
    (HEADER + "\n", "jobs.txt: no jobs in the file, only its header"),
    ("JobID|User|Start|State\n1|a|2026-11-30T07:00:00|COMPLETED\n",
     "jobs.txt:1: missing column(s) JobName, End or Elapsed; export with `sacct -P"),
    ("JobID,JobName,User,Start,End,State\n", "jobs.txt:1: missing column(s) JobID, JobName, User, Start, State"),
    (HEADER + "\n" + row("1", start="30/11/2026 07:00") + "\n",
     "jobs.txt:2: Start '30/11/2026 07:00' is not a time like 2026-11-30T07:00:00"),
    (HEADER + "\n" + row("1", state="DONE") + "\n", "jobs.txt:2: State 'DONE' is not a Slurm job state"),
    (HEADER + "\n" + row("1", state="") + "\n", "jobs.txt:2: State '' is not a Slurm job state"),
    (HEADER + "\n" + row("1", elapsed="ten minutes") + "\n", "jobs.txt:2: Elapsed 'ten minutes' is not"),
    (HEADER + "\n" + row("2", user="") + "\n", "jobs.txt:2: empty User"),
    (HEADER + "\n" + row("") + "\n", "jobs.txt:2: empty JobID"),
    (HEADER + "\n" + row("1", name="a|b") + "\n", "jobs.txt:2: row has 11 fields, the header has 10"),
    ("JobID|JobName|User|Start|End|State\n1|x|u|2026-11-30T07:00:00|2026-11-30T06:00:00|COMPLETED\n",
     "jobs.txt:2: End 2026-11-30T06:00:00 is before Start 2026-11-30T07:00:00"),
    ("JobID|JobName|User|Start|End|State\n1|x|u|2026-11-30T07:00:00|Unknown|COMPLETED\n",
     "jobs.txt:2: End Unknown on a job that ended (COMPLETED)"),
])
def test_bad_input_names_file_line_and_problem(text: str, message: str) -> None:
    with pytest.raises(InputError) as exc:
        read_history(text.splitlines(keepends=True), source="jobs.txt")
    assert str(exc.value).startswith(message), str(exc.value)


def test_export_writer_round_trips_through_the_importer() -> None:
    t0 = datetime(2026, 11, 30, 7, 0, tzinfo=UTC).timestamp()
    jobs = [ExportJob("101", "replay-3", "root", t0, t0 + 2.4, t0 + 95.9, "COMPLETED", 4, ["pal-r01"]),
            ExportJob("102", "replay-4", "root", t0, t0 + 3, t0 + 3 + 90_000, "TIMEOUT", 8, ["pal-r01", "pal-r02"])]
    text = write_export(jobs)
    assert text.splitlines()[0] == SACCT_COMMAND.split("--format=")[1].replace(",", "|")
    h = read_history(text.splitlines(keepends=True), source="export")
    assert [(j.job_id, j.name, j.user, j.state, j.gpus, j.nodes) for j in h.jobs] == [
        ("101", "replay-3", "root", "COMPLETED", 4, 1), ("102", "replay-4", "root", "TIMEOUT", 8, 2)]
    assert h.jobs[0].elapsed_s == 93.0  # whole seconds, as sacct: 07:00:02 -> 07:01:35
    assert h.jobs[0].started_at == datetime(2026, 11, 30, 7, 0, 2, tzinfo=UTC)
    assert h.jobs[1].elapsed_s == 90_000.0 and "1-01:00:00" in text
    with pytest.raises(InputError, match="cannot be written"):
        write_export([replace(jobs[0], name="a|b")])


def test_format_elapsed_is_sacct_s() -> None:
    assert [format_elapsed(s) for s in (0, 59.9, 3600, 86399, 86400 + 61)] == [
        "00:00:00", "00:00:59", "01:00:00", "23:59:59", "1-00:01:01"]


# -- the learning rule (pure) ---------------------------------------------------------------
T0 = datetime(2026, 12, 1, tzinfo=UTC)


def test_learning_rule_quantile_of_the_newest_runs_with_enough_of_them() -> None:
    runs = [("a", T0 - timedelta(days=i), 60.0 * (10 - i)) for i in range(10)]  # newest is longest
    runs += [("b", T0, 30.0), ("b", T0, 40.0)]
    assert learn_runtimes(runs) == {"a": 600.0}  # b: 2 runs < 3
    assert learn_runtimes(runs, RuntimeRule(min_jobs=2)) == {"a": 600.0, "b": 40.0}
    assert learn_runtimes(runs, RuntimeRule(history=5)) == {"a": 600.0}
    assert learn_runtimes(runs, RuntimeRule(history=5, quantile=0.0)) == {"a": 360.0}  # newest 5: 6..10 min
    assert learn_runtimes(runs, RuntimeRule(quantile=0.5)) == {"a": 360.0}
    assert learn_runtimes([]) == {}
    with pytest.raises(ValueError):
        RuntimeRule(quantile=1.5)


def job(**kw: object) -> SlurmJob:
    base = SlurmJob(job_id="9", name="train", user="alice", state="PENDING", state_reason="", priority=1,
                    partition="gpu", submit_time=0.0, command="/home/alice/run.sh", time_limit_s=3600.0)
    return replace(base, **kw)  # type: ignore[arg-type]


def test_estimate_prefers_fingerprint_then_history_then_the_limit_and_never_exceeds_it() -> None:
    fp = fingerprint("alice", "train", "/home/alice/run.sh")
    both = LearnedRuntimes(by_fingerprint={fp: 600.0}, by_name={("alice", "train"): 900.0})
    history = LearnedRuntimes(by_name={("alice", "train"): 900.0})
    assert (estimate_of(job(), both).seconds, estimate_of(job(), both).source) == (600.0, SOURCE_FINGERPRINT)
    assert (estimate_of(job(), history).seconds, estimate_of(job(), history).source) == (900.0, SOURCE_HISTORY)
    other = job(command="/home/alice/other.sh")  # another script under the same name: the name's history
    assert estimate_of(other, both).source == SOURCE_HISTORY
    assert estimate_of(job(user="bob"), both).source == SOURCE_LIMIT
    assert estimate_of(job(), LearnedRuntimes()).seconds == 3600.0
    long = LearnedRuntimes(by_name={("alice", "train"): 9000.0})
    assert (estimate_of(job(), long).seconds, estimate_of(job(), long).source) == (3600.0, SOURCE_LIMIT)
    assert estimate_of(job(time_limit_s=None), long).seconds == 9000.0
    assert (estimate_of(job(time_limit_s=None), None).seconds, estimate_of(job(time_limit_s=None), None).source) \
        == (0.0, SOURCE_NONE)
    assert estimate_of(job(), {fp: 600.0}).seconds == 600.0  # a plain mapping is fingerprint -> seconds
    now = 1_000_000.0
    run = job(state="RUNNING", start_time=now - 100, end_time=now + 3500)
    assert expected_end(run, history, now) == now + 800 + LEARNED_END_GRACE_S  # Slurm's whole-second start
    assert expected_end(run, LearnedRuntimes(by_name={("alice", "train"): 50.0}), now) == now + 3500


def test_the_placers_incremental_reader_learns_what_a_full_read_learns(engine: Engine) -> None:
    """HistoryReader (kept by the placer across refreshes) after each import, a removal, a row
    committed under an id already passed, and the age cutoff: always learned_from_history's answer."""
    from pal_slurm.db.history_store import HistoryReader

    now = datetime.now(UTC)
    day = lambda d: (now - timedelta(days=d)).astimezone().strftime("%Y-%m-%dT%H:%M:%S")  # noqa: E731
    rule = RuntimeRule(min_jobs=2, history=3)
    reader = HistoryReader(rule)

    def same(at: datetime = now) -> dict:
        with session_scope(engine) as s:
            got = dict(reader.read(s, at))
            assert got == learned_from_history(s, rule, at)
            return got

    assert same() == {}
    with session_scope(engine) as s:
        import_history(s, parse(*[row(str(i), start=day(i + 1), end="", elapsed=f"00:{10 + i:02d}:00")
                                  for i in range(3)]), "clusterA")
    assert same() == {("alice", "train"): 12 * 60.0}
    with session_scope(engine) as s:  # newer runs push the oldest out of the newest 3
        import_history(s, parse(row("50", start=day(0.5), end="", elapsed="00:01:00"),
                                row("51", start=day(0.4), end="", elapsed="00:02:00", state="FAILED"),
                                row("52", start=day(0.3), end="", elapsed="00:03:00", name="eval")), "clusterB")
    assert same() == {("alice", "train"): 11 * 60.0}
    with session_scope(engine) as s:
        delete_history(s, "clusterB")
    assert same() == {("alice", "train"): 12 * 60.0}
    with session_scope(engine) as s:  # leave a gap below the highest id read ...
        ids = sorted(s.scalars(select(JobHistory.id).where(JobHistory.source == "clusterA")))
        s.execute(JobHistory.__table__.delete().where(JobHistory.id == ids[1]))
    assert same() == {("alice", "train"): 12 * 60.0}
    with session_scope(engine) as s:  # ... that a late commit fills
        s.execute(JobHistory.__table__.insert(), [dict(id=ids[1], source="late", slurm_job_id="9", user="alice",
                                                        name="train", started_at=now - timedelta(hours=1),
                                                        elapsed_s=30 * 60.0, state="COMPLETED")])
    assert same() == {("alice", "train"): 30 * 60.0}
    later = now + timedelta(days=rule.max_age_days - 0.5)  # all but the late run aged out: too few left
    assert same(later) == {} and same(later) == {}



# -- the importer, on every backend -----------------------------------------------------------
def test_import_is_idempotent_and_learns_from_completed_and_timeout_only(engine: Engine) -> None:
    now = datetime.now(UTC)
    day = lambda d: (now - timedelta(days=d)).astimezone().strftime("%Y-%m-%dT%H:%M:%S")  # noqa: E731
    rows = [row(str(100 + i), start=day(i + 1), end="", elapsed=f"00:{10 + i:02d}:00") for i in range(4)]
    rows += [row("110", start=day(1), end="", elapsed="05:00:00", state="FAILED"),
             row("111", start=day(1), end="", elapsed="00:01:00", state="TIMEOUT", name="short"),
             row("112", start=day(200), end="", elapsed="00:01:00", name="short"),  # too old to count
             row("113", start=day(2), end="", elapsed="00:01:00", name="short", user="bob")]
    h = parse(*rows)
    with session_scope(engine) as s:
        first = import_history(s, h, "clusterA")
    assert (first.added, first.already_present, first.by_state) == (8, 0, {"COMPLETED": 6, "FAILED": 1, "TIMEOUT": 1})
    with session_scope(engine) as s:
        again = import_history(s, h, "clusterA")
        other = import_history(s, parse(rows[0]), "clusterB")  # the same id on another cluster: another job
    assert (again.added, again.already_present, other.added) == (0, 8, 1)
    with session_scope(engine) as s:
        assert s.scalar(select(func.count()).select_from(JobHistory)) == 9
        got = learned_from_history(s, RuntimeRule(min_jobs=1), now=now)
        # alice/train: 4 COMPLETED of 10-13 min (FAILED's 5 h ignored) plus clusterB's copy of 100
        assert got[("alice", "train")] == 13 * 60.0
        assert got[("alice", "short")] == 60.0 and got[("bob", "short")] == 60.0
        assert learned_from_history(s, RuntimeRule(), now=now) == {("alice", "train"): 13 * 60.0}
        assert delete_history(s, "clusterB") == 1
    with session_scope(engine) as s:
        assert s.scalar(select(func.count()).select_from(JobHistory)) == 8


def test_cli_import_history(sqlite_url: str, tmp_path: Path) -> None:
    runner = CliRunner()
    assert runner.invoke(cli, ["--db", sqlite_url, "db", "upgrade"]).exit_code == 0
    f = tmp_path / "jobs.txt"
    f.write_text("\n".join([HEADER, row("1"), row("1.batch"), row("2", tres="cpu=1,node=1"), ""]))
    out = runner.invoke(cli, ["--db", sqlite_url, "jobs", "import-history", str(f), "--cluster", "c1", "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert (doc["imported"], doc["cluster"], doc["skipped_by_reason"], doc["job_steps_skipped"]) == (
        1, "c1", {"no GPUs": 1}, 1)
    out = runner.invoke(cli, ["--db", sqlite_url, "jobs", "import-history", str(f), "--cluster", "c1"])
    assert out.exit_code == 0 and "imported 0 jobs" in out.output and "1 already present" in out.output
    f.write_text(HEADER + "\n" + row("3", state="WEIRD") + "\n")
    out = runner.invoke(cli, ["--db", sqlite_url, "jobs", "import-history", str(f)])
    assert out.exit_code == 1 and f"{f}:2: State 'WEIRD' is not a Slurm job state" in out.output
    assert "Traceback" not in out.output
    out = runner.invoke(cli, ["--db", sqlite_url, "jobs", "import-history", str(f), "--cluster", " x"])
    assert out.exit_code == 1 and "--cluster ' x'" in out.output
    # the file is named before the database is opened: a bad export with no database behind it
    missing = f"sqlite:///{tmp_path / 'none.db'}"
    out = runner.invoke(cli, ["--db", missing, "jobs", "import-history", str(f)])
    assert out.exit_code == 1 and f"{f}:2: State 'WEIRD'" in out.output and "no database" not in out.output
    f.write_text(HEADER + "\n" + row("4") + "\n")
    out = runner.invoke(cli, ["--db", missing, "jobs", "import-history", str(f)])
    assert out.exit_code == 1 and "no database" in out.output, out.output


def test_a_bad_row_is_skipped_with_its_line_and_the_rest_imported() -> None:
    """One odd job (a '|' or a line break in its name, a bad time) among good ones: left out
    with FILE:LINE and the problem, counted as a bad row; the others are imported."""
    text = "\n".join([HEADER, row("1"), row("2", name="a|b"), row("3", start="yesterday"), row("4"),
                      row("5", name="line\nbreak")]) + "\n"
    h = read_history(text.splitlines(keepends=True), source="jobs.txt")
    assert [j.job_id for j in h.jobs] == ["1", "4"]
    lines = [line for line, _problem in h.bad]
    assert lines[:2] == [3, 4] and len(lines) == 4  # the line break makes two short rows
    assert "11 fields" in h.bad[0][1] and "Start 'yesterday'" in h.bad[1][1]
    assert h.skipped_by_reason()["bad row"] == 4


def test_a_file_of_bad_rows_only_is_an_error_naming_the_first() -> None:
    text = "\n".join([HEADER, row("1", state="DONE"), row("2", state="DONE")]) + "\n"
    with pytest.raises(InputError) as exc:
        read_history(text.splitlines(keepends=True), source="jobs.txt")
    assert str(exc.value).startswith("jobs.txt:2: State 'DONE' is not a Slurm job state")
    assert "1 more bad row" in str(exc.value)


def test_cli_import_history_names_each_bad_row_and_imports_the_rest(sqlite_url: str, tmp_path: Path) -> None:
    runner = CliRunner()
    assert runner.invoke(cli, ["--db", sqlite_url, "db", "upgrade"]).exit_code == 0
    f = tmp_path / "jobs.txt"
    f.write_text("\n".join([HEADER, row("1"), row("2", name="x|y"), row("3"), ""]))
    out = runner.invoke(cli, ["--db", sqlite_url, "jobs", "import-history", str(f), "--cluster", "c1"])
    assert out.exit_code == 0, out.output
    assert "imported 2 jobs" in out.output and "1 bad row" in out.output
    assert f"{f}:3: row has 11 fields, the header has 10" in out.output and "row skipped" in out.output
    out = runner.invoke(cli, ["--db", sqlite_url, "jobs", "import-history", str(f), "--cluster", "c2", "--json"])
    doc = json.loads(out.stdout)
    assert doc["bad_rows"] == [{"line": 3, "problem": doc["bad_rows"][0]["problem"]}]
    assert doc["skipped_by_reason"] == {"bad row": 1}
