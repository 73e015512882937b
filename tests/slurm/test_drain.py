"""`pal gpus drain --apply` on the real test cluster: drains the severe outlier's node, with pal's reason,
reports a node Slurm does not list in one line with exit code 1, leaves a node an admin drained with
its own reason, and leaves nothing drained (RESUME in finally)."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from click.testing import CliRunner

from tests.support.fleetgen import records
from pal_slurm.cli.main import cli
from pal_slurm.ingest.jsonl import dump_jsonl

from .conftest import SlurmCluster, _unavailable, parse_kv


def _node(cluster: SlurmCluster, name: str) -> dict[str, str]:
    line = cluster.scontrol("show", "node", "-o", name).stdout.strip().splitlines()[0]
    return parse_kv(line)


def test_drain_apply_drains_the_severe_outliers_node_only(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    target, other = slurm_cluster.nodes[-1], slurm_cluster.nodes[-2]
    for node in (target, other):
        if "DRAIN" in _node(slurm_cluster, node).get("State", ""):
            _unavailable(f"{node} is already drained by someone else; not touching it")
    uuids = [f"GPU-{i:08x}-45a8-c391-10c1-92eb28fd3ac5" for i in range(12)]
    node_of = {u: slurm_cluster.nodes[i % 2] for i, u in enumerate(uuids)}  # healthy GPUs on the first nodes
    factors = {u: 1.0 + 0.002 * (i % 3) for i, u in enumerate(uuids)}
    severe = {"aaaa": (1.6, target),              # severe, on the target node
              "bbbb": (1.7, "pal-no-such-node"),  # severe, on a node Slurm does not know
              "cccc": (1.6, "unknown"),           # severe, but on an unknown node: never drained
              "dddd": (1.6, other)}               # severe, on a node an admin drained already
    for short, (factor, node) in severe.items():
        uuid = f"GPU-0000{short}-45a8-c391-10c1-92eb28fd3ac5"
        factors[uuid], node_of[uuid] = factor, node
    now = datetime.now(UTC)
    recs = [replace(r, started_at=now)  # fresh: not stale; class A's benchmark, which the drain rule counts as compute
            for r in records(factors, node_of=node_of, benchmark="train-resnet50")]
    (tmp_path / "f.jsonl").write_text(dump_jsonl(recs))
    url = f"sqlite:///{tmp_path / 'pal.db'}"
    runner = CliRunner()
    for args in (["db", "upgrade"], ["profile", "import", str(tmp_path / "f.jsonl")], ["classify", "--allow-partial"]):
        assert runner.invoke(cli, ["--db", url, *args], env={"PAL_CONFIG": ""}).exit_code == 0
    slurm_cluster.scontrol("update", f"NodeName={other}", "State=DRAIN", "Reason=maintenance ticket 42")
    try:
        res = runner.invoke(cli, ["--db", url, "gpus", "drain", "--apply"], env={"PAL_CONFIG": ""})
        state = _node(slurm_cluster, target)
        assert "DRAIN" in state["State"], state
        assert re.match(r"pal: GPU 0000aaaa: PerfVar 1\.\d{3} on train-resnet50 \(>= 1\.3\)", state["Reason"]), state
        assert res.exit_code == 1 and "Traceback" not in res.output
        assert f"drained {target}: pal: GPU 0000aaaa" in res.stdout
        # someone else's drain keeps its reason (pal's RESUME advice must never reach it)
        assert _node(slurm_cluster, other)["Reason"].startswith("maintenance ticket 42"), _node(slurm_cluster, other)
        kept = [ln for ln in res.stdout.splitlines() if ln.startswith(f"{other}: already ")]
        assert len(kept) == 1 and "DRAIN" in kept[0], res.stdout
        # a name Slurm does not list is never handed to scontrol (NodeName= also takes ALL and NodeSets)
        err = [ln for ln in res.stderr.splitlines() if "pal-no-such-node" in ln]
        assert err == ["pal: error: pal-no-such-node: not a node Slurm knows; not drained"], res.stderr
        assert "1 of 3 node(s) not drained" in res.stderr and "unknown" not in res.stdout
    finally:
        resumed = slurm_cluster.resume_pal_drained()  # every node pal drained, not only the expected one
        slurm_cluster.scontrol("update", f"NodeName={other}", "State=RESUME", check=False)
    assert resumed == [target]
    assert "DRAIN" not in _node(slurm_cluster, target)["State"]
    assert "DRAIN" not in _node(slurm_cluster, other)["State"]
