"""`pal simulate` shows progress inside a run: the simulators report jobs finished through a
callback (they print nothing), and the CLI's bar counts jobs over all runs."""

from __future__ import annotations

import io
import sys
from collections import defaultdict

import pytest

from pal_slurm.cli import simulate_cmd
from pal_slurm.placement.model import Cluster
from pal_slurm.simulate.runner import FixedVariability, SimulationSpec, run_simulations
from pal_slurm.simulate.traces import Trace, TraceJob

JOBS = 30


def _trace(name: str = "t") -> Trace:
    jobs = tuple(TraceJob(job_id=f"j{i}", num_gpus=1 + i % 2, submit_time=5.0 * i, work=400 + 50 * (i % 7),
                          work_unit="iterations", model="m", job_class="A", iter_time_s=1.0, line=i + 1,
                          source="test") for i in range(JOBS))
    return Trace(name, jobs)


def _spec(mode: str) -> SimulationSpec:
    pv = [1.0, 1.0, 1.1, 1.2]
    cluster = Cluster.uniform(2, 2, slowdown={c: pv for c in "ABCD"}, perfvar={c: pv for c in "ABCD"})
    return SimulationSpec(traces=(_trace(),), policies=("pal",), variability=FixedVariability(cluster), mode=mode,  # type: ignore[arg-type]
                          baseline="packed-sticky", round_seconds=60.0)


@pytest.mark.parametrize("mode", ["round", "event"])
def test_jobs_finished_are_reported_inside_each_run(mode: str) -> None:
    calls: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
    report = run_simulations(_spec(mode), job_progress=lambda t, p, n, total: calls[(t, p)].append((n, total)))
    assert set(calls) == {("t", "pal"), ("t", "packed-sticky")}
    for seen in calls.values():
        counts = [n for n, _ in seen]
        assert len(counts) > 3  # moves during the run, not once at its end
        assert counts == sorted(set(counts)) and counts[-1] == JOBS  # strictly growing, ends at all jobs
        assert {total for _, total in seen} == {JOBS}
    assert [len(r.outcomes) for r in report.results] == [JOBS, JOBS]


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_cli_bar_counts_jobs_over_all_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """With one run, the bar used to sit at 0/1 until the end; now it counts that run's jobs."""
    err = _Tty()
    monkeypatch.setattr(sys, "stderr", err)
    seen: list[tuple[int, int]] = []
    real = run_simulations

    def run(spec, on_run, on_jobs):  # type: ignore[no-untyped-def]
        def jobs(t: str, p: str, n: int, total: int) -> None:
            on_jobs(t, p, n, total)
            task = bar_task()
            seen.append((int(task.completed), int(task.total)))
        return real(spec, on_run, jobs)

    bars: list = []  # type: ignore[type-arg]
    import rich.progress

    class Spy(rich.progress.Progress):
        def __init__(self, *a, **kw):  # type: ignore[no-untyped-def]
            super().__init__(*a, **kw)
            bars.append(self)

    def bar_task():  # type: ignore[no-untyped-def]
        return bars[0].tasks[0]

    monkeypatch.setattr(rich.progress, "Progress", Spy)
    spec = SimulationSpec(traces=(_trace(),), policies=("pal",), variability=_spec("event").variability,
                          mode="event", baseline="pal")
    report = simulate_cmd._run_with_progress(spec, run)
    assert len(report.results) == 1
    assert seen and seen[-1] == (JOBS, JOBS)  # one run, its 30 jobs
    assert 0 < seen[0][0] < JOBS  # moved before the run ended
    assert "jobs" in err.getvalue()
