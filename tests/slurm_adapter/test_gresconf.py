"""`pal slurm gres-conf`: generation and diff on hand-built inventories, the `scontrol show node -o`
parser on captured Slurm 22.05 output, and the CLI (file and database inventories)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

from pal_slurm.cli.main import cli
from pal_slurm.errors import InputError
from pal_slurm.slurm import gresconf
from pal_slurm.slurm.gresconf import (
    GpuRow,
    Inventory,
    InventoryGpu,
    InventoryNode,
    inventory_from_dict,
    inventory_from_rows,
    model_token,
)
from pal_slurm.slurm.gres_compare import SlurmNodeGres, compare
from pal_slurm.slurm.nodeinfo import (
    parse_gres_item,
    parse_kv_line,
    parse_show_node,
    split_gres,
)

# Captured from the test cluster (Slurm 22.05.8): note the double spaces and the OS value with spaces.
SHOW_NODE = (
    "NodeName=pal-n1 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=8 CPUTot=8 CPULoad=0.78 "
    "AvailableFeatures=v100 ActiveFeatures=v100 Gres=gpu:v100_g0:1,gpu:v100_g1:1,gpu:v100_g2:1,gpu:v100_g3:1 "
    "NodeAddr=127.0.0.1 NodeHostName=pal-n1 Port=17001 Version=22.05.8 OS=Linux 6.18.44-fc-v657 #1 SMP "
    "PREEMPT_DYNAMIC @0  RealMemory=16000 AllocMem=0 FreeMem=23201 Sockets=8 Boards=1 State=IDLE "
    "ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=gpu  BootTime=2026-11-30T07:18:06 "
    "SlurmdStartTime=2026-11-30T09:41:50 CfgTRES=cpu=8,mem=16000M,billing=8 AllocTRES= CapWatts=n/a\n"
    "NodeName=cpu1 Arch=x86_64 AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) State=DOWN+DRAIN "
    "Reason=bad disk [root@2026-11-30T09:00:00]\n"
    "NodeName=mix1 AvailableFeatures=a100,ib Gres=gpu:a100_g0:1(S:0-1),gpu:a100_g1:1(S:0,1),nic:2 State=MIXED\n"
)


def v100_node(name: str, n: int = 4, **attrs: str) -> InventoryNode:
    return InventoryNode(name, tuple(InventoryGpu(i, "Tesla V100-SXM2-16GB") for i in range(n)), tuple(attrs.items()))


@pytest.mark.parametrize(("name", "token"), [
    ("Tesla V100-SXM2-16GB", "v100"), ("Tesla V100-PCIE-32GB", "v100"), ("Tesla V100S-PCIE-32GB", "v100s"),
    ("NVIDIA A100-SXM4-80GB", "a100"), ("NVIDIA A100 80GB PCIe", "a100"), ("NVIDIA H100 80GB HBM3", "h100"),
    ("NVIDIA GH200 480GB", "gh200"), ("NVIDIA A10G", "a10"), ("NVIDIA L40S", "l40s"), ("NVIDIA L4", "l4"),
    ("Tesla T4", "t4"), ("NVIDIA GeForce RTX 3090", "rtx3090"), ("NVIDIA GeForce RTX 4090 Ti", "rtx4090ti"),
    ("Quadro RTX 6000", "rtx6000"), ("NVIDIA RTX A6000", "rtxa6000"), ("NVIDIA RTX 6000 Ada Generation", "rtx6000ada"),
    ("v100", "v100"), ("AMD Instinct MI250X", "mi250x"), ("Some New GPU-9 (beta)", "somenewgpu9beta"),
    ("9000 Turbo", "gpu9000turbo"),
])
def test_model_token(name: str, token: str) -> None:
    assert model_token(name) == token
    assert gresconf.is_slot_type(gresconf.slot_type(name, 7))
    assert not gresconf.is_slot_type(token)


def test_model_token_rejects_names_without_letters_or_digits() -> None:
    with pytest.raises(InputError, match="no usable Slurm type name"):
        model_token("NVIDIA ---")


def test_generation_one_type_per_slot() -> None:
    inv = gresconf.validate(Inventory((
        v100_node("n10", 2),
        InventoryNode("n2", (InventoryGpu(3, "NVIDIA A100-SXM4-80GB"), InventoryGpu(1, "Tesla V100"))),
    )))
    assert [n.name for n in inv.nodes] == ["n2", "n10"]  # natural order
    assert gresconf.gres_conf_lines(inv, dev_dir="/fake/%n") == [
        "AutoDetect=off",
        "NodeName=n2 Name=gpu Type=v100_g1 File=/fake/n2/nvidia1",
        "NodeName=n2 Name=gpu Type=a100_g3 File=/fake/n2/nvidia3",
        "NodeName=n10 Name=gpu Type=v100_g0 File=/fake/n10/nvidia0",
        "NodeName=n10 Name=gpu Type=v100_g1 File=/fake/n10/nvidia1",
    ]
    assert gresconf.node_conf_lines(inv) == [
        "NodeName=n2 Gres=gpu:v100_g1:1,gpu:a100_g3:1 Features=v100,a100",
        "NodeName=n10 Gres=gpu:v100_g0:1,gpu:v100_g1:1 Features=v100",
    ]


def test_types_never_depend_on_anything_but_model_and_minor() -> None:
    """Same GPUs, listed in another order or with other attributes: identical types."""
    a = gresconf.validate(Inventory((v100_node("n1", 4),)))
    shuffled = InventoryNode("n1", tuple(reversed(a.nodes[0].gpus)), (("CPUs", "64"),))
    b = gresconf.validate(Inventory((shuffled,)))
    assert gresconf.gres_conf_lines(a) == gresconf.gres_conf_lines(b)
    assert gresconf.node_gres(a.nodes[0]) == gresconf.node_gres(b.nodes[0])


def test_inventory_file_format() -> None:
    inv = inventory_from_dict({"nodes": [
        {"name": "gpu01", "model": "Tesla V100-SXM2-16GB", "gpus": 2, "slurm": {"CPUs": 64, "Port": 17001}},
        {"name": "gpu02", "gpus": [{"minor": 5, "model": "NVIDIA H100 80GB HBM3"}]},
    ]})
    assert gresconf.node_conf_lines(inv) == [
        "NodeName=gpu01 CPUs=64 Port=17001 Gres=gpu:v100_g0:1,gpu:v100_g1:1 Features=v100",
        "NodeName=gpu02 Gres=gpu:h100_g5:1 Features=h100",
    ]
    with_cpu_node = inventory_from_dict({"nodes": [{"name": "cpu1", "gpus": []}, {"name": "g1", "model": "v100", "gpus": 1}]})
    assert gresconf.node_conf_lines(with_cpu_node) == ["NodeName=cpu1", "NodeName=g1 Gres=gpu:v100_g0:1 Features=v100"]


@pytest.mark.parametrize(("data", "message"), [
    ([], "expected a JSON object with a 'nodes' list"),
    ({"nodes": [{"gpus": 1, "model": "x"}]}, "nodes[0].name"),
    ({"nodes": [{"name": "a b", "gpus": 1, "model": "x"}]}, "nodes[0].name"),
    ({"nodes": [{"name": "n1", "gpus": 2}]}, "needs a node-level 'model'"),
    ({"nodes": [{"name": "n1", "gpus": [{"minor": -1, "model": "v100"}]}]}, "nodes[0].gpus[0].minor"),
    ({"nodes": [{"name": "n1", "gpus": [{"minor": 0}]}]}, "nodes[0].gpus[0].model"),
    ({"nodes": [{"name": "n1", "gpus": [{"minor": 0, "model": "v100"}, {"minor": 0, "model": "v100"}]}]},
     "minor number 0 is listed twice"),
    ({"nodes": [{"name": "n1", "gpus": 1, "model": "v100"}, {"name": "n1", "gpus": 1, "model": "v100"}]},
     "node n1 is listed twice"),
    ({"nodes": [{"name": "n1", "gpus": 1, "model": "v100", "slurm": {"Gres": "x"}}]}, "'Gres' is not allowed"),
    ({"nodes": [{"name": "n1", "gpus": 1, "model": "v100", "slurm": {"Feature": "a b"}}]}, "must be one word"),
    ({"nodes": [{"name": "n1", "gpus": 1, "model": "v100", "slurm": {"CPUs": "8\nNodeName=evil"}}]},
     "must be one word"),
    # what reaches Slurm's configuration: one node name, a bounded size, something to configure
    ({"nodes": [{"name": "gpu 01 Gres=evil", "gpus": 1, "model": "v100"}]}, "nodes[0].name: node name 'gpu 01"),
    ({"nodes": [{"name": "gpu[01-16]", "gpus": 1, "model": "v100"}]}, "hostlist brackets"),
    ({"nodes": [{"name": "n" * 65, "gpus": 1, "model": "v100"}]}, "longer than 64"),
    ({"nodes": [{"name": "n1", "gpus": 1, "model": "V100\nNodeName=evil"}]}, "nodes[0].model: GPU model name"),
    ({"nodes": [{"name": "n1", "gpus": 1, "model": "!!!"}]}, "no usable Slurm type name"),
    ({"nodes": [{"name": "n1", "gpus": 1_000_000_000, "model": "v100"}]}, "at most 64"),
    ({"nodes": [{"name": "n1", "gpus": [{"minor": i, "model": "v100"} for i in range(65)]}]}, "at most 64"),
    ({"nodes": []}, "no GPUs: nothing to configure"),
    ({"nodes": [{"name": "cpu1", "gpus": 0, "model": "v100"}]}, "no GPUs: nothing to configure"),
])
def test_inventory_errors_name_the_problem(data: object, message: str) -> None:
    with pytest.raises(InputError) as exc:
        inventory_from_dict(data, source="inv.json")
    assert message in str(exc.value) and str(exc.value).startswith("inv.json: ")


def test_inventory_from_database_rows() -> None:
    inv = inventory_from_rows([GpuRow("n1", 1, "Tesla V100", "GPU-b"), GpuRow("n1", 0, "Tesla V100", "GPU-a")])
    assert [g.minor for g in inv.nodes[0].gpus] == [0, 1]
    with pytest.raises(InputError, match="without a minor number.*n1/GPU-c"):
        inventory_from_rows([GpuRow("n1", None, "Tesla V100", "GPU-c")])


# ---------------------------------------------------------------- parser

def test_parse_kv_line_keeps_values_with_spaces() -> None:
    fields = parse_kv_line(SHOW_NODE.splitlines()[0])
    assert fields["OS"] == "Linux 6.18.44-fc-v657 #1 SMP PREEMPT_DYNAMIC @0"
    assert fields["CoresPerSocket"] == "1" and fields["CPUAlloc"] == "0"
    assert fields["CfgTRES"] == "cpu=8,mem=16000M,billing=8" and fields["AllocTRES"] == ""
    assert parse_kv_line(SHOW_NODE.splitlines()[1])["Reason"] == "bad disk [root@2026-11-30T09:00:00]"
    job = parse_kv_line("JobId=73 AdminComment=pal:held class=auto src=default StdIn=/dev/null MCS_label=N/A")
    assert job == {"JobId": "73", "AdminComment": "pal:held class=auto src=default", "StdIn": "/dev/null",
                   "MCS_label": "N/A"}


def test_parse_gres() -> None:
    assert split_gres("gpu:a:1(S:0,1),gpu:b:2,nic") == ["gpu:a:1(S:0,1)", "gpu:b:2", "nic"]
    assert parse_gres_item("gpu:v100_g0:1(S:0)") == ("gpu", "v100_g0", 1)
    assert parse_gres_item("gres/gpu:h100_g2:1") == ("gpu", "h100_g2", 1)
    assert parse_gres_item("gres:gpu:3") == ("gpu", None, 3)
    assert parse_gres_item("gpu") == ("gpu", None, 1)
    assert parse_gres_item("bandwidth:lustre:4G") == ("bandwidth", "lustre", 4 * 1024**3)
    assert parse_gres_item("(null)") is None


def test_parse_show_node() -> None:
    nodes = {n.name: n for n in parse_show_node(SHOW_NODE + "\n")}
    assert nodes["pal-n1"].gpu_types == {f"v100_g{i}": 1 for i in range(4)}
    assert nodes["pal-n1"].features == {"v100"}
    assert nodes["cpu1"].gpu_types == {} and nodes["cpu1"].features == frozenset()
    assert nodes["mix1"].gpu_types == {"a100_g0": 1, "a100_g1": 1} and nodes["mix1"].features == {"a100", "ib"}
    assert parse_show_node("No nodes in the system\n") == []


# ---------------------------------------------------------------- diff

def test_compare_same_is_empty_and_site_extras_are_fine() -> None:
    inv = gresconf.validate(Inventory((v100_node("n1", 2), InventoryNode("cpu1", ()))))
    slurm = [SlurmNodeGres("n1", {"v100_g0": 1, "v100_g1": 1}, frozenset({"v100", "ib"})),
             SlurmNodeGres("cpu1"), SlurmNodeGres("login1")]
    assert compare(inv, slurm) == []


def test_compare_lists_every_kind_of_difference() -> None:
    inv = gresconf.validate(Inventory((v100_node("n1", 2), v100_node("n2", 1), v100_node("n3", 2))))
    slurm = [SlurmNodeGres("n1", {"v100_g0": 1, "v100_g1": 2, "v100_g7": 1}, frozenset()),
             SlurmNodeGres("n2", {None: 1}, frozenset({"v100"})),
             SlurmNodeGres("n9", {"a100_g0": 1, "a100_g1": 1})]
    got = {(d.node, d.kind, d.detail) for d in compare(inv, slurm)}
    assert got == {
        ("n1", "wrong-count", "gpu:v100_g1 has count 2, expected 1"),
        ("n1", "extra-type", "gpu:v100_g7:1 is not in the inventory"),
        ("n1", "missing-feature", "feature v100 not set"),
        ("n2", "missing-type", "gpu:v100_g0 not configured"),
        ("n2", "extra-type", "untyped gpu:1 is not in the inventory"),
        ("n3", "missing-node", "not in Slurm"),
        ("n9", "unknown-node", "has 2 GPU(s) in Slurm but is not in the inventory"),
    }


# ---------------------------------------------------------------- CLI

INVENTORY = {"nodes": [{"name": "gpu01", "model": "Tesla V100-SXM2-16GB", "gpus": 2, "slurm": {"CPUs": 8}}]}


@pytest.fixture
def inv_file(tmp_path: Path) -> Path:
    path = tmp_path / "inv.json"
    path.write_text(json.dumps(INVENTORY))
    return path


def test_cli_prints_both_files(runner: CliRunner, inv_file: Path) -> None:
    result = runner.invoke(cli, ["slurm", "gres-conf", "--inventory", str(inv_file), "--dev-dir", "/x/%n"])
    assert result.exit_code == 0, result.output
    assert "NodeName=gpu01 Name=gpu Type=v100_g1 File=/x/gpu01/nvidia1" in result.output
    assert "NodeName=gpu01 CPUs=8 Gres=gpu:v100_g0:1,gpu:v100_g1:1 Features=v100" in result.output
    assert "AutoDetect=off" in result.output


def test_cli_output_dir_and_json(runner: CliRunner, inv_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "etc"
    result = runner.invoke(cli, ["slurm", "gres-conf", "--inventory", str(inv_file), "--output-dir", str(out),
                                 "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert (out / "gres.conf").read_text() == data["gres_conf"]
    assert (out / "nodes.conf").read_text() == data["nodes_conf"]
    assert data["nodes"][0]["gpus"][1] == {"minor": 1, "model": "Tesla V100-SXM2-16GB", "type": "v100_g1",
                                           "file": "/dev/nvidia1"}
    assert sorted(p.name for p in out.iterdir()) == ["gres.conf", "nodes.conf"]


def test_cli_bad_inventory_is_one_line(runner: CliRunner, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"nodes": [{"name": "n1", "gpus": 2}]}')
    result = runner.invoke(cli, ["slurm", "gres-conf", "--inventory", str(bad)])
    assert result.exit_code == 1
    assert result.output.strip() == f"pal: error: {bad}: nodes[0]: 'gpus' as a count needs a node-level 'model'"
    bad.write_text("{nodes")
    result = runner.invoke(cli, ["slurm", "gres-conf", "--inventory", str(bad)])
    assert result.exit_code == 1 and "not valid JSON" in result.output and "Traceback" not in result.output


def test_cli_check_without_slurm_is_one_line(runner: CliRunner, inv_file: Path, monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no scontrol on PATH
    result = runner.invoke(cli, ["slurm", "gres-conf", "--inventory", str(inv_file), "--check"])
    assert result.exit_code == 1
    assert "scontrol: command not found" in result.output and "Traceback" not in result.output


def test_cli_reads_the_database(runner: CliRunner, db_url: str) -> None:
    from pal_slurm.db.migrate import upgrade
    from pal_slurm.db.models import Gpu, Node

    engine = create_engine(db_url)
    upgrade(engine)
    with Session(engine) as s:
        n1, n2 = Node(name="n1"), Node(name="n2")
        s.add_all([n1, n2,
                   Gpu(uuid="GPU-1", node=n1, minor_number=1, model="NVIDIA A100-SXM4-80GB"),
                   Gpu(uuid="GPU-0", node=n1, minor_number=0, model="NVIDIA A100-SXM4-80GB"),
                   Gpu(uuid="GPU-x", node=n2, minor_number=0, model="NVIDIA A100-SXM4-80GB", state="missing")])
        s.commit()
    engine.dispose()
    result = runner.invoke(cli, ["--db", db_url, "slurm", "gres-conf"])
    assert result.exit_code == 0, result.output
    assert "NodeName=n1 Gres=gpu:a100_g0:1,gpu:a100_g1:1 Features=a100" in result.output
    assert "n2" not in result.output  # its only GPU is missing


def test_cli_empty_database_says_what_to_do(runner: CliRunner, sqlite_url: str) -> None:
    from pal_slurm.db.migrate import upgrade

    engine = create_engine(sqlite_url)
    upgrade(engine)
    engine.dispose()
    result = runner.invoke(cli, ["--db", sqlite_url, "slurm", "gres-conf"])
    assert result.exit_code == 1
    assert "knows no GPUs" in result.output and "--inventory" in result.output


def test_cli_writes_the_initial_filter_state(runner: CliRunner, inv_file: Path, tmp_path: Path) -> None:
    """Bare model requests (`--gres=gpu:v100:1`) need the models in the filter state before the
    placer's first cycle: gres-conf writes them, with heartbeat 0 (nothing held yet)."""
    state = tmp_path / "pal" / "filter-state"
    result = runner.invoke(cli, ["slurm", "gres-conf", "--inventory", str(inv_file), "--filter-state", str(state)])
    assert result.exit_code == 0, result.output
    text = state.read_text()
    assert "\nmodel v100\n" in text and "\nheartbeat 0\n" in text
    # a live placer's state is not clobbered
    state.write_text(text.replace("\nheartbeat 0\n", f"\nheartbeat {int(__import__('time').time())}\n"))
    result = runner.invoke(cli, ["slurm", "gres-conf", "--inventory", str(inv_file), "--filter-state", str(state)])
    assert result.exit_code == 0 and "left as it is" in result.output
    assert "\nheartbeat 0\n" not in state.read_text()
