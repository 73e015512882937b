"""The parser of the PAL artifact CSVs (the pal-profile/1 JSON-lines format: test_ingest_jsonl.py).

Fixtures under tests/data/artifact-csv/ carry the REAL header and real rows of each artifact
file, picked for the parser's cases (PAL artifact, hal-uw/blox-pal branch `artifact`, MIT
licensed); the test marked `artifact` reads the full files in tests/data/pal-artifact.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pal_slurm.errors import InputError
from pal_slurm.ingest import artifact_csv, jsonl
from pal_slurm.ingest.artifact_csv import parse_artifact_csv
from pal_slurm.ingest.jsonl import dump_record, parse_jsonl, run_key_for
from pal_slurm.ingest.records import GpuInfo

DATA = Path(__file__).parents[1] / "data"
#: The artifact CSV fixtures (tests/data/artifact-csv/README.md); the files keep the artifact's
#: names because parse_file takes the benchmark from the name.
CSV_DATA = DATA / "artifact-csv"
REPO = Path(__file__).resolve().parents[2]
V100 = "Tesla V100-SXM2-16GB"


def csv_lines(name: str) -> list[str]:
    with (CSV_DATA / name).open(encoding="utf-8", newline="") as f:
        return f.readlines()


def parse_fixture(bench: str) -> list:
    return artifact_csv.parse_file(CSV_DATA / f"{bench}-longhorn-agg.csv", model=V100)


def utc(ts: int) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC)


# --------------------------------------------------------------------------- artifact CSV


def test_resnet_row() -> None:
    recs = parse_fixture("resnet")
    assert len(recs) == 4
    r = recs[0]
    assert r.benchmark == "resnet" and r.source == "pal-artifact" and r.line == 2
    # the uuid column holds the slot's name: a provisional identity, resolved at import
    assert r.gpu.uuid == "slot:c002-004:1" and r.gpu.provisional
    assert r.gpu.node == "c002-004"  # canonical: cabinet + node zero-padded to 3 digits
    assert r.gpu.model == V100
    assert r.gpu.nvml_index == 1
    assert r.score == pytest.approx(419.4316536)
    assert r.unit == "ms" and r.lower_is_better is True
    assert r.sm_clock_mhz == 1530 and r.mem_clock_mhz == 877  # freq, median_memfreq
    assert r.power_w == pytest.approx(82.091) and r.temperature_c == 43
    assert r.duration_s == pytest.approx(669.346049)  # train_time
    assert r.repeats is None
    assert r.started_at == datetime(2022, 3, 2, 4, 39, 58, tzinfo=UTC)
    assert r.started_at.tzinfo is not None and r.started_at.utcoffset().total_seconds() == 0
    assert recs[1].gpu.node == "c002-011" and recs[1].gpu.nvml_index == 2
    assert [x.line for x in recs] == [2, 3, 4, 5]


def test_bert_row_and_log_tails_in_train_time() -> None:
    recs = parse_fixture("bert")
    assert len(recs) == 4
    r = recs[0]
    assert r.gpu.uuid == "slot:c009-003:1" and r.gpu.provisional
    assert r.gpu.node == "c009-003"  # cabinet + node
    assert r.gpu.nvml_index == 1  # device
    assert r.score == pytest.approx(243.783229)  # perf, not perf_s
    assert r.sm_clock_mhz == 1530 and r.mem_clock_mhz == 877  # freq, memfreq
    assert r.power_w == pytest.approx(149.254) and r.temperature_c == 59
    assert r.duration_s == pytest.approx(111.7753311)
    assert r.started_at == utc(1652840332)
    # the artifact scraped log text into some train_time fields; the number in front is kept
    assert recs[2].duration_s == pytest.approx(88.75737034302438)  # "...Total"
    assert recs[3].duration_s == pytest.approx(86.57913603895577)  # "...[2022-05-18"
    assert recs[3].gpu.node == "c004-001" and recs[3].gpu.nvml_index == 2


def test_pagerank_row() -> None:
    recs = parse_fixture("pagerank")
    assert len(recs) == 3
    r = recs[0]
    assert r.gpu.uuid == "GPU-0542528c-4ba5-0eff-4a1f-90ac59dd0446"
    assert r.gpu.node == "c005-004" and not r.gpu.provisional  # 'c005', '004'
    assert r.gpu.nvml_index == 3
    assert r.score == pytest.approx(66035.874913)
    assert r.repeats == 2 and [x.repeats for x in recs] == [2, 1, 4]
    assert r.sm_clock_mhz == 1530 and r.mem_clock_mhz == 877
    assert r.power_w == pytest.approx(78.072) and r.temperature_c == 33
    assert r.duration_s is None
    assert r.started_at == datetime(2022, 3, 23, 14, 31, 9, tzinfo=UTC)


def test_sgemm_rows_duplicates_and_sentinels() -> None:
    recs = parse_fixture("sgemm")
    assert len(recs) == 7  # exact duplicates are kept as separate runs
    r = recs[0]
    assert r.gpu.uuid == "GPU-e1342d2b-9672-84a6-3f4f-793c5cec8f2f"
    assert r.gpu.node is None  # cabinet/node = -1
    assert r.gpu.nvml_index == 0  # dev_id
    assert r.repeats == 100
    assert r.score == pytest.approx(2454.674449)
    assert r.sm_clock_mhz == 1350 and r.mem_clock_mhz == 877
    assert r.power_w == pytest.approx(296.79) and r.temperature_c == 73
    assert r.started_at == datetime(2020, 6, 2, 17, 27, 42, tzinfo=UTC)
    assert recs[4].gpu.node == "c009-001"
    # ts = -1 is the artifact's "unknown" sentinel: kept, at the Unix epoch
    assert recs[5].started_at == datetime(1970, 1, 1, tzinfo=UTC)
    keys = [x.run_key for x in recs]
    assert len(set(keys)) == 7
    assert all(len(k) == 64 and int(k, 16) >= 0 for k in keys)


def test_run_keys_are_stable_and_line_ending_independent() -> None:
    first = [r.run_key for r in parse_fixture("sgemm")]
    second = [r.run_key for r in parse_fixture("sgemm")]
    assert first == second
    lf = [ln.rstrip("\r\n") for ln in csv_lines("sgemm-longhorn-agg.csv")]
    third = [r.run_key for r in parse_artifact_csv(lf, source_file="x.csv", benchmark="sgemm", model=V100)]
    assert third == first
    # the key covers the benchmark name
    other = parse_artifact_csv(lf, source_file="x.csv", benchmark="sgemm-b", model=V100)
    assert not set(first) & {r.run_key for r in other}


def test_run_key_definition() -> None:
    lines = csv_lines("sgemm-longhorn-agg.csv")
    recs = parse_artifact_csv(lines, source_file="s.csv", benchmark="sgemm", model=V100)
    fields = lines[3].rstrip("\r\n").split(",")  # line 4 = 2nd occurrence of line 2
    expected = hashlib.sha256(
        ('["pal-artifact-csv/1","sgemm",' + "[" + ",".join(f'"{f}"' for f in fields) + "],2]").encode()
    ).hexdigest()
    assert recs[2].run_key == expected == artifact_csv.artifact_run_key("sgemm", fields, 2)


def test_header_by_name_not_position() -> None:
    lines = [ln.rstrip("\r\n") for ln in csv_lines("pagerank-longhorn-agg.csv")]
    rows = [ln.split(",") for ln in lines]
    reordered = [",".join(reversed(r)) for r in rows]
    a = parse_artifact_csv(lines, source_file="a", benchmark="pagerank", model=V100)
    b = parse_artifact_csv(reordered, source_file="b", benchmark="pagerank", model=V100)
    strip = lambda r: dataclasses.replace(r, run_key="", source_file="")
    assert [strip(r) for r in a] == [strip(r) for r in b]


def test_unit_and_model_arguments_and_bom() -> None:
    lines = csv_lines("resnet-longhorn-agg.csv")
    lines[0] = "\ufeff" + lines[0]
    recs = parse_artifact_csv(lines, source_file="r.csv", benchmark="rn50", model="V100", unit="s")
    assert recs[0].unit == "s" and recs[0].benchmark == "rn50" and recs[0].gpu.model == "V100"


def test_blank_lines_are_skipped_and_lines_stay_physical() -> None:
    lines = csv_lines("pagerank-longhorn-agg.csv")
    lines.insert(2, "\n")
    recs = parse_artifact_csv(lines, source_file="p.csv", benchmark="pagerank", model=V100)
    assert [r.line for r in recs] == [2, 4, 5]


def _bad_csv(mutate) -> list[str]:
    lines = [ln.rstrip("\r\n") for ln in csv_lines("pagerank-longhorn-agg.csv")]
    header = lines[0].split(",")
    rows = [ln.split(",") for ln in lines[1:]]
    mutate(header, rows)
    return [",".join(header)] + [",".join(r) for r in rows]


def _set(column: str, value: str, row: int = 1):
    def mutate(header, rows):
        rows[row][header.index(column)] = value

    return mutate


def _drop(column: str):
    def mutate(header, rows):
        i = header.index(column)
        for r in [header, *rows]:
            del r[i]

    return mutate


@pytest.mark.parametrize(
    ("mutate", "line", "reason"),
    [
        (_drop("perf"), 1, "missing required column 'perf'"),
        (_drop("uuid"), 1, "missing required column 'uuid'"),
        (_drop("ts"), 1, "missing required column 'ts'"),
        (_set("perf", "abc"), 3, "column 'perf': 'abc' is not a number"),
        (_set("perf", ""), 3, "column 'perf': empty"),
        (_set("uuid", ""), 3, "column 'uuid': empty"),
        (_set("uuid", "  "), 3, "column 'uuid': empty"),
        (_set("ts", "yesterday"), 3, "column 'ts': 'yesterday' is not a unix timestamp"),
        (_set("ts", "-5"), 3, "column 'ts': '-5' is not a valid unix timestamp"),
        (_set("ts", ""), 3, "column 'ts': empty"),
        (_set("freq", "fast"), 3, "column 'freq': 'fast' is not a number"),
        (_set("pwr", "-7"), 3, "column 'pwr': must not be negative, got -7"),
        (_set("reps", "2.5"), 3, "column 'reps': '2.5' is not an integer"),
        (_set("node", "x4"), 3, "column 'node': 'x4' is not an integer"),
        (lambda h, r: r[2].pop(), 4, "expected 16 fields (as in the header), got 15"),
        (lambda h, r: r[0].append("7"), 2, "expected 16 fields (as in the header), got 17"),
    ],
)
def test_malformed_csv(mutate, line: int, reason: str) -> None:
    lines = _bad_csv(mutate)
    with pytest.raises(InputError) as err:
        parse_artifact_csv(lines, source_file="bad.csv", benchmark="pagerank", model=V100)
    assert err.value.source == "bad.csv" and err.value.line == line
    assert str(err.value).startswith(f"bad.csv:{line}: ")
    assert reason in str(err.value)


@pytest.mark.parametrize(
    ("content", "reason"),
    [("", "no data rows"), ("uuid,perf,ts\n", "no data rows"), ("uuid,perf,ts\r\n\r\n", "no data rows")],
)
def test_empty_csv(tmp_path: Path, content: str, reason: str) -> None:
    p = tmp_path / "empty.csv"
    p.write_text(content, encoding="utf-8", newline="")
    with pytest.raises(InputError, match=f"empty.csv:1: {reason}"):
        artifact_csv.parse_file(p, model=V100)


def test_minimal_columns_and_optional_empties() -> None:
    recs = parse_artifact_csv(
        ["uuid,perf,ts,freq,pwr,device", "GPU-1,10.5,1600000000,,nan,-1"],
        source_file="m.csv",
        benchmark="x",
        model=V100,
    )
    (r,) = recs
    assert r.gpu == GpuInfo(uuid="GPU-1", node=None, model=V100, nvml_index=None)
    assert r.sm_clock_mhz is None and r.power_w is None and r.score == 10.5


def test_missing_and_unreadable_files(tmp_path: Path) -> None:
    missing = tmp_path / "nope.csv"
    with pytest.raises(InputError, match="nope.csv: file not found"):
        artifact_csv.parse_file(missing, model=V100)
    with pytest.raises(InputError, match="nope.csv: file not found"):
        jsonl.parse_file(missing)
    with pytest.raises(InputError, match="is a directory"):
        jsonl.parse_file(tmp_path)
    binary = tmp_path / "bin.jsonl"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(InputError, match="bin.jsonl: not valid UTF-8"):
        jsonl.parse_file(binary)


def test_benchmark_from_filename() -> None:
    assert artifact_csv.benchmark_from_filename("x/resnet-longhorn-agg.csv") == "resnet"
    assert parse_fixture("bert")[0].benchmark == "bert"


@pytest.mark.artifact
def test_real_artifact_files() -> None:
    from conftest import require_artifact

    base = require_artifact("variability", "longhorn")
    expected = {"resnet": (1404, 336), "bert": (1096, 136), "pagerank": (880, 172), "sgemm": (11087, 392)}
    keys: set[str] = set()
    total = 0
    for bench, (rows, gpus) in expected.items():
        recs = artifact_csv.parse_file(base / "variability" / "longhorn" / f"{bench}-longhorn-agg.csv", model=V100)
        assert (len(recs), len({r.gpu.uuid for r in recs})) == (rows, gpus), bench
        assert all(r.score > 0 and r.lower_is_better for r in recs)
        keys |= {r.run_key for r in recs}
        total += len(recs)
    assert total == 14467 and len(keys) == total  # 2,284 exact duplicate sgemm rows stay distinct
    # parsing speed is measured by bench/import_speed.py, not asserted here


# --------------------------------------------------------------------------- an artifact record as JSON lines


def test_jsonl_dump_of_an_artifact_record() -> None:
    rec = parse_fixture("pagerank")[0]
    line = dump_record(rec)  # run_id defaults to the record's run_key
    (back,) = parse_jsonl([line], source_file="d")
    assert back.run_key == run_key_for(rec.run_key)
    assert dataclasses.replace(back, run_key="", source_file="", line=0) == dataclasses.replace(
        rec, run_key="", source_file="", line=0
    )
    # dumping is deterministic, so re-importing a dumped file is idempotent
    assert dump_record(rec) == line
