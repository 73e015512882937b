"""One physical GPU is one row (docs/import-formats.md), and a planted bad score moves nothing.

Small synthetic files in the PAL artifact's two styles (tests/support/artifact_styles.py): "resnet
style" names a GPU by its slot (uuid column ``c001-1-2``, node ``1``), "pagerank style" by its NVML
UUID (node ``001``). How a bad score is judged and reported: test_import_validation.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from conftest import ARTIFACT_CONFIG
from tests.support.artifact_styles import DEVICES, NODES, SLOW, T0, pagerank_csv, resnet_csv, uuid_of
from pal_slurm.services.classification import run_classification
from pal_slurm.cli.main import cli
from pal_slurm.config import load_config
from pal_slurm.db.engine import make_engine, session_scope
from pal_slurm.db.models import Benchmark, ClassificationResult, ClassificationRun, Gpu, Node, ProfileRun
from pal_slurm.ingest.artifact_csv import canonical_node, parse_artifact_csv
from pal_slurm.ingest.records import GpuInfo
from pal_slurm.services.ingest import import_files


def _import(engine, path: Path, bench: str, **kw):
    return import_files(engine, [path], "pal-artifact", benchmark=bench, model="V100", **kw)[0].result


def _runs_by_gpu(engine) -> dict[str, list[tuple[str, float]]]:
    out: dict[str, list[tuple[str, float]]] = {}
    with session_scope(engine) as s:
        for uuid, bench, score in s.execute(
                select(Gpu.uuid, Benchmark.name, ProfileRun.score).join(ProfileRun, ProfileRun.gpu_id == Gpu.id)
                .join(Benchmark, Benchmark.id == ProfileRun.benchmark_id)):
            out.setdefault(uuid, []).append((bench, round(score, 6)))
    return {k: sorted(v) for k, v in out.items()}


def _factors(engine) -> dict[tuple[str, str], float | None]:
    with session_scope(engine) as s:
        run_id = s.scalar(select(ClassificationRun.id).order_by(ClassificationRun.version.desc()).limit(1))
        return {(u, b): sd for u, b, sd in s.execute(
            select(Gpu.uuid, Benchmark.name, ClassificationResult.slowdown)
            .join(Gpu, Gpu.id == ClassificationResult.gpu_id)
            .join(Benchmark, Benchmark.id == ClassificationResult.benchmark_id)
            .where(ClassificationResult.run_id == run_id))}


# -- parsing: names --------------------------------------------------------------------------------


def test_node_names_are_canonical_and_slot_names_are_provisional(tmp_path: Path) -> None:
    res = parse_artifact_csv(resnet_csv(tmp_path / "r.csv").read_text().splitlines(), source_file="r.csv",
                             benchmark="resnet50", model="V100")
    pr = parse_artifact_csv(pagerank_csv(tmp_path / "p.csv").read_text().splitlines(), source_file="p.csv",
                            benchmark="pagerank", model="V100")
    assert canonical_node("c001", 4) == "c001-004" and canonical_node(" c9 ", 1234) == "c9-1234"
    assert {r.gpu.node for r in res} == {r.gpu.node for r in pr} == {"c001-001", "c001-002"}  # 1 and 001
    assert res[0].gpu == GpuInfo(uuid="slot:c001-001:0", node="c001-001", model="V100", nvml_index=0,
                                 provisional=True)
    assert not any(r.gpu.provisional for r in pr) and pr[0].gpu.uuid == uuid_of(1, 0)


def test_a_device_column_that_is_the_same_everywhere_is_not_a_slot(tmp_path: Path) -> None:
    """sgemm's dev_id is 0 on every row (the CUDA ordinal inside a one-GPU job)."""
    text = ["exp,uuid,cabinet,node,ts,perf,dev_id"] + [
        f"sgemm,{uuid_of(1, d)},c001,1,{T0 + d},2400,0" for d in DEVICES]
    notes: list[str] = []
    recs = parse_artifact_csv(text, source_file="s.csv", benchmark="sgemm", model="V100", notes=notes)
    assert all(r.gpu.nvml_index is None and r.gpu.node == "c001-001" for r in recs)
    assert len(notes) == 1 and "'dev_id' is 0 on every row while node c001-001 has 4 GPUs" in notes[0]
    one_gpu = parse_artifact_csv(text[:2], source_file="s.csv", benchmark="sgemm", model="V100", notes=notes)
    assert one_gpu[0].gpu.nvml_index == 0  # nothing contradicts it


@pytest.mark.parametrize("raw", ["nan", "inf", "-3.5", "0", "1e-300"])
def test_implausible_perf_is_parsed_for_validation_to_reject(raw: str) -> None:
    recs = parse_artifact_csv(["uuid,perf,ts", f"GPU-1,{raw},{T0}"], source_file="x.csv", benchmark="b",
                              model="V100")
    assert str(recs[0].score) == str(float(raw))


