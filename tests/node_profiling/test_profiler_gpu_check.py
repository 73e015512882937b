"""bench/gpu/check.sh and check.py without a GPU: a clean 'no GPU' exit, the driver's whole path on a
simulated GPU, and its nvidia-smi fallback on a stand-in nvidia-smi that answers like the real one."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHECK_SH = REPO / "bench" / "gpu" / "check.sh"
CHECK_PY = REPO / "bench" / "gpu" / "check.py"

sys.path.insert(0, str(CHECK_PY.parent))
import check as gpu_check

# What `nvidia-smi --query-gpu=... --format=csv,noheader,nounits` prints on a 2-GPU H100 node
# (the layout nvidia-smi documents: comma + space separated, [N/A] for what a board lacks).
INVENTORY = ("0, GPU-5a1c0c3e-1b7e-2c4d-9e0f-0123456789ab, NVIDIA H100 80GB HBM3, 1652823012345, 00000000:18:00.0, "
             "81559, 700.00, 550.54.15, 96.00.99.00.01, 0, 0\n"
             "1, GPU-6b2d1d4f-2c8f-3d5e-af10-123456789abc, NVIDIA H100 80GB HBM3, [N/A], 00000000:2A:00.0, "
             "81559, 700.00, 550.54.15, 96.00.99.00.01, [N/A], [N/A]\n")

STAND_IN_SMI = textwrap.dedent(f'''\
    #!{sys.executable}
    import sys
    args = " ".join(sys.argv[1:])
    if "--query-gpu=index" in args:
        sys.stdout.write({INVENTORY!r})
    elif "--query-gpu=clocks_event_reasons.active" == sys.argv[1]:
        sys.stderr.write('Field "clocks_event_reasons.active" is not a valid field to query.\\n'); sys.exit(2)
    elif "--query-gpu=clocks.sm" in args:
        assert "clocks_throttle_reasons.active" in args, args
        print("1980, 2619, 612.34, 61, 0x0000000000000004, 100, 35")
    elif "--query-compute-apps" in args:
        print("GPU-6b2d1d4f-2c8f-3d5e-af10-123456789abc, 777, python3, 1024")
    else:
        sys.exit(9)
''')


def test_no_gpu_exits_2_with_a_clear_line(tmp_path: Path) -> None:
    env = {**os.environ, "PAL_CHECK_DEV_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    if shutil.which("nvidia-smi", path=env["PATH"]):
        pytest.skip("this machine has nvidia-smi")
    proc = subprocess.run([str(CHECK_SH)], capture_output=True, text=True, env=env, timeout=60, check=False)
    assert proc.returncode == 2
    assert proc.stdout.strip() == (f"check.sh: no NVIDIA GPU on this machine (no {tmp_path}/nvidia0, no nvidia-smi): "
                                   "nothing to check")


def test_check_sh_is_valid_bash() -> None:
    assert subprocess.run(["bash", "-n", str(CHECK_SH)], capture_output=True, check=False).returncode == 0
    if shutil.which("shellcheck"):
        proc = subprocess.run(["shellcheck", str(CHECK_SH)], capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stdout


def test_check_py_self_test_runs_the_whole_path(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    proc = subprocess.run([sys.executable, str(CHECK_PY), "--self-test", "--benchmarks", "gemm-fp32,stream",
                           "--time-budget", "0.3", "--warmup", "0.1", "--timeout", "60", "--output", str(out)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "== inventory (sim)" in proc.stdout and "== summary: 4 ok, 0 not ok, 4 records" in proc.stdout
    assert "reasons sw_power_cap" in proc.stdout
    assert out.read_text().count('"format": "pal-profile/1"') == 4


def test_smi_parsing() -> None:
    rows = gpu_check.parse_smi_csv(INVENTORY, len(gpu_check.INVENTORY_FIELDS))
    g0 = gpu_check.inventory_from_smi(rows[0], "n1")
    assert (g0.index, g0.serial, g0.memory_mib, g0.power_limit_w, g0.ecc_corrected) == (0, "1652823012345", 81559,
                                                                                      700.0, 0)
    g1 = gpu_check.inventory_from_smi(rows[1], "n1")
    assert g1.serial is None and g1.ecc_corrected is None and g1.pci_bus_id == "00000000:2A:00.0"
    s = gpu_check.sample_from_smi(["1410", "877", "[N/A]", "66", "0x0000000000000024", "99", "40"], 1.0)
    assert (s.sm_clock_mhz, s.power_w, s.throttle_reasons, s.utilization_gpu) == (1410.0, None, 0x24, 99)
    with pytest.raises(ValueError, match="expected 11"):
        gpu_check.parse_smi_csv("0, GPU-x\n", 11)


def test_check_py_through_nvidia_smi_when_nvml_is_missing(tmp_path: Path) -> None:
    if gpu_check.importlib.util.find_spec("cupy") or gpu_check.importlib.util.find_spec("torch"):
        pytest.skip("cupy/torch installed: the programs would try a GPU")
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(STAND_IN_SMI)
    smi.chmod(0o755)
    env = {**os.environ, "PATH": f"{smi.parent}:/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, str(CHECK_PY), "--benchmarks", "stream", "--time-budget", "0.5",
                           "--timeout", "30", "--output", str(tmp_path / "r.jsonl")],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    out = proc.stdout
    if "NVML sees no GPU" not in out and "NVML:" in out:
        assert "falling back to nvidia-smi" in out
    assert "== inventory (nvidia-smi)" in out and "GPU-6b2d1d4f" in out
    assert "GPU 0 now: SM 1980 MHz" in out and "reasons sw_power_cap (4)" in out
    assert "GPU 1 in use by: pid 777 python3" in out and "NOT RUN: GPU 1" in out
    assert "GPU 0 stream          skipped" in out and "no cupy/torch" in out
    assert proc.returncode == 3, out
