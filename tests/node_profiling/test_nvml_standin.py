"""The NVML stand-in (tests/support/nvml_standin.py) keeps to the real library: it offers every
pynvml name the backend uses, the backend's own copies of NVML's numbers are NVML's, and where
nvidia-ml-py is installed its constants, error texts and argument counts are pynvml's."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

from tests.support import nvml_api as nv
from tests.support.nvml_standin import FUNCTIONS, NvmlStandIn, Recording
from pal_slurm.gpu import nvml as nvml_backend

try:
    import pynvml  # type: ignore[import-not-found]
except ImportError:
    pynvml = None


def _names_the_backend_uses() -> set[str]:
    """Every pynvml name gpu/nvml.py reaches: attributes (nv.nvmlX) and hasattr strings."""
    tree = ast.parse(Path(nvml_backend.__file__).read_text())
    names = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
             and (n.attr.startswith("nvml") or n.attr.startswith("NVML"))}
    names |= {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
              and re.fullmatch(r"nvml[A-Z]\w+|NVML\w+", n.value)}
    return names


def test_the_standin_offers_everything_the_backend_uses() -> None:
    used = _names_the_backend_uses()
    assert {"nvmlInit", "nvmlDeviceGetTotalEccErrors", "NVMLError"} <= used
    assert used <= set(vars(NvmlStandIn(Recording.load("h100-node")).module()))


def test_the_backends_nvml_codes_are_nvmls() -> None:
    """gpu/nvml.py spells NVML's ABI numbers itself (pynvml is optional); they must be NVML's."""
    pairs = {
        "_NOT_SUPPORTED": "NVML_ERROR_NOT_SUPPORTED", "_NO_PERMISSION": "NVML_ERROR_NO_PERMISSION",
        "_DRIVER_NOT_LOADED": "NVML_ERROR_DRIVER_NOT_LOADED", "_LIBRARY_NOT_FOUND": "NVML_ERROR_LIBRARY_NOT_FOUND",
        "_FUNCTION_NOT_FOUND": "NVML_ERROR_FUNCTION_NOT_FOUND", "_GPU_IS_LOST": "NVML_ERROR_GPU_IS_LOST",
        "_CLOCK_SM": "NVML_CLOCK_SM", "_CLOCK_MEM": "NVML_CLOCK_MEM", "_TEMPERATURE_GPU": "NVML_TEMPERATURE_GPU",
        "_ECC_CORRECTED": "NVML_MEMORY_ERROR_TYPE_CORRECTED", "_ECC_UNCORRECTED": "NVML_MEMORY_ERROR_TYPE_UNCORRECTED",
        "_ECC_AGGREGATE": "NVML_AGGREGATE_ECC",
        "_RETIRE_SBE": "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS",
        "_RETIRE_DBE": "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR",
    }
    for ours, nvml_name in pairs.items():
        assert getattr(nvml_backend, ours) == getattr(nv, nvml_name), ours
        if pynvml is not None:
            assert getattr(nv, nvml_name) == getattr(pynvml, nvml_name), nvml_name


@pytest.mark.skipif(pynvml is None, reason="nvidia-ml-py is not installed")
def test_the_standin_matches_the_real_pynvml() -> None:
    """Same constants, error texts and argument counts as the installed nvidia-ml-py."""
    mod = NvmlStandIn(Recording.load("h100-node")).module()
    for name, value in vars(mod).items():
        if name.startswith(("NVML_", "nvmlClocks")):
            assert getattr(pynvml, name) == value, name
    for code, text in nv.ERROR_TEXT.items():
        assert str(pynvml.NVMLError(code)) == text == str(nv.NVMLError(code))
        assert pynvml.NVMLError(code).value == code
    assert not issubclass(pynvml.NVMLLibraryMismatchError, pynvml.NVMLError)

    def required(fn: Any) -> int:
        return sum(1 for p in inspect.signature(fn).parameters.values() if p.default is inspect.Parameter.empty)

    for name in FUNCTIONS:
        assert required(getattr(mod, name)) == required(getattr(pynvml, name)), name
    assert _names_the_backend_uses() <= set(vars(pynvml))