# -- identity at import ----------------------------------------------------------------------------


def _both_files(engine, tmp_path: Path, order: str) -> None:
    res, pr = resnet_csv(tmp_path / "r.csv"), pagerank_csv(tmp_path / "p.csv")
    cfg = load_config(env={"PAL_CONFIG": ARTIFACT_CONFIG}, db_url=str(engine.url))
    if order == "slot-names-first":
        first = _import(engine, res, "resnet50")
        run_classification(engine, cfg, allow_partial=True)  # classified while still a slot identity: merged all the same
        second = _import(engine, pr, "pagerank")
        assert second.merged_gpus == 6 and second.new_gpus == 0
    else:
        first = _import(engine, pr, "pagerank")
        second = _import(engine, res, "resnet50")
        assert second.resolved_runs == 18 and second.new_gpus == 2  # the 2 slots pagerank did not measure
    assert first.conflicts == second.conflicts == 0
    runs = _runs_by_gpu(engine)
    expected = {uuid_of(n, d) if d < 3 else f"slot:c001-00{n}:{d}" for n in NODES for d in DEVICES}
    assert set(runs) == expected  # 8 physical GPUs, 8 rows
    for n in NODES:
        for d in DEVICES:
            benches = {b for b, _ in runs[uuid_of(n, d) if d < 3 else f"slot:c001-00{n}:{d}"]}
            assert benches == ({"resnet50", "pagerank"} if d < 3 else {"resnet50"})
    with session_scope(engine) as s:
        assert sorted(s.scalars(select(Node.name))) == ["c001-001", "c001-002"]
    run_classification(engine, cfg, allow_partial=True)
    assert {u for u, _ in _factors(engine)} == expected


def test_a_slot_identity_merges_into_the_uuid_learned_later(engine, tmp_path: Path) -> None:
    """On every backend: the merge moves runs and classification rows to the real UUID."""
    _both_files(engine, tmp_path, "slot-names-first")


def test_a_slot_named_row_joins_the_gpu_known_at_its_slot(fresh, tmp_path: Path) -> None:
    """The other order gives the same GPUs with the same runs."""
    _both_files(make_engine(fresh()), tmp_path, "uuids-first")


def test_identity_conflicts_are_reported_never_merged(fresh, tmp_path: Path) -> None:
    engine = make_engine(fresh())
    _import(engine, pagerank_csv(tmp_path / "p.csv", slots=[(1, 0), (1, 1)]), "pagerank")
    # another UUID at slot c001-001 device 0 at the same time; and GPU (1,1) now claims device 2
    other = pagerank_csv(tmp_path / "q.csv", slots=[(1, 0), (1, 1)],
                         uuid=lambda n, d: "GPU-ffffffff-0000-0000-0000-000000000000" if d == 0 else uuid_of(1, 1))
    text = other.read_text().replace(",c001,001,", ",c001,1,")
    lines = text.splitlines()
    lines[4:7] = [ln.replace(f",{T0 + 86400 + 60 * i},1,", f",{T0 + 86400 + 60 * i},2,")
                  for i, ln in enumerate(lines[4:7])]
    other.write_text("\n".join(lines) + "\n")
    out = _import(engine, other, "pagerank")
    assert out.conflicts == 2
    text = "\n".join(out.warnings)
    assert f"{other}:5: GPU {uuid_of(1, 1)} is at c001-001 device 2 here but stored at c001-001 device 1" in text
    assert ("GPU GPU-ffffffff-0000-0000-0000-000000000000 and GPU " + uuid_of(1, 0)
            + " are both at c001-001 device 0 at overlapping times") in text
    assert set(_runs_by_gpu(engine)) == {uuid_of(1, 0), uuid_of(1, 1), "GPU-ffffffff-0000-0000-0000-000000000000"}


# -- validation at import: a planted value moves no other GPU's factor -----------------------------


PLANTED = {"1e300": "1e300", "1e-300": "1e-300", "NaN": "nan", "negative": "-419.4"}


@pytest.mark.parametrize("name", PLANTED)
def test_a_planted_value_changes_no_other_gpus_factor(fresh, tmp_path: Path, name: str) -> None:
    clean = make_engine(fresh("clean.db"))
    cfg = load_config(env={"PAL_CONFIG": ARTIFACT_CONFIG}, db_url=str(clean.url))
    _import(clean, resnet_csv(tmp_path / "clean.csv"), "resnet50")
    run_classification(clean, cfg, allow_partial=True)
    want = _factors(clean)

    bad_gpu = ["resnet,%d,c001,3,c001-3,c001-3-0,0,%s" % (T0 + i, PLANTED[name]) for i in range(3)]
    path = resnet_csv(tmp_path / "planted.csv", extra=bad_gpu)
    dirty = make_engine(fresh())
    out = _import(dirty, path, "resnet50")
    assert out.rejected == 3 and out.added == 24
    assert out.warnings[0].startswith(f"{path}:26: score ")
    run_classification(dirty, load_config(env={"PAL_CONFIG": ARTIFACT_CONFIG}, db_url=str(dirty.url)), allow_partial=True)
    got = _factors(dirty)
    assert {k: v for k, v in got.items() if k[0] != "slot:c001-003:0"} == want


