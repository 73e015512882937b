"""The slurmrestd API an admin names: one whose job records cannot say a job is exclusive
(v0.0.45, Slurm 26.05) is taken, with a warning that names the gap and the API that closes it."""

from __future__ import annotations

import logging

import pytest

from pal_slurm.errors import ConfigError
from pal_slurm.slurm.rest_backend import RestBackend


@pytest.mark.parametrize(("api", "warns"), [("v0.0.38", False), ("v0.0.44", False), ("v0.0.45", True),
                                            ("v0.0.46", True)])
def test_an_api_without_exclusivity_is_warned_about(caplog: pytest.LogCaptureFixture, api: str, warns: bool) -> None:
    with caplog.at_level(logging.WARNING, logger="pal_slurm.slurm.rest_backend"):
        RestBackend("http://ctl:6820", api=api, token="a.b.c", fallback_cli=False)
    said = [r.getMessage() for r in caplog.records if "exclusive" in r.getMessage()]
    assert bool(said) is warns, said
    if warns:
        assert api in said[0] and 'rest_api = "v0.0.44"' in said[0]


def test_a_malformed_api_is_a_configuration_error() -> None:
    with pytest.raises(ConfigError, match="rest_api must look like v0.0.38"):
        RestBackend("http://ctl:6820", api="0.0.45", token="a.b.c", fallback_cli=False)
