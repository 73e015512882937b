"""Docs that cannot drift: every figure README.md, docs/admin-guide.md and docs/report-json.md
quote from a command's output is computed here from that command, run on the walkthrough's own
data (the README's Longhorn walkthrough; `pal demo`'s fleet for the drain example), and looked
up in the document. A figure that changes fails here until the document says it."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from conftest import REPO
from pal_slurm.cli.main import cli

README = (REPO / "README.md").read_text(encoding="utf-8")
GUIDE = (REPO / "docs" / "admin-guide.md").read_text(encoding="utf-8")
REPORT_JSON = (REPO / "docs" / "report-json.md").read_text(encoding="utf-8")
FILES = (("resnet50", "resnet"), ("bert", "bert"), ("pagerank", "pagerank"), ("sgemm", "sgemm"))


class Walkthrough:
    """The README's Longhorn walkthrough, run once: `pal` on its database and configuration."""

    def __init__(self, tmp: Path, artifact: Path) -> None:
        self.config = tmp / "longhorn.toml"
        self.config.write_text('[classification]\nbenchmark_set = "pal-artifact"\n')
        self.url = f"sqlite:///{tmp / 'longhorn.db'}"
        self.artifact = artifact
        self.pal("db", "upgrade")
        longhorn = artifact / "variability" / "longhorn"
        for bench, prefix in FILES:
            self.last_import = self.pal("profile", "import", "--input-format", "pal-artifact", "--model", "V100",
                                        "--benchmark", bench, str(longhorn / f"{prefix}-longhorn-agg.csv"))
        self.pal("classify")
        self.report = json.loads(self.pal("report", "--format", "json"))

    def pal(self, *args: str, env: dict[str, str] | None = None) -> str:
        res = CliRunner().invoke(cli, ["--config", str(self.config), "--db", self.url, *args],
                                 env={"PAL_CONFIG": "", "PAL_DB_URL": "", **(env or {})})
        assert res.exit_code == 0, res.output
        return res.stdout


@pytest.fixture(scope="module")
def walk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Walkthrough]:
    from conftest import require_artifact

    yield Walkthrough(tmp_path_factory.mktemp("walk"), require_artifact("variability", "longhorn"))


def rounded(obj: Any, digits: int = 4) -> Any:
    if isinstance(obj, float):
        return round(obj, digits)
    if isinstance(obj, dict):
        return {k: rounded(v, digits) for k, v in obj.items()}
    if isinstance(obj, list):
        return [rounded(v, digits) for v in obj]
    return obj


def compact(obj: Any) -> str:
    """JSON as report-json.md shows it, without whitespace, the runs' age written N."""
    text = re.sub(r"\d+ days ago", "N days ago", json.dumps(rounded(obj), separators=(",", ":")))
    return text.replace(" ", "")


def no_space(text: str) -> str:
    return re.sub(r"\s+", "", text)


def resnet50(walk: Walkthrough) -> dict[str, Any]:
    return next(b for b in walk.report["benchmarks"] if b["benchmark"] == "resnet50")


def test_readme_import_and_report_lines(walk: Walkthrough) -> None:
    db_line = next(line for line in walk.last_import.splitlines() if line.startswith("database:"))
    assert db_line.split(" (a GPU whose")[0] + " (...)" in README
    first = walk.pal("report").splitlines()[0]
    assert "at least 396 physical GPUs" in first and "at least 396 physical GPUs" in README
    item = resnet50(walk)
    bins = " ".join(f"{b['slowdown']:.3f}x{b['gpus']}" for b in item["bins"] if not b["outlier"])
    summary = (f"resnet50: {item['gpus']} GPUs, PerfVar {item['perfvar']['min']:.3f}-{item['perfvar']['max']:.3f}, "
               f"bins {bins}, {len(item['outliers'])} outliers")
    assert summary in README, summary


def test_readme_and_guide_quote_one_gpu_as_gpus_and_explain_print_it(walk: Walkthrough) -> None:
    rows = json.loads(walk.pal("gpus", "--node", "c006-012", "--format", "json"))
    gpu = next(r for r in rows if r["slot"] == 3)
    assert f"c006-012:3 is an outlier at sf A {gpu['classes']['A']['slowdown']:.3f}!" in README
    explained = json.loads(walk.pal("gpus", "--explain", "c006-012:3", "--format", "json"))
    b = next(x for x in explained["benchmarks"] if x["benchmark"] == "resnet50")
    assert (f"its resnet50 PerfVar {b['perfvar']:.3f} (the report's) and why its factor is {b['slowdown']:.3f} "
            f"(anchor {b['anchor']:.3f})") in README
    line = (f"resnet50 {' '.join(b['job_classes'])} {b['runs']} {b['perfvar']:.3f} {b['bin']} (outlier) "
            f"{b['slowdown']:.3f}! {b['rule']}")
    assert " ".join(line.split()) in " ".join(GUIDE.split()), line


