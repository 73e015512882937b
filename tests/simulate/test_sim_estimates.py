"""What policies are told about runtimes in the event simulator (`--runtime-estimate`):
policies see only the estimate; jobs still run for their true time."""

from __future__ import annotations

import pytest

from pal_slurm.errors import InputError
from pal_slurm.placement.belief import Running
from pal_slurm.placement.model import Snapshot
from pal_slurm.placement.policies import get_policy
from pal_slurm.simulate.estimates import EXACT, RuntimeEstimate, parse_runtime_estimate
from pal_slurm.simulate.event import EventOptions, simulate_events
from pal_slurm.simulate.sacct_trace import read_sacct
from pal_slurm.simulate.traces import Trace, TraceJob
from tests.support.placement_cases import cluster


def tj(job_id: str, gpus: int, submit: float, work: float, limit: float | None = None) -> TraceJob:
    return TraceJob(job_id=job_id, num_gpus=gpus, submit_time=submit, work=work, work_unit="seconds", model="m",
                    job_class="A", iter_time_s=1.0, line=1, source="t", limit_s=limit)


def test_parse() -> None:
    assert parse_runtime_estimate("exact") == EXACT
    assert parse_runtime_estimate("x2").factor == 2.0
    u = parse_runtime_estimate("uniform:1:5:7")
    assert (u.kind, u.lo, u.hi, u.seed) == ("uniform", 1.0, 5.0, 7)
    for bad, msg in (("x0", "positive"), ("uniform:5:1", "LO <= HI"), ("sometimes", "expected exact")):
        with pytest.raises(ValueError, match=msg):
            parse_runtime_estimate(bad)


def test_factors_are_per_job_and_the_same_for_every_policy_run() -> None:
    u = parse_runtime_estimate("uniform:1:5:3")
    a, b = tj("1", 1, 0, 100), tj("2", 1, 0, 100)
    assert u.before_start(a) == u.before_start(a) and u.before_start(a) != u.before_start(b)
    assert 100 <= u.before_start(a) <= 500
    assert u.running(a, 50.0, 300.0) == Running(50.0, 50.0 + 300.0 * u.factor_of(a))  # a margin over the truth
    limit = RuntimeEstimate(kind="limit")
    assert limit.before_start(tj("3", 1, 0, 100, limit=3600)) == 3600
    assert limit.running(tj("3", 1, 0, 100, 3600), 50.0, 9) == Running(50.0, 3650.0)  # Slurm's EndTime
    with pytest.raises(InputError, match="job 4 has none"):
        limit.before_start(tj("4", 1, 0, 100))
    with pytest.raises(InputError, match="job 5 has none"):
        limit.check([tj("3", 1, 0, 100, 3600), tj("5", 1, 0, 100)])


def test_policies_see_the_estimate_and_jobs_run_their_true_time() -> None:
    c = cluster([2])
    trace = Trace(name="t", jobs=(tj("a", 1, 0, 100), tj("b", 2, 10, 50)))
    seen: list[tuple[float, dict[str, float], list[float]]] = []

    def hook(snap: Snapshot, queue, backfill, decision) -> None:  # type: ignore[no-untyped-def]
        seen.append((snap.now or 0.0, dict(snap.expected_end), [r.remaining_s for r in queue]))

    res = simulate_events(trace, c, get_policy("slurm-backfill"), EventOptions(runtime_estimate=RuntimeEstimate(
        kind="factor", factor=3.0)), on_decision=hook)
    assert [(o.start_time, o.finish_time) for o in res.outcomes] == [(0.0, 100.0), (100.0, 150.0)]
    at_b = next(s for s in seen if s[0] == 10.0)
    assert at_b[1] == {"a": 300.0} and at_b[2] == [150.0], "a: expected 3x its truth; b: told 3x its work"


def test_sacct_timelimit_is_read() -> None:
    rows = ["JobID|JobName|Submit|Start|End|AllocTRES|NNodes|Timelimit",
            "1|x|2026-01-01T00:00:00|2026-01-01T00:00:10|2026-01-01T01:00:10|gres/gpu=1|1|1-02:00:00",
            "2|y|2026-01-01T00:00:00|2026-01-01T00:00:10|2026-01-01T00:10:10|gres/gpu=1|1|UNLIMITED",
            "3|z|2026-01-01T00:00:00|2026-01-01T00:00:10|2026-01-01T00:10:10|gres/gpu=1|1|30:00"]
    t = read_sacct(rows, source="s")
    assert [j.limit_s for j in t.jobs] == [93600.0, None, 1800.0]
    bad = read_sacct([*rows[:1], rows[1].replace("1-02:00:00", "soon")], source="s", skip_invalid=True)
    assert bad.skipped and "Timelimit 'soon'" in bad.skipped[0][1]


def test_cli_refuses_estimates_in_round_mode_and_names_a_bad_one(runner, artifact_dir) -> None:  # type: ignore[no-untyped-def]
    from pal_slurm.cli.main import cli

    trace = artifact_dir / "traces" / "sia-philly" / "workload-1.csv"
    var = artifact_dir / "variability" / "longhorn"
    out = runner.invoke(cli, ["simulate", "--trace", str(trace), "--variability", str(var), "--runtime-estimate", "x2"])
    assert out.exit_code == 2 and "applies to --mode event" in out.output
    out = runner.invoke(cli, ["simulate", "--trace", str(trace), "--variability", str(var), "--mode", "event",
                              "--runtime-estimate", "often"])
    assert out.exit_code == 2 and "expected exact, limit" in out.output
    # Philly traces carry no time limits: refused before any run, in one line naming the file and line
    out = runner.invoke(cli, ["simulate", "--trace", str(trace), "--variability", str(var), "--mode", "event",
                              "--runtime-estimate", "limit", "--policy", "pal"])
    assert out.exit_code == 1 and f"{trace}:2:" in out.output and "internal error" not in out.output, out.output
