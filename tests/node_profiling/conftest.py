"""The NVML stand-in on each recorded node, for the tests of the NVML backend."""

from __future__ import annotations

import pytest

from tests.support.nvml_standin import NODES, NvmlStandIn, Recording


@pytest.fixture(params=[(n, s) for n in NODES for s in ("str", "bytes")], ids=lambda p: f"{p[0]}-{p[1]}")
def standin(request: pytest.FixtureRequest) -> NvmlStandIn:
    """Each recorded node, with strings as current nvidia-ml-py (str) and older releases (bytes) return them."""
    node, strings = request.param
    return NvmlStandIn(Recording.load(node), strings=strings)