def test_another_model_for_a_stored_gpu_is_warned_about(runner: CliRunner, fresh, tmp_path: Path) -> None:
    sqlite_url = fresh()
    path = resnet_csv(tmp_path / "r.csv")
    args = ["profile", "import", "--input-format", "pal-artifact", "--benchmark", "resnet50", str(path)]
    assert runner.invoke(cli, ["--db", sqlite_url, *args, "--model", "V100"], env={"PAL_CONFIG": ARTIFACT_CONFIG}).exit_code == 0
    resnet_csv(path, extra=[f"resnet,{T0 + 5},c001,1,c001-1,c001-1-0,0,1e-300"])  # one new, planted row
    again = runner.invoke(cli, ["--db", sqlite_url, *args, "--model", "A100"], env={"PAL_CONFIG": ARTIFACT_CONFIG})
    assert again.exit_code == 0
    assert (f"pal: warning: {path}:2: GPU slot:c001-001:0 and 7 more GPUs stored as model V100, this import "
            "says A100: kept V100") in again.stderr
    # the new row is judged in the group its GPU is stored in (V100), not in an empty A100 one
    assert f"{path}:26: score 1e-300 ms is 1/" in again.stderr and "of V100 resnet50" in again.stderr


def test_a_slot_identity_of_another_model_is_not_merged(fresh, tmp_path: Path) -> None:
    """resnet as A100 (slot names), then pagerank as V100 (real UUIDs at the same slots): the A100
    runs do not become V100 runs; each GPU is warned about and counted as a model conflict."""
    engine = make_engine(fresh())
    res = resnet_csv(tmp_path / "r.csv")
    first = import_files(engine, [res], "pal-artifact", benchmark="resnet50", model="A100")[0].result
    pr = pagerank_csv(tmp_path / "p.csv")
    second = _import(engine, pr, "pagerank")
    assert first.model_conflicts == 0
    assert (second.merged_gpus, second.model_conflicts, second.new_gpus) == (0, 6, 6)
    assert (f"{pr}:2: GPU {uuid_of(1, 0)} (model V100) is at c001-001 device 0, where GPU slot:c001-001:0 is "
            "stored as model A100: not merged (a GPU's model does not change; check --model)") in second.warnings
    with session_scope(engine) as s:
        models = {u: m for u, m in s.execute(select(Gpu.uuid, Gpu.model))}
    assert models == {**{f"slot:c001-00{n}:{d}": "A100" for n in NODES for d in DEVICES},
                      **{uuid_of(n, d): "V100" for n in NODES for d in (0, 1, 2)}}
    assert {b for u, runs in _runs_by_gpu(engine).items() if u.startswith("slot:") for b, _ in runs} == {"resnet50"}


def test_a_slot_named_row_of_another_model_joins_the_gpu_at_its_slot(fresh, tmp_path: Path) -> None:
    """The other order: the slot-named rows join the real GPUs (one physical GPU, one row), which
    keep their model; the same GPUs are warned about, once per model pair, as model conflicts."""
    engine = make_engine(fresh())
    pr = pagerank_csv(tmp_path / "p.csv")
    first = _import(engine, pr, "pagerank")
    res = resnet_csv(tmp_path / "r.csv")
    second = import_files(engine, [res], "pal-artifact", benchmark="resnet50", model="A100")[0].result
    assert first.model_conflicts == 0
    assert (second.resolved_runs, second.model_conflicts, second.new_gpus) == (18, 6, 2)
    assert any(w.endswith(f"GPU {uuid_of(1, 0)} and 5 more GPUs stored as model V100, this import says A100: "
                          "kept V100 (a GPU's model does not change; check --model)") for w in second.warnings)
    with session_scope(engine) as s:
        models = {u: m for u, m in s.execute(select(Gpu.uuid, Gpu.model))}
    assert models == {**{f"slot:c001-00{n}:3": "A100" for n in NODES},
                      **{uuid_of(n, d): "V100" for n in NODES for d in (0, 1, 2)}}


