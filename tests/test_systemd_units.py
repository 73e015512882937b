"""The unit files in systemd/: what the daemons and the fail-safe rely on is really set.

Every unit is parsed (systemd's syntax: sections, repeated keys, comments, continuation
lines); the placer's unit must be Type=notify with a watchdog that outlasts a cycle with a
hung Slurm command, restart on failure, release held jobs after every stop, and keep its
state file writable; the fail-safe timer must fire often enough. Every `pal ...` command a
unit runs must exist with the options it passes (`--help` through click). When
systemd-analyze is installed, `systemd-analyze verify` must accept every unit without a
warning (the `pal` path is pointed at an existing program for that).
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest
from click.testing import CliRunner

from pal_slurm.cli.main import cli
from pal_slurm.config import PlacerConfig

UNIT_DIR = Path(__file__).resolve().parents[1] / "systemd"
UNITS = sorted(p for p in UNIT_DIR.iterdir() if p.suffix in (".service", ".timer", ".socket", ".path"))
EXEC_KEYS = ("ExecStart", "ExecStartPre", "ExecStartPost", "ExecStop", "ExecStopPost", "ExecReload")

Unit = dict[str, dict[str, list[str]]]


def parse_unit(text: str) -> Unit:
    """systemd.syntax(7): [Section], Key=Value (a key may repeat), # and ; comments, trailing
    backslash continues a line. Values are kept as written (whitespace-stripped)."""
    out: Unit = defaultdict(lambda: defaultdict(list))
    section = None
    lines = iter(text.splitlines())
    for raw in lines:
        line = raw.strip()
        while line.endswith("\\"):
            line = line[:-1] + " " + next(lines, "").strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            out.setdefault(section, defaultdict(list))  # a section without keys exists too
            continue
        assert section is not None, f"key outside a section: {line!r}"
        key, sep, value = line.partition("=")
        assert sep, f"not Key=Value: {line!r}"
        out[section][key.strip()].append(value.strip())
    return out


def seconds(value: str) -> float:
    """A systemd time span (`60s`, `1min 30s`, `90`) in seconds."""
    units = {"": 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hr": 3600, "ms": 0.001}
    total = 0.0
    for num, unit in re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", value):
        total += float(num) * units[unit]
    return total


def load(name: str) -> Unit:
    return parse_unit((UNIT_DIR / name).read_text(encoding="utf-8"))


def one(unit: Unit, section: str, key: str) -> str:
    values = unit[section].get(key, [])
    assert len(values) == 1, f"[{section}] {key}: expected one value, got {values}"
    return values[0]


def test_units_exist_and_parse() -> None:
    names = {p.name for p in UNITS}
    assert {"pal-placer.service", "pal-placer-failsafe.service", "pal-placer-failsafe.timer"} <= names
    for path in UNITS:
        unit = parse_unit(path.read_text(encoding="utf-8"))
        assert "Unit" in unit and one(unit, "Unit", "Description"), path.name


def test_parser_handles_repeats_comments_and_continuations() -> None:
    unit = parse_unit("# c\n[Service]\nEnvironment=A=1\n; c\nEnvironment=B=2\nExecStart=/bin/x \\\n  --y\n")
    assert unit["Service"]["Environment"] == ["A=1", "B=2"]
    assert unit["Service"]["ExecStart"] == ["/bin/x  --y"]
    assert seconds("1min 30s") == 90 and seconds("60s") == 60 and seconds("5") == 5


def test_placer_service_is_a_watched_notify_daemon_that_releases_on_stop() -> None:
    unit = load("pal-placer.service")
    svc = unit["Service"]
    assert one(unit, "Service", "Type") == "notify" and one(unit, "Service", "NotifyAccess") == "main"
    assert one(unit, "Service", "Restart") == "on-failure"
    assert shlex.split(one(unit, "Service", "ExecStart"))[1:] == ["placer"]
    stop_post = shlex.split(one(unit, "Service", "ExecStopPost"))
    assert stop_post[1:] == ["placer", "release-stale", "--max-age", "0", "--grace"]
    # the watchdog outlasts a cycle in which Slurm commands hang until their timeout
    cfg = PlacerConfig()
    assert seconds(one(unit, "Service", "WatchdogSec")) >= 2 * cfg.command_timeout_s + cfg.interval_s
    # stopping releases every held job: give that time
    assert seconds(one(unit, "Service", "TimeoutStopSec")) >= 30
    assert "PAL_CONFIG=/etc/pal/pal.toml" in svc["Environment"]
    assert one(unit, "Install", "WantedBy") == "multi-user.target"


def _hardening_keeps_slurm_reachable(unit: Unit) -> None:
    svc = unit["Service"]
    assert one(unit, "Service", "ProtectSystem") == "strict"
    assert one(unit, "Service", "ProtectHome") == "read-only"
    assert one(unit, "Service", "PrivateTmp") == "yes" and one(unit, "Service", "NoNewPrivileges") == "yes"
    writable = " ".join(svc.get("ReadWritePaths", [])).split()
    assert "/var/lib/pal" in writable
    # the default filter state file (what job_submit.lua reads) lies under a writable path
    state = Path(PlacerConfig().state_file)
    assert any(state.is_relative_to(w) for w in writable), (state, writable)
    # scontrol needs slurmctld (TCP), munge (AF_UNIX socket in /run/munge) and /etc/slurm
    families = " ".join(svc.get("RestrictAddressFamilies", [])).split()
    assert {"AF_UNIX", "AF_INET", "AF_INET6"} <= set(families)
    assert svc.get("PrivateNetwork", ["no"]) == ["no"]
    _addresses_are_the_clusters(unit)
    hidden = " ".join(svc.get("InaccessiblePaths", []) + svc.get("TemporaryFileSystem", [])).split()
    for needed in ("/etc", "/etc/slurm", "/etc/pal", "/run", "/run/munge", "/var/run/munge", "/usr"):
        assert needed not in hidden, needed
    # SlurmUser, not root: Slurm lets only root, SlurmUser and AdminLevel=Administrator set a job's
    # AdminComment (Operator may not), and SlurmUser is the least of them that needs no slurmdbd
    assert one(unit, "Service", "User") == "slurm" and one(unit, "Service", "Group") == "slurm"
    assert "pal" in " ".join(svc.get("SupplementaryGroups", [])).split(), "reads /etc/pal (0640 root:pal)"


def _addresses_are_the_clusters(unit: Unit) -> None:
    """Every address is refused but loopback and the private ranges a cluster network uses."""
    svc = unit["Service"]
    assert one(unit, "Service", "IPAddressDeny") == "any"
    allowed = set(" ".join(svc.get("IPAddressAllow", [])).split())
    assert {"localhost", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"} <= allowed, allowed
    assert not allowed & {"any", "0.0.0.0/0", "::/0"}, allowed


@pytest.mark.parametrize("name", ["pal-placer.service", "pal-placer-failsafe.service"])
def test_hardening_keeps_slurm_and_munge_reachable(name: str) -> None:
    _hardening_keeps_slurm_reachable(load(name))


def test_the_placer_state_directory_is_slurmusers_alone() -> None:
    """slurmctld opens the wake-up file in the state directory with Lua's io.open (which follows
    links, and blocks on a FIFO), so only SlurmUser, whom the placer runs as, may write the
    directory. systemd gives the directory the unit's user and group at every start: the daemon
    and the fail-safe must agree."""
    units = [load("pal-placer.service"), load("pal-placer-failsafe.service")]
    state = Path(PlacerConfig().state_file)
    for unit in units:
        assert Path("/var/lib") / one(unit, "Service", "StateDirectory") == state.parent
        mode = int(one(unit, "Service", "StateDirectoryMode"), 8)
        assert mode & 0o022 == 0, "nobody but the owner may write it"
        assert mode & 0o050 == 0o050, "the group reads and enters it"
        assert one(unit, "Service", "Group") == "slurm"
    for key in ("User", "Group", "StateDirectory", "StateDirectoryMode"):
        assert one(units[0], "Service", key) == one(units[1], "Service", key), key


def test_failsafe_service_and_timer() -> None:
    svc = load("pal-placer-failsafe.service")
    assert one(svc, "Service", "Type") == "oneshot"
    assert shlex.split(one(svc, "Service", "ExecStart"))[1:] == ["placer", "release-stale"]
    timer = load("pal-placer-failsafe.timer")
    assert one(timer, "Timer", "Unit") == "pal-placer-failsafe.service"
    assert seconds(one(timer, "Timer", "OnUnitActiveSec")) == 30
    assert seconds(one(timer, "Timer", "AccuracySec")) == 5
    assert seconds(one(timer, "Timer", "OnBootSec")) > 0
    assert one(timer, "Install", "WantedBy") == "timers.target"
    # a dead daemon's jobs are released within about a minute of its last heartbeat
    worst = PlacerConfig().stale_after_s + seconds(one(timer, "Timer", "OnUnitActiveSec")) + 5
    assert worst <= 90


def _pal_commands() -> list[tuple[str, str, list[str]]]:
    out = []
    for path in UNITS:
        unit = parse_unit(path.read_text(encoding="utf-8"))
        for key in EXEC_KEYS:
            for value in unit.get("Service", {}).get(key, []):
                argv = shlex.split(value.lstrip("-@:+!"))
                if Path(argv[0]).name == "pal":
                    out.append((path.name, key, argv))
    return out


@pytest.mark.parametrize("unit,key,argv", _pal_commands(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_pal_command_exists_with_its_options(unit: str, key: str, argv: list[str]) -> None:
    assert argv[0].startswith("/"), f"{unit} {key}: systemd needs an absolute path, got {argv[0]}"
    # click parses every option before the eager --help: an unknown option or subcommand fails
    result = CliRunner().invoke(cli, [*argv[1:], "--help"])
    assert result.exit_code == 0, f"{unit} {key}: `pal {' '.join(argv[1:])}`: {result.output}"
    assert "Usage:" in result.output


def test_the_unit_commands_are_found() -> None:
    found = {(u, k) for u, k, _ in _pal_commands()}
    assert {("pal-placer.service", "ExecStart"), ("pal-placer.service", "ExecStopPost"),
            ("pal-placer-failsafe.service", "ExecStart")} <= found


def test_systemd_analyze_verify_accepts_every_unit(tmp_path: Path) -> None:
    from conftest import require_tool

    require_tool("systemd-analyze", "systemd")
    pal = tmp_path / "bin" / "pal"
    pal.parent.mkdir()
    pal.write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")
    pal.chmod(0o755)
    for path in UNITS:
        text = re.sub(r"(?<=[=\s@\-+!:])/\S*/pal(?=\s|$)", str(pal), path.read_text(encoding="utf-8"))
        (tmp_path / path.name).write_text(text, encoding="utf-8")
    names = [p.name for p in UNITS]
    proc = subprocess.run(["systemd-analyze", "verify", *names], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, check=False)
    noise = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    assert proc.returncode == 0 and not noise, "\n".join(noise)


def test_admin_guide_shows_every_placer_key_with_its_default() -> None:
    """The `[placer]` example in docs/admin-guide.md is the defaults table admins read: keep it true."""
    import tomllib

    guide = (UNIT_DIR.parent / "docs" / "admin-guide.md").read_text(encoding="utf-8")
    block = re.search(r"```toml\n(\[placer\]\n.*?)```", guide, flags=re.DOTALL)
    assert block, "docs/admin-guide.md has no ```toml [placer] example"
    shown = tomllib.loads(block.group(1).replace("# rest_url", "rest_url").replace("# max_wait_s", "max_wait_s"))["placer"]
    defaults = PlacerConfig().model_dump()
    assert set(shown) == set(defaults), set(shown) ^ set(defaults)
    for key, value in defaults.items():
        if value is not None:
            assert shown[key] == value, (key, shown[key], value)


SERVICES = [p.name for p in UNITS if p.suffix == ".service"]


@pytest.mark.parametrize("name", SERVICES)
def test_every_service_drops_privileges_it_does_not_need(name: str) -> None:
    """What docs/admin-guide.md and docs/agent.md claim of every unit: no new privileges, no
    capabilities (bounding and ambient sets empty), a read-only system with a private /tmp,
    and only the system calls of an ordinary service."""
    unit = load(name)
    assert one(unit, "Service", "NoNewPrivileges") == "yes"
    assert one(unit, "Service", "CapabilityBoundingSet") == ""
    assert unit["Service"].get("AmbientCapabilities", [""]) == [""]
    assert one(unit, "Service", "ProtectSystem") == "strict"
    assert one(unit, "Service", "PrivateTmp") == "yes"
    assert one(unit, "Service", "ProtectHome") in ("yes", "read-only")
    assert one(unit, "Service", "SystemCallFilter") == "@system-service"
    for key in ("ProtectKernelTunables", "ProtectKernelModules", "ProtectControlGroups"):
        assert one(unit, "Service", key) == "yes", key


def test_the_agent_unit_is_hardened_as_docs_agent_md_says() -> None:
    """Writable: /run/pal and /var/lib/pal only; memory bounded; the GPUs visible (no
    PrivateDevices, which would hide /dev/nvidia*); /run/pal/jobs kept when it stops."""
    unit = load("pal-agent.service")
    writable = set(" ".join(unit["Service"].get("ReadWritePaths", [])).split())
    assert writable <= {"/run/pal", "/var/lib/pal"} and "/var/lib/pal" in writable
    assert one(unit, "Service", "RuntimeDirectory") == "pal"
    assert one(unit, "Service", "RuntimeDirectoryPreserve") == "yes"
    assert one(unit, "Service", "MemoryMax") == "512M"
    assert unit["Service"].get("PrivateDevices", ["no"]) == ["no"]
    assert one(unit, "Service", "Type") == "notify" and seconds(one(unit, "Service", "WatchdogSec")) == 30


@pytest.mark.parametrize("name", SERVICES)
def test_every_service_keeps_its_files_and_its_network_to_itself(name: str) -> None:
    """Files a service makes are not readable by every user (UMask 0027); its addresses are the
    cluster's; its tasks are bounded; the placer's units hide other users' processes (the agent
    reads their cgroups: it may not)."""
    unit = load(name)
    assert int(one(unit, "Service", "UMask"), 8) & 0o027 == 0o027
    _addresses_are_the_clusters(unit)
    assert 0 < int(one(unit, "Service", "TasksMax")) <= 128
    if name.startswith("pal-placer"):
        assert one(unit, "Service", "ProtectProc") == "invisible"


def test_the_agent_sees_the_nvidia_devices_and_no_other() -> None:
    unit = load("pal-agent.service")
    assert one(unit, "Service", "DevicePolicy") == "closed"
    assert unit["Service"]["DeviceAllow"] == ["char-nvidia* rw"]


#: the most `systemd-analyze security` may score a unit (0 safest, 10 most exposed; "OK" is
#: below 5.3); measured: the placer, the fail-safe and pal-gpus-learn 1.7, the agent 2.3 (systemd 252)
EXPOSURE_MAX = {"pal-placer.service": 2.0, "pal-placer-failsafe.service": 2.0, "pal-agent.service": 2.5,
                "pal-gpus-learn.service": 2.0}


@pytest.mark.parametrize("name", SERVICES)
def test_systemd_analyze_security_scores_each_unit_low(name: str, tmp_path: Path) -> None:
    """systemd's own exposure score of each unit file (offline: the file as shipped, not an
    installed unit)."""
    from conftest import require_tool

    require_tool("systemd-analyze", "systemd")
    unit = tmp_path / name
    unit.write_text((UNIT_DIR / name).read_text(encoding="utf-8").replace("/usr/local/bin/pal", shutil.which("true")
                                                                           or "/bin/true"), encoding="utf-8")
    proc = subprocess.run(["systemd-analyze", "security", "--offline=yes", "--no-pager", str(unit)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
    m = re.search(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)", proc.stdout)
    assert m, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    assert float(m.group(1)) <= EXPOSURE_MAX[name], proc.stdout[-3000:]
