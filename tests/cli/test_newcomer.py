"""The operator's first hour (issue 22), scripted: every command's main paths and the bad inputs a
newcomer types, through CliRunner and through the real `pal` entry point in a subprocess.

What it must never find: a command that exits 0 on something that matched nothing, output that
claims to be JSON and is not (a bare NaN), or a view of more GPUs than the fleet has slots. The
good errors of before (missing files, a CSV with a missing column, a CSV given to the JSON-lines
importer, a binary or broken config, unknown keys, database URL typos, misspelt policies) stay.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.support.fleetgen import records
from pal_slurm.cli.main import cli
from pal_slurm.ingest.jsonl import dump_jsonl

NODES = [f"gpu-a-{i:03d}" for i in range(1, 5)]  # 4 nodes x 4 GPUs = the 16 slots of this fleet
SLOTS = 16


def strict_json(text: str) -> Any:
    """json.loads, refusing NaN and Infinity (which Python's own parser lets through)."""
    def refuse(name: str) -> Any:
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """16 GPUs at slots on 4 nodes, one slow (1.3 on resnet50); plus 3 sgemm identities on
    gpu-a-001 whose slot no file gives, and one with no node: 20 GPU rows, 16 physical slots."""
    tmp = tmp_path_factory.mktemp("newcomer")
    uuids = [f"GPU-{i:08x}-1111-2222-3333-444455556666" for i in range(SLOTS)]
    node_of = {u: NODES[i // 4] for i, u in enumerate(uuids)}
    factors = {u: 1.0 + 0.01 * (i % 4) for i, u in enumerate(uuids)}
    factors[uuids[5]] = 1.3
    recs = []
    for bench in ("resnet50", "bert", "pagerank"):
        recs += records(factors, benchmark=bench, node_of=node_of, tag=bench)
    loose = {f"GPU-{0xf0 + i:08x}-9999-2222-3333-444455556666": 1.0 + 0.01 * i for i in range(4)}
    extra = records(loose, benchmark="sgemm", node_of={u: NODES[0] for u in loose}, tag="sgemm")
    no_slot = [replace(r, gpu=replace(r.gpu, nvml_index=None, minor_number=None,
                                      node=None if r.gpu.uuid.startswith("GPU-000000f3") else NODES[0]))
               for r in extra]
    (tmp / "fleet.jsonl").write_text(dump_jsonl(recs + no_slot))
    (tmp / "pal.toml").write_text("[classification]\nbenchmark_set = \"pal-artifact\"\n[report]\nstale_after_days = 100000\n")
    url = f"sqlite:///{tmp / 'pal.db'}"
    env = {"PAL_CONFIG": str(tmp / "pal.toml"), "PAL_DB_URL": url}
    for args in (["db", "upgrade"], ["profile", "import", str(tmp / "fleet.jsonl")], ["classify"]):
        res = CliRunner().invoke(cli, args, env=env)
        assert res.exit_code == 0, res.output
    # a small trace: jobs far apart (no queue on 16 GPUs), and one a queue forms for
    (tmp / "calm.csv").write_text("job_id,num_gpus,submit_time,duration,model\n"
                                  "0,1,0,600,resnet50\n1,2,5000,600,BERT\n2,1,10000,600,resnet50\n")
    (tmp / "busy.csv").write_text("job_id,num_gpus,submit_time,duration,model\n"
                                  + "".join(f"{i},8,{i},3600,resnet50\n" for i in range(6)))
    (tmp / "header-only.csv").write_text("job_id,num_gpus,submit_time,duration,model\n")
    (tmp / "never-started.sacct").write_text(
        "JobID|JobName|Partition|State|Submit|Start|End|AllocTRES|ReqTRES|NodeList\n"
        "7|train|gpu|PENDING|2026-11-30T07:00:00|Unknown|Unknown||gres/gpu=2|\n"
        "8|train|gpu|CANCELLED|2026-11-30T07:00:00|None|2026-11-30T07:10:00||gres/gpu=1|\n")
    (tmp / "empty.jsonl").write_text("")
    return {"tmp": tmp, "url": url, "env": env, "uuids": uuids}


def pal(fleet: dict[str, Any], *args: str, code: int = 0, env: dict[str, str] | None = None,
        columns: int | None = None, stream: str = "output") -> str:
    """stdout and stderr as a terminal shows them (`stream="stdout"` or "stderr": one of them)."""
    extra = {"COLUMNS": str(columns)} if columns else {"COLUMNS": ""}
    res = CliRunner().invoke(cli, list(args), env={**fleet["env"], **extra, **(env or {})})
    assert "Traceback" not in res.output
    assert res.exit_code == code, f"pal {' '.join(args)}: exit {res.exit_code}, want {code}:\n{res.output}"
    return str(getattr(res, stream))


def words(text: str) -> str:
    """Prose as one line (a terminal wraps it between words)."""
    return " ".join(text.split())


# ---------------------------------------------------------------- no silent success


def test_an_empty_trace_is_an_error_and_never_nan(fleet: dict[str, Any]) -> None:
    tmp = fleet["tmp"]
    for extra in ([], ["--json"], ["--format", "csv"]):
        out = pal(fleet, "simulate", "--trace", str(tmp / "header-only.csv"), "--variability", "db", *extra, code=1)
        assert "header-only.csv: no jobs to simulate (the file has a header and no job rows)" in out
        assert "NaN" not in out and "nan" not in out
    out = pal(fleet, "simulate", "--trace", str(tmp / "never-started.sacct"), "--variability", "db", code=1)
    assert "never-started.sacct: no jobs to simulate: all 2 rows were left out" in out and "never started" in out


def test_an_empty_import_is_an_error_in_both_formats(fleet: dict[str, Any]) -> None:
    empty = str(fleet["tmp"] / "empty.jsonl")
    out = pal(fleet, "profile", "import", empty, code=1)
    assert "empty.jsonl: no runs in the file" in out and "0 runs" not in out
    out = pal(fleet, "profile", "import", "--input-format", "pal-artifact", "--model", "V100", "--benchmark", "x",
              empty, code=1)
    assert "empty.jsonl:1: no data rows" in out


def test_a_filter_that_matches_nothing_says_what_exists(fleet: dict[str, Any]) -> None:
    out = pal(fleet, "gpus", "--node", "nosuch", code=1)
    assert out.strip() == "pal: error: no GPU on node nosuch; nodes: gpu-a-[001-004] (4)"
    out = pal(fleet, "gpus", "--model", "V1OO", code=1)
    assert "no GPU of model 'V1OO' (did you mean V100?); models: V100" in out
    out = pal(fleet, "gpus", "--node", "gpu-a-001", "--model", "H100", code=1)
    assert "models: V100" in out
    for view in (["gpus", "--actions"], ["gpus", "--format", "json"], ["gpus", "--actions", "--format", "json"]):
        out = pal(fleet, *view, "--node", "gpu-a-[007-009]", code=1)
        assert "no GPU on node gpu-a-[007-009] (3 names); nodes: gpu-a-[001-004] (4)" in out
    out = pal(fleet, "gpus", "--node", "gpu-a-[001-", code=2)
    assert "not a node name or hostlist expression" in out
    out = pal(fleet, "classify", "--model", "V1OO", code=1)
    assert "no profile runs of model 'V1OO'; models with runs: V100" in out
    out = pal(fleet, "gpus", "drain", "--node", "nosuch", code=1, env={"PATH": str(fleet["tmp"])})
    assert "no GPU on node nosuch" in out and "would run" not in out


def test_node_and_model_repeat_and_take_hostlists(fleet: dict[str, Any]) -> None:
    def nodes_of(*args: str) -> list[str]:
        return sorted(r["node"] for r in strict_json(pal(fleet, "gpus", "--format", "json", *args)))

    both = nodes_of("--node", NODES[0], "--node", NODES[1])
    assert both == [NODES[0]] * 4 + [NODES[1]] * 4  # the first --node is not dropped
    assert nodes_of("--node", "gpu-a-[001-002]") == both
    assert nodes_of("--node", "gpu-a-001,gpu-a-002") == both
    assert nodes_of("--model", "V100", "--model", "V100") == sorted(NODES * 4)
    # names in a hostlist that match no GPU are said on stderr; the ones that do are listed
    out = pal(fleet, "gpus", "--node", "gpu-a-[004-005]")
    assert "pal: warning: --node gpu-a-[004-005]: no GPU on gpu-a-005" in out and out.count(f"{NODES[3]} ") == 4


def test_config_show_checks_the_whole_file(fleet: dict[str, Any], tmp_path: Path) -> None:
    cases = {
        '[placer]\npolicy = "pal-mach"\n': "placer.policy: unknown policy 'pal-mach' (did you mean 'pal-match'?); "
                                            "valid: packed-sticky,",
        '[placer]\npolcy = "pal"\n': "placer.polcy: unknown setting (did you mean 'policy'?); valid: ",
        '[placer]\nslurm_backend = "slurmrest"\n': "placer.slurm_backend: Input should be 'cli', 'rest' or 'pyslurm'",
        '[placer]\nslurm_backend = "rest"\n': 'placer: slurm_backend = "rest" needs rest_url',
        '[classification]\nmethod = "shrnk"\n': "classification.method: Input should be 'shrink', 'bic' or 'pal-k2'",
        '[jobs]\ndefault_class = "E"\n': "jobs.default_class: unknown job class 'E'; the classes are A, B, C, D",
        "[jobs]\nthresholds = {A = 0.5, B = 0.6, C = 0.2}\n": "jobs.thresholds.B: 0.6 must be below A's 0.5",
        "[reprot]\n": "reprot: unknown setting (did you mean 'report'?)",
    }
    for text, message in cases.items():
        f = tmp_path / "pal.toml"
        f.write_text(text)
        for args in (["config", "show"], ["report"]):  # at load: every command refuses it, not only the placer
            out = pal(fleet, *args, code=1, env={"PAL_CONFIG": str(f)})
            assert out.startswith(f"pal: error: {f}: ") and message in out and out.count("\n") == 1, out


def test_json_is_always_valid(fleet: dict[str, Any]) -> None:
    tmp = fleet["tmp"]
    for args in (["report", "--format", "json"], ["gpus", "--format", "json"], ["gpus", "--all-identities",
                 "--format", "json"], ["gpus", "--actions", "--format", "json"], ["config", "show", "--format", "json"],
                 ["gpus", "--explain", fleet["uuids"][5], "--format", "json"], ["placements", "--format", "json"],
                 ["simulate", "--trace", str(tmp / "calm.csv"), "--variability", "db", "--json"]):
        strict_json(pal(fleet, *args, stream="stdout"))


def test_json_output_turns_nan_into_null() -> None:
    from pal_slurm.cli.render import json_text

    assert strict_json(json_text({"avg": float("nan"), "x": [float("inf"), 1.5], "n": 3})) == \
        {"avg": None, "x": [None, 1.5], "n": 3}


# ---------------------------------------------------------------- the physical fleet


def test_gpus_shows_the_fleet_slurm_schedules(fleet: dict[str, Any]) -> None:
    rows = strict_json(pal(fleet, "gpus", "--format", "json"))
    assert len(rows) == SLOTS and all(r["slot"] is not None and r["node"] for r in rows)
    on_node = strict_json(pal(fleet, "gpus", "--node", NODES[0], "--format", "json"))
    assert sorted(r["slot"] for r in on_node) == [0, 1, 2, 3]  # 4 slots, not 4 + the 3 loose identities
    table = pal(fleet, "gpus")
    assert "16 GPUs at a slot" in table and "4 GPU identities that hold no slot are not shown (--all-identities" in table
    every = strict_json(pal(fleet, "gpus", "--all-identities", "--format", "json"))
    assert len(every) == SLOTS + 4 and sum(r["slot"] is None for r in every) == 4
    apart = pal(fleet, "gpus", "--all-identities", "--node", NODES[0])
    assert "4 GPUs at a slot" in apart and "3 GPU identities that hold no slot" in apart


def test_simulate_says_what_it_simulated_and_warns_without_a_queue(fleet: dict[str, Any]) -> None:
    tmp = fleet["tmp"]
    calm = pal(fleet, "simulate", "--trace", str(tmp / "calm.csv"), "--variability", "db", "--mode", "event",
               "--policy", "pal-guard", stream="stdout")
    assert calm.splitlines()[0].startswith("cluster simulated: 4 nodes x 4 GPUs = 16 GPUs; the database's GPUs at a "
                                           "slot, classification version ")
    assert "(4 GPU identities without a slot left out)" in calm
    warned = pal(fleet, "simulate", "--trace", str(tmp / "calm.csv"), "--variability", "db", "--mode", "event",
                 "--policy", "pal-guard", stream="stderr")
    assert warned.startswith("pal: warning: no job waited under slurm-backfill on the 16 simulated GPUs")
    data = strict_json(pal(fleet, "simulate", "--trace", str(tmp / "calm.csv"), "--variability", "db",
                           "--mode", "event", "--json", stream="stdout"))
    assert data["cluster"]["gpus"] == SLOTS and data["cluster"]["nodes"] == 4 and data["warnings"]
    busy = pal(fleet, "simulate", "--trace", str(tmp / "busy.csv"), "--variability", "db", "--mode", "event")
    assert "no job waited" not in busy
    drawn = pal(fleet, "simulate", "--trace", str(tmp / "busy.csv"), "--variability", "parametric:uniform",
                "--cluster", "2x8", "--mode", "event")
    assert drawn.startswith("cluster simulated: 2 nodes x 8 GPUs = 16 GPUs (--cluster 2x8); variability "
                            "parametric:uniform")


def test_html_counts_nodes_as_the_cards_do_and_leads_with_the_summary(fleet: dict[str, Any]) -> None:
    page_path = fleet["tmp"] / "report.html"
    pal(fleet, "report", "--html", str(page_path))
    page = page_path.read_text()
    assert '<div class="card"><b>4</b>nodes</div>' in page
    assert "All nodes as a table (4 nodes and the “unknown” row;" in page and "5 rows" not in page
    assert page.index('id="summary"') < page.index('id="params"') and "<details open>" not in page
    assert re.search(r'<h2 id="params">Classification parameters</h2>\s*<details><summary>', page)


# ---------------------------------------------------------------- one scale per number


def test_every_number_says_its_scale(fleet: dict[str, Any]) -> None:
    report = pal(fleet, "report", columns=80)
    assert "PerfVar" in report and "min-max" in report and "bins: slowdown" in report
    assert "PerfVar: measured" in words(report) and "`pal gpus --explain GPU`" in words(report)
    gpus = pal(fleet, "gpus", columns=80)
    assert re.search(r"\bsf A\b", gpus) and "sf X: slowdown factor" in words(gpus) and "! = outlier" in words(gpus)
    slow = fleet["uuids"][5]
    line = next(ln for ln in gpus.splitlines() if slow[4:12] in ln)
    assert "!" in line
    explain = pal(fleet, "gpus", "--explain", slow[4:12], columns=200)
    assert "PerfVar" in explain and "slowdown" in explain and "slow outlier" in explain
    data = strict_json(pal(fleet, "gpus", "--explain", f"{NODES[1]}:1", "--format", "json"))
    assert data["uuid"] == slow  # NODE:SLOT names the same GPU
    resnet = next(b for b in data["benchmarks"] if b["benchmark"] == "resnet50")
    assert resnet["job_classes"] == ["A"] and resnet["outlier"]
    assert resnet["slowdown"] == pytest.approx(resnet["perfvar"] / resnet["anchor"])
    assert f"= {resnet['slowdown']:.3f}" in resnet["rule"]
    out = pal(fleet, "gpus", "--explain", "nosuch", code=1)
    assert "no GPU 'nosuch'" in out and "NODE:SLOT" in out


def test_the_report_keeps_the_perfvar_range_at_80_columns(fleet: dict[str, Any]) -> None:
    data = strict_json(pal(fleet, "report", "--format", "json"))
    out = pal(fleet, "report", columns=80)
    assert max(len(ln) for ln in out.splitlines()) <= 80
    for item in data["benchmarks"]:
        pv = item["perfvar"]
        assert f"{pv['min']:.3f}-{pv['max']:.3f}" in out


# ---------------------------------------------------------------- the good errors stay


def test_the_good_errors_stay(fleet: dict[str, Any], tmp_path: Path) -> None:
    out = pal(fleet, "profile", "import", str(tmp_path / "nope.jsonl"), code=1)
    assert "nope.jsonl: file not found" in out
    csv = tmp_path / "runs.csv"
    csv.write_text("uuid,perf\nGPU-1,3.0\n")
    out = pal(fleet, "profile", "import", "--input-format", "pal-artifact", "--model", "V100", "--benchmark", "x",
              str(csv), code=1)
    assert "runs.csv:1:" in out and "uuid, perf" in out.replace("'", "")  # the header it has, listed
    out = pal(fleet, "profile", "import", str(csv), code=1)  # a CSV given to the JSON-lines importer
    assert "runs.csv:1:" in out
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"\x00\xff\xfe binary")
    assert "not a TOML file" in pal(fleet, "config", "show", code=1, env={"PAL_CONFIG": str(binary)})
    broken = tmp_path / "broken.toml"
    broken.write_text("[placer\n")
    assert "invalid TOML" in pal(fleet, "config", "show", code=1, env={"PAL_CONFIG": str(broken)})
    out = pal(fleet, "report", code=1, env={"PAL_DB_URL": f"sqlite:///{tmp_path / 'typo.db'}"})
    assert "typo.db" in out
    out = pal(fleet, "--db", "postgress://x@y/z", "report", code=1)
    assert "pal: error:" in out
    out = pal(fleet, "simulate", "--trace", str(fleet["tmp"] / "calm.csv"), "--variability", "db",
              "--policy", "pal-mach", code=2)
    assert "unknown policy 'pal-mach'" in out and "pal-match" in out


def test_the_config_knows_every_policy_of_the_table_and_no_other() -> None:
    from pal_slurm.config import PlacerConfig
    from pal_slurm.placement.model import DEFAULT_POLICY
    from pal_slurm.placement.table import policy_names

    assert DEFAULT_POLICY in policy_names()
    for name in policy_names():
        assert PlacerConfig(policy=name).policy == name
    with pytest.raises(ValueError, match=r"unknown policy 'pal-gaurd' \(did you mean 'pal-guard'\?\); valid: "
                                         + ", ".join(policy_names())):
        PlacerConfig(policy="pal-gaurd")


# ---------------------------------------------------------------- the real entry point


def _pal_entry_point() -> str:
    found = Path(sys.executable).parent / "pal"
    if not found.exists():
        pytest.skip(f"no `pal` console script next to {sys.executable} (pip install -e .)")
    return str(found)


def test_a_real_shell_run_of_pal(fleet: dict[str, Any]) -> None:
    """The installed `pal`, as a shell runs it: exit codes, stderr, a pipe's width."""
    pal_bin = _pal_entry_point()
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")} | fleet["env"]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([pal_bin, *args], capture_output=True, text=True, env=env, timeout=120, check=False)

    bad = run("gpus", "--node", "nosuch")
    assert bad.returncode == 1 and bad.stdout == ""
    assert bad.stderr == "pal: error: no GPU on node nosuch; nodes: gpu-a-[001-004] (4)\n"
    good = run("gpus", "--node", "gpu-a-[001-002]", "--format", "json")
    assert good.returncode == 0 and len(strict_json(good.stdout)) == 8
    report = run("report")  # to a pipe: 100-column tables, prose lines whole
    assert report.returncode == 0 and report.stderr == ""
    lines = report.stdout.splitlines()
    assert lines[0] == ("GPUs in the database: 20 GPUs on 4 nodes: 16 at a known slot, 3 on a known node, slot "
                        "unknown, 1 with no node")
    table_lines = [ln for ln in lines if not ln.startswith(("GPUs in", "GPU variability", "Per job", "PerfVar:",
                                                            "Outlier GPUs"))]
    assert max(len(ln) for ln in table_lines) <= 100
    assert any(ln.startswith("PerfVar: measured") and ln.endswith("on both scales.") for ln in lines)
    empty = run("simulate", "--trace", str(fleet["tmp"] / "header-only.csv"), "--variability", "db", "--json")
    assert empty.returncode == 1 and empty.stdout == "" and "no jobs to simulate" in empty.stderr