def test_db_upgrade_says_which_directory_it_created(runner: CliRunner, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'new' / 'dir' / 'pal.db'}"
    result = runner.invoke(cli, ["--db", url, "db", "upgrade"], env={"PAL_CONFIG": ARTIFACT_CONFIG})
    assert result.exit_code == 0
    assert result.stderr == f"pal: created the directory {tmp_path / 'new'} for the database (it did not exist)\n"
    again = runner.invoke(cli, ["--db", url, "db", "upgrade"], env={"PAL_CONFIG": ARTIFACT_CONFIG})
    assert again.exit_code == 0 and again.stderr == ""


def test_the_report_says_how_many_physical_gpus_the_rows_stand_for(runner: CliRunner, fresh, tmp_path: Path) -> None:
    """Rows the data cannot place (a UUID on a known node, slot unknown, as Longhorn's sgemm) are
    not physical GPUs of their own: `pal report` (terminal, JSON, HTML) gives the fewest physical
    GPUs the rows can be, next to the row count."""
    sqlite_url = fresh()
    sgemm = tmp_path / "s.csv"
    sgemm.write_text("\n".join(["exp,uuid,cabinet,node,ts,perf,dev_id"] + [
        f"sgemm,{uuid_of(1, d)},c001,1,{T0 + 60 * i},{2400 * SLOW[(1, d)]},0" for d in DEVICES for i in range(3)])
        + "\n")

    def pal(*args: str) -> str:
        result = runner.invoke(cli, ["--db", sqlite_url, *args], env={"PAL_CONFIG": ARTIFACT_CONFIG, "COLUMNS": "80"})
        assert result.exit_code == 0, result.output
        return result.stdout

    for bench, path in (("resnet50", resnet_csv(tmp_path / "r.csv")), ("sgemm", sgemm)):
        pal("profile", "import", "--input-format", "pal-artifact", "--model", "V100", "--benchmark", bench, str(path))
    pal("classify", "--allow-partial")
    report = json.loads(pal("report", "--format", "json"))
    # 8 slot-named GPUs on 2 nodes + 4 UUIDs on node 1 whose slots the file does not give
    assert report["identity"] == {"gpus": 12, "nodes": 2, "at_slot": 8, "slot_named": 8, "node_only": 4,
                                  "unlocated": 0, "physical_min": 8}
    text = pal("report")
    assert "GPUs in the database: 12 GPUs on 2 nodes" in text and "at least 8 physical GPUs" in text
    assert max(len(line) for line in text.splitlines()) <= 80
    html = tmp_path / "r.html"
    pal("report", "--html", str(html))
    page = html.read_text(encoding="utf-8")
    assert '<b>8</b>physical GPUs (at least)' in page and '<b>12</b>GPU identities' in page


def test_an_older_file_never_moves_a_gpu_and_says_where_it_found_it(fresh, tmp_path: Path) -> None:
    """A UUID stored on a node the new file does not name: its slot is still known, so an older
    measurement elsewhere is a conflict to report, not a move."""
    engine = make_engine(fresh())
    _import(engine, pagerank_csv(tmp_path / "new.csv", slots=[(1, 0)], ts=T0 + 86400), "pagerank")
    old = pagerank_csv(tmp_path / "old.csv", slots=[(2, 2)], ts=T0, uuid=lambda n, d: uuid_of(1, 0))
    res = _import(engine, old, "pagerank")
    assert res.conflicts == 1 and "one UUID at two slots" in res.warnings[0], res.warnings
    assert res.new_gpus == 0
    with session_scope(engine) as s:
        node, index = s.execute(select(Node.name, Gpu.nvml_index).join(Gpu.node)
                                .where(Gpu.uuid == uuid_of(1, 0))).one()
    assert (node, index) == ("c001-001", 0)


def test_a_file_with_slot_names_and_a_constant_device_column_imports(fresh, tmp_path: Path) -> None:
    """Slot-named rows carry their device in the name; a constant device column beside real UUIDs
    on the same node is the job's ordinal for those, never a reason to drop the slot names' devices."""
    engine = make_engine(fresh())
    path = tmp_path / "mixed.csv"
    path.write_text("\n".join(["exp,ts,cabinet,node,uuid,device,perf"]
                              + [f"resnet,{T0 + i},c001,1,c001-1-0,0,400" for i in range(3)]
                              + [f"resnet,{T0 + i},c001,1,{uuid_of(1, d)},0,{400 + d}" for d in (1, 2)
                                 for i in range(3)]) + "\n")
    res = _import(engine, path, "resnet50")  # was an AssertionError
    assert res.added == 9 and res.conflicts == 0
    assert set(_runs_by_gpu(engine)) == {"slot:c001-001:0", uuid_of(1, 1), uuid_of(1, 2)}
    with session_scope(engine) as s:
        index = {u: i for u, i in s.execute(select(Gpu.uuid, Gpu.nvml_index))}
    assert index == {"slot:c001-001:0": 0, uuid_of(1, 1): None, uuid_of(1, 2): None}
