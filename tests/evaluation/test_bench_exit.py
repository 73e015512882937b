"""The benchmarks fail when they miss a target: exit status 1 and a "TARGET MISSED" line naming the
figure against an impossible target, exit status 0 and "target met" against a generous one.

Two quick ones at a tiny size (bench/placement_speed.py: the placer's decision for a cycle;
bench/placer_cycle.py: one placer cycle, which also says what it leaves out); every bench with
a target goes through bench/pal_eval/targets.py the same way."""

from __future__ import annotations

import functools
import re
import subprocess
import sys

import pytest

from conftest import REPO, harness_env

#: (script, arguments for a tiny run)
TINY = {
    "placement_speed": ["--nodes", "40", "--held", "20", "--cycles", "2", "--policy", "pal-guard"],
    "placer_cycle": ["--nodes", "12", "--held", "8", "--cycles", "1", "--no-audit-db"],
}


@functools.cache  # one run per script and arguments for the whole module
def bench(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(REPO / "bench" / f"{name}.py"), *TINY[name], *args],
                          capture_output=True, text=True, check=False, timeout=120, cwd=REPO, env=harness_env())


@pytest.mark.parametrize("name", sorted(TINY))
def test_an_impossible_target_is_missed_with_the_figure_and_exit_status_1(name: str) -> None:
    proc = bench(name, "--target-s", "0.000001")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    missed = [line for line in proc.stdout.splitlines() if line.startswith("TARGET MISSED:")]
    assert len(missed) == 1, proc.stdout
    # the figure and the bound it missed: "TARGET MISSED: ... 0.012 s >= 1e-06 s"
    assert re.search(r" \d+(\.\d+)? s >= 1e-06 s$", missed[0]), missed[0]
    assert "target met" not in proc.stdout


@pytest.mark.parametrize("name", sorted(TINY))
def test_a_generous_target_is_met_with_exit_status_0(name: str) -> None:
    proc = bench(name, "--target-s", "600")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"^target met: .* < 600 s$", proc.stdout, flags=re.MULTILINE), proc.stdout
    assert "TARGET MISSED" not in proc.stdout


def test_placer_cycle_says_which_slurm_commands_its_figure_leaves_out() -> None:
    out = bench("placer_cycle", "--target-s", "600").stdout
    head = re.search(r"NOT counted above: the Slurm commands the placer issued, (\d+) per cycle for (\d+) placed jobs",
                     out)
    assert head, out
    counted = {m.group(2): int(m.group(1)) for m in re.finditer(r"^ +(\d+)  ((?:squeue|sinfo|scontrol).*)$", out,
                                                                   flags=re.MULTILINE)}
    assert sum(counted.values()) == int(head.group(1)), out
    placed = int(head.group(2))
    assert placed > 0
    # each placed job: its tag, then the final tag; its release
    assert counted["scontrol update AdminComment (the tag)"] >= 2 * placed
    assert counted["scontrol update StartTime=now (release)"] >= placed
    assert counted["sinfo --json"] == 1
    assert "policy pal-guard" in out  # the placer's default policy
