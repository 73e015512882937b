"""The parser and writer of the pal-profile/1 JSON-lines format (the fixtures: tests/data/profile-*.jsonl)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from datetime import UTC, datetime

import pytest

from conftest import DATA
from pal_slurm.errors import InputError
from pal_slurm.ingest import jsonl
from pal_slurm.ingest.jsonl import dump_jsonl, dump_record, parse_jsonl, run_key_for
from pal_slurm.ingest.records import GpuInfo


def test_jsonl_full_file() -> None:
    recs = jsonl.parse_file(DATA / "profile-full.jsonl")
    assert [r.line for r in recs] == [2, 4]
    r = recs[0]
    assert r.run_key == hashlib.sha256(b"pal-profile/1\x007f0c2a9e-run-1").hexdigest() == run_key_for("7f0c2a9e-run-1")
    assert r.gpu == GpuInfo(
        uuid="GPU-5c1e0f3a-8d1b-4c2e-9a6f-0b1c2d3e4f50",
        node="gpu01",
        model="NVIDIA H100 80GB HBM3",
        nvml_index=0,
        minor_number=0,
        pci_bus_id="00000000:1B:00.0",
        serial="1654922001234",
        memory_mib=81559,
    )
    assert (r.benchmark, r.score, r.unit, r.lower_is_better) == ("gemm-fp16", 612.4, "TFLOP/s", False)
    assert r.started_at == datetime(2026, 11, 30, 7, 0, tzinfo=UTC)
    assert (r.duration_s, r.repeats, r.spread) == (12.3, 10, 0.004)
    assert (r.sm_clock_mhz, r.mem_clock_mhz, r.power_w, r.temperature_c) == (1980, 2619, 690.1, 61)
    assert (r.throttle_reasons, r.driver_version, r.cuda_version, r.source) == (4, "550.54.15", "12.4", "pal-profiler")
    s = recs[1]
    assert s.started_at == datetime(2026, 11, 30, 7, 15, 30, 250000, tzinfo=UTC)  # +02:00 -> UTC
    assert s.started_at.tzinfo == UTC
    assert s.gpu.nvml_index == 1 and isinstance(s.gpu.nvml_index, int)  # 1.0 is integral
    assert s.gpu.minor_number is None and s.spread is None and s.gpu.serial is None
    assert s.lower_is_better is True and s.source == "demo"


def test_jsonl_minimal_file() -> None:
    (r,) = jsonl.parse_file(DATA / "profile-minimal.jsonl")
    assert r.gpu == GpuInfo(uuid="GPU-0000aaaa", model="NVIDIA A100-SXM4-40GB")
    assert r.score == 250 and r.source == "pal-profiler" and r.line == 1
    assert r.duration_s is r.repeats is r.power_w is r.throttle_reasons is r.driver_version is None


def test_jsonl_empty_and_comment_only_give_no_records() -> None:
    assert parse_jsonl([], source_file="e") == []
    assert parse_jsonl(["# nothing\n", "   \n"], source_file="e") == []


def test_jsonl_round_trip() -> None:
    recs = jsonl.parse_file(DATA / "profile-full.jsonl") + jsonl.parse_file(DATA / "profile-minimal.jsonl")
    run_ids = ["7f0c2a9e-run-1", "7f0c2a9e-run-2", "min-1"]
    text = dump_jsonl(recs, run_ids)
    assert text.endswith("\n") and text.count("\n") == 3
    back = parse_jsonl(text.splitlines(keepends=True), source_file="rt.jsonl")
    assert [dataclasses.replace(r, source_file="", line=0) for r in back] == [
        dataclasses.replace(r, source_file="", line=0) for r in recs
    ]
    for r, rid in zip(recs, run_ids, strict=True):
        assert parse_jsonl([dump_record(r, rid)], source_file="one")[0].run_key == r.run_key


def test_dump_refuses_invalid_records() -> None:
    (r,) = jsonl.parse_file(DATA / "profile-minimal.jsonl")
    with pytest.raises(ValueError, match="score: must be a positive number"):
        dump_record(dataclasses.replace(r, score=-1.0))
    with pytest.raises(ValueError, match="no time zone"):
        dump_record(dataclasses.replace(r, started_at=datetime(2026, 1, 1)))
    with pytest.raises(ValueError, match="2 run_ids"):
        dump_jsonl([r], ["a", "b"])


MIN = (
    '{"format":"pal-profile/1","run_id":"r1","gpu":{"uuid":"GPU-1","model":"M"},"benchmark":"b",'
    '"started_at":"2026-01-01T00:00:00Z","score":1.5,"unit":"ms","lower_is_better":true}'
)


def _with(**changes) -> str:
    obj = json.loads(MIN)
    for path, value in changes.items():
        target = obj
        *parents, leaf = path.split("__")
        for p in parents:
            target = target[p]
        if value is _DROP:
            del target[leaf]
        else:
            target[leaf] = value
    return json.dumps(obj)


_DROP = object()


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ('{"format": "pal-profile/1", "run_id": ', "invalid JSON: Expecting value"),
        ("[1, 2]", "each line must be a JSON object, got an array"),
        ('{"a": 1, "a": 2}', "invalid JSON object: duplicate key 'a'"),
        (MIN.replace('"score":1.5', '"score":NaN'), "invalid JSON: NaN is not valid JSON"),
        (_with(format="pal-profile/2"), 'format: unsupported format "pal-profile/2"'),
        (_with(format=_DROP), "format: missing"),
        (_with(run_id=""), "run_id: must be a non-empty string"),
        (_with(run_id=7), "run_id: must be a string, got 7"),
        (_with(gpu__uuid=_DROP), "gpu.uuid: missing"),
        (_with(gpu__uuid=None), "gpu.uuid: must not be null"),
        (_with(gpu__model=_DROP), "gpu.model: missing"),
        (_with(gpu="GPU-1"), 'gpu: must be an object, got "GPU-1"'),
        (_with(benchmark=_DROP), "benchmark: missing"),
        (_with(unit=_DROP), "unit: missing"),
        (_with(started_at="2026-01-01T00:00:00"), "started_at: \"2026-01-01T00:00:00\" has no time zone"),
        (_with(started_at="2026-01-01"), "has no time zone"),
        (_with(started_at="last tuesday"), 'started_at: "last tuesday" is not an ISO 8601 date-time'),
        (_with(started_at=1700000000), "started_at: must be an ISO 8601 string, got 1700000000"),
        (_with(score=True), "score: must be a number, got true"),
        (_with(score="612"), 'score: must be a number, got "612"'),
        (_with(score=_DROP), "score: missing"),
        (_with(lower_is_better=1), "lower_is_better: must be true or false, got 1"),
        (_with(lower_is_better=_DROP), "lower_is_better: missing"),
        (_with(gpu__nvml_index=1.5), "gpu.nvml_index: must be an integer, got 1.5"),
        (_with(gpu__nvml_index=True), "gpu.nvml_index: must be an integer, got true"),
        (_with(gpu__nvml_index=-1), "gpu.nvml_index: must be at least 0, got -1"),
        (_with(gpu__memory_mib="80GB"), 'gpu.memory_mib: must be an integer, got "80GB"'),
        (_with(repeats=0), "repeats: must be at least 1, got 0"),
        (_with(throttle_reasons=4.2), "throttle_reasons: must be an integer, got 4.2"),
        (_with(power_w=-1), "power_w: must be a non-negative number, got -1"),
        (_with(temperature_c="hot"), 'temperature_c: must be a number, got "hot"'),
        (_with(driver_version=550), "driver_version: must be a string, got 550"),
        (_with(source=""), "source: must be a non-empty string"),
    ],
)
def test_malformed_jsonl(line: str, reason: str) -> None:
    lines = ["# header comment\n", "\n", line + "\n"]
    with pytest.raises(InputError) as err:
        parse_jsonl(lines, source_file="bad.jsonl")
    assert err.value.source == "bad.jsonl" and err.value.line == 3
    assert str(err.value).startswith("bad.jsonl:3: ")
    assert reason in str(err.value)


def test_jsonl_duplicate_run_id() -> None:
    with pytest.raises(InputError, match=r"bad.jsonl:2: run_id: \"r1\" already used on line 1"):
        parse_jsonl([MIN, MIN], source_file="bad.jsonl")


def test_jsonl_nulls_and_unknown_keys_are_accepted() -> None:
    line = _with(duration_s=None, gpu__node=None, extra={"x": [1]}, source=None, gpu__future=3)
    (r,) = parse_jsonl([line], source_file="ok")
    assert r.duration_s is None and r.gpu.node is None and r.source == "pal-profiler"


def test_a_csv_imported_as_json_lines_gets_a_hint() -> None:
    from pal_slurm.errors import InputError
    from pal_slurm.ingest.jsonl import parse_jsonl

    with pytest.raises(InputError, match=r"^resnet-longhorn-agg\.csv:1: invalid JSON: .*; a CSV file\? the PAL "
                                         r"artifact's CSVs need --input-format pal-artifact"):
        parse_jsonl(["uuid,perf,cabinet", "GPU-1,1.0,c001"], source_file="resnet-longhorn-agg.csv")
    with pytest.raises(InputError) as err:
        parse_jsonl(["{not json"], source_file="runs.jsonl")
    assert "CSV" not in str(err.value)
