"""What reaches Slurm's configuration is checked where it enters: node names on import, in the
database and in an inventory, before `pal slurm gres-conf` writes a line; and what a user put in a
job name cannot forge a log line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.support.fleetgen import records, two_tier_fleet
from tests.support.pal_cli import run
from pal_slurm.cli.main import cli
from pal_slurm.ingest.jsonl import dump_jsonl


@pytest.mark.parametrize("node", ["gpu 01 Gres=evil", "gpu[01-16]"])
def test_import_refuses_node_names_slurm_would_misread(runner: CliRunner, sqlite_url: str, tmp_path: Path,
                                                       node: str) -> None:
    from dataclasses import replace

    recs = records(two_tier_fleet(), benchmark="resnet50")
    recs[3] = replace(recs[3], gpu=replace(recs[3].gpu, node=node))
    jsonl = tmp_path / "bad.jsonl"
    jsonl.write_text(dump_jsonl(recs))
    csv = tmp_path / "bad.csv"
    csv.write_text(f"uuid,perf,ts,cab-node\nGPU-1,10,1600000000,c001-001\nGPU-2,10,1600000000,{node}\n")
    run(runner, sqlite_url, "db", "upgrade")
    for args, where in (([str(jsonl)], f"{jsonl}:4: "),
                        (["--input-format", "pal-artifact", "--benchmark", "b", "--model", "V100", str(csv)],
                         f"{csv}:3: ")):
        result = run(runner, sqlite_url, "profile", "import", *args, code=1)
        assert result.stderr.startswith(f"pal: error: {where}") and repr(node) in result.stderr
        assert result.stderr.count("\n") == 1
    # nothing was stored: gres-conf finds no GPU
    assert "knows no GPUs" in run(runner, sqlite_url, "slurm", "gres-conf", code=1).stderr


def test_gres_conf_refuses_a_bad_name_already_in_the_database(runner: CliRunner, sqlite_url: str) -> None:
    """A database filled before imports checked names: gres-conf names the bad node and writes nothing."""
    from dataclasses import replace

    from pal_slurm.db.engine import make_engine, session_scope
    from pal_slurm.db.measurement_store import import_records

    run(runner, sqlite_url, "db", "upgrade")
    recs = [replace(r, gpu=replace(r.gpu, node="gpu 01 Gres=evil")) if r.gpu.node == "node-0" else r
            for r in records(two_tier_fleet(), benchmark="resnet50")]
    engine = make_engine(sqlite_url)
    try:
        with session_scope(engine) as session:
            import_records(session, recs)
    finally:
        engine.dispose()
    result = run(runner, sqlite_url, "slurm", "gres-conf", code=1)
    assert result.stdout == "" and result.stderr.count("\n") == 1
    assert result.stderr.startswith("pal: error: node name 'gpu 01 Gres=evil'") and "database" in result.stderr


@pytest.mark.parametrize("inventory, message", [
    ({"nodes": []}, "no GPUs: nothing to configure"),
    ({"nodes": [{"name": "g1", "model": "V100", "gpus": 1_000_000_000}]}, "at most 64"),
    ({"nodes": [{"name": "gpu[01-16]", "model": "V100", "gpus": 4}]}, "hostlist brackets"),
])
def test_gres_conf_refuses_an_inventory_with_nothing_or_too_much(runner: CliRunner, tmp_path: Path,
                                                                 inventory: dict, message: str) -> None:
    path = tmp_path / "inventory.json"
    path.write_text(json.dumps(inventory))
    out = tmp_path / "out"
    result = runner.invoke(cli, ["slurm", "gres-conf", "--inventory", str(path), "--output-dir", str(out)],
                           env={"PAL_CONFIG": ""})
    assert result.exit_code == 1 and result.stderr.startswith(f"pal: error: {path}") and message in result.stderr
    assert result.stderr.count("\n") == 1 and not out.exists()


def test_gpus_shows_each_nodes_gpus_in_slot_order(runner: CliRunner, sqlite_url: str, tmp_path: Path) -> None:
    """UUIDs that sort against the slots: the listing follows the slots Slurm schedules."""
    uuids = {f"GPU-{9 - i:02d}aa": 1.0 + 0.001 * i for i in range(8)}  # slot i gets the i-th UUID, descending
    node_of = {u: ("n10" if i >= 4 else "n2") for i, u in enumerate(uuids)}
    path = tmp_path / "slots.jsonl"
    path.write_text(dump_jsonl(records(uuids, node_of=node_of)))
    run(runner, sqlite_url, "db", "upgrade")
    run(runner, sqlite_url, "profile", "import", str(path))
    run(runner, sqlite_url, "classify", "--allow-partial")
    rows = json.loads(run(runner, sqlite_url, "gpus", "--json").stdout)
    assert [(r["node"], r["slot"]) for r in rows] == [("n2", s) for s in range(4)] + [("n10", s) for s in range(4)]
    table = run(runner, sqlite_url, "gpus").stdout.splitlines()
    header = next(line for line in table if line.lstrip().startswith("node"))
    assert header.split()[:3] == ["node", "slot", "GPU"]
    body = [line.split() for line in table if line.startswith(("n2", "n10"))]
    assert [(cells[0], cells[1]) for cells in body] == [("n2", str(s)) for s in range(4)] + [("n10", str(s)) for s in range(4)]


def test_profile_refuses_a_node_name_slurm_would_misread(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(cli, ["profile", "inventory", "--backend", "sim", "--no-db", "--node", "gpu 01 Gres=evil"],
                           env={"PAL_CONFIG": ""})
    assert result.exit_code == 2 and result.stderr.startswith("pal: error: ") and "--node" in result.stderr


def test_a_log_message_is_one_line_whatever_a_user_put_in_it() -> None:
    """A job name with a newline or an escape sequence must not forge a log line or reach the
    terminal: the CLI's log formatter escapes control characters; a traceback still follows."""
    import logging

    from pal_slurm.cli.main import OneLineFormatter

    fmt = OneLineFormatter("pal: %(levelname)s: %(message)s")
    rec = logging.LogRecord("x", logging.INFO, __file__, 1, "job %s (%s)", ("7", "train\npal: ERROR: forged\x1b[2J"),
                            None)
    line = fmt.format(rec)
    assert "\n" not in line and "\x1b" not in line
    assert line == "pal: INFO: job 7 (train\\npal: ERROR: forged\\x1b[2J)"
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        rec = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    assert fmt.format(rec).startswith("pal: ERROR: failed\nTraceback")
