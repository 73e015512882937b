"""The database roles on the real servers, for the tests of what each role may do."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.role_db import SERVERS, RoleDb, role_db


@pytest.fixture(params=SERVERS)
def roles(request: pytest.FixtureRequest) -> Iterator[RoleDb]:
    yield from role_db(request.param)