def test_readme_counts_the_slots_and_the_outliers(walk: Walkthrough) -> None:
    from pal_slurm.db.classification_store import get_run, load_classification
    from pal_slurm.db.engine import make_engine, session_scope

    engine = make_engine(walk.url)
    with session_scope(engine) as s:
        stored = load_classification(s, get_run(s, None))  # type: ignore[arg-type]
    engine.dispose()
    per_slot: dict[str, set[str]] = {}
    for r in stored.results:
        if r.profiled and r.node and r.slot is not None:
            per_slot.setdefault(r.uuid, set()).add(r.benchmark)
    d_and_ab = sum(1 for b in per_slot.values() if "pagerank" in b and b & {"resnet50", "bert"})
    classes = sum(1 for b in per_slot.values() if {"resnet50", "bert", "pagerank"} <= b)
    four = sum(1 for b in per_slot.values() if {"resnet50", "bert", "pagerank", "sgemm"} <= b)
    assert (f"({d_and_ab} have\npagerank and resnet50 or bert; {classes} carry all of job classes A-D, {four} of "
            "them all four files)") in README
    actions = walk.report["actions"]
    assert {a["action"] for a in actions} == {"re-profile"}
    assert f'The {len(actions)} outlier GPUs are all\n"re-profile"' in README


def test_readme_quotes_the_simulations_first_line(walk: Walkthrough) -> None:
    trace = walk.artifact / "traces" / "sia-philly" / "workload-1.csv"
    first = walk.pal("simulate", "--trace", str(trace), "--variability", "db", "--mode", "event",
                     "--policy", "slurm-backfill").splitlines()[0]
    head, _sep, tail = first.partition("; ")
    assert head.startswith("cluster simulated: ") and f"# first line: {head}; ..." in README, first
    left_out = re.search(r"\(\d+ GPU identities without a slot left out\)", tail)
    assert left_out and left_out.group(0) in README, first


def test_report_json_example_is_the_walkthroughs_report(walk: Walkthrough) -> None:
    doc = no_space(REPORT_JSON)
    item = resnet50(walk)
    whole = [*item["bins"][:3], item["bins"][-1],  # objects the example shows whole
             next(o for o in item["outlier_details"] if o["uuid"] == "slot:c006-012:3"),
             next(a for a in walk.report["actions"] if a["uuid"] == "slot:c006-012:3")]
    for obj in whole:
        assert compact(obj) in doc, compact(obj)
    job_class = next(c for c in walk.report["job_classes"] if c["job_class"] == "A")
    shown = {k: job_class[k] for k in ("job_class", "model", "benchmark", "gpus")}
    assert compact(shown)[:-1] + ',"...":' in doc, compact(shown)  # the example elides the rest
    for key, value in (("gpus", item["gpus"]), ("unprofiled", item["unprofiled"]), ("perfvar", item["perfvar"]),
                       ("regular_bins", item["regular_bins"]), ("outliers", item["outliers"]),
                       ("identity", walk.report["identity"])):
        fragment = compact({key: value})[1:-1]  # "key":value, as the example's line has it
        assert fragment in doc, fragment


def test_the_guides_drain_example_is_what_pal_gpus_drain_prints_on_the_demo(tmp_path: Path) -> None:
    from pal_slurm.demo.walkthrough import DemoOptions, run_demo

    result = run_demo(DemoOptions(out_dir=tmp_path / "demo"), say=lambda _line: None)
    no_slurm = tmp_path / "bin"  # no sinfo: the dry run is the plan alone
    no_slurm.mkdir()
    res = CliRunner().invoke(cli, ["--db", result.db_url, "gpus", "drain"],
                             env={"PAL_CONFIG": "", "PAL_DB_URL": "", "PATH": str(no_slurm)})
    assert res.exit_code == 0, res.output
    plan = [line for line in res.stdout.splitlines() if line.startswith("would run:")]
    assert plan
    block = GUIDE.split("`pal gpus drain` shows what it would do", 1)[1].split("```")[1].strip().splitlines()
    assert block == plan
