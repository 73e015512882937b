"""Shared fixtures: a database per backend (SQLite always; PostgreSQL and MariaDB when
`make test` started them), and the CLI runner.

The real servers are reached through PAL_TEST_POSTGRES_URL / PAL_TEST_MYSQL_URL. Each
test gets a throwaway database created on the server and dropped afterwards. When
PAL_REQUIRE_DB_SERVERS=1 (as `make test` and CI set it) a missing server is an error,
never a skip.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine, make_url

REPO = Path(__file__).resolve().parent.parent
#: the folder of the evaluation harness, pal_eval: not in the product's wheel, so not installed; the
#: tests import it from there (setup.cfg's [tool:pytest] pythonpath), a child process through harness_env
BENCH = REPO / "bench"
DATA = Path(__file__).resolve().parent / "data"
#: a configuration whose job classes read the PAL artifact's benchmark names (tests of records named so)
ARTIFACT_CONFIG = str(DATA / "pal-artifact.toml")
ARTIFACT_DIR = Path(os.environ.get("PAL_ARTIFACT_DIR", REPO / "tests" / "data" / "pal-artifact"))

SERVER_ENV = {"postgres": "PAL_TEST_POSTGRES_URL", "mysql": "PAL_TEST_MYSQL_URL"}
#: the servers' administrators (tests/services/db-servers.sh env): for the tests that create roles
ADMIN_ENV = {"postgres": "PAL_TEST_POSTGRES_ADMIN_URL", "mysql": "PAL_TEST_MYSQL_ADMIN_URL"}


def _server_url(kind: str, env: dict[str, str] = SERVER_ENV) -> str:
    url = os.environ.get(env[kind])
    if not url:
        if os.environ.get("PAL_REQUIRE_DB_SERVERS") == "1":
            pytest.fail(f"{env[kind]} is not set but PAL_REQUIRE_DB_SERVERS=1 (run `make test`)")
        pytest.skip(f"no {kind} server: set {env[kind]} (make test starts one)")
    return url


def admin_url(kind: str) -> str:
    """The server administrator's URL (a superuser, root), for tests that create roles and users."""
    return _server_url(kind, ADMIN_ENV)


def throwaway_db(kind: str) -> Iterator[str]:
    """A database created for one test on the server and dropped afterwards (a generator: its URL,
    as the server's pal user)."""
    base = make_url(_server_url(kind))
    name = f"pal_test_{uuid.uuid4().hex[:10]}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    quote = '"' if kind == "postgres" else "`"
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {quote}{name}{quote}"))
    try:
        yield base.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            if kind == "postgres":
                # Only our own leftover sessions: an autovacuum worker on the throwaway
                # database belongs to the superuser (terminating it is refused), and
                # DROP DATABASE cancels autovacuum by itself.
                conn.execute(text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = :n AND pid <> pg_backend_pid() AND usename = current_user"
                ), {"n": name})
            conn.execute(text(f"DROP DATABASE IF EXISTS {quote}{name}{quote}"))
        admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres),
                        pytest.param("mysql", marks=pytest.mark.mysql)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database on every backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'pal.db'}"
    else:
        yield from throwaway_db(request.param)


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    """An engine on a fresh database of every backend, migrated to the newest schema."""
    from pal_slurm.db import migrate
    from pal_slurm.db.engine import make_engine

    eng = make_engine(db_url)
    migrate.upgrade(eng)
    yield eng
    eng.dispose()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'pal.db'}"


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def harness_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """`env` (this process's by default) with this checkout's pal_slurm and pal_eval first on
    PYTHONPATH: a child process that runs a bench script or the harness runs the code under
    test, never an installed copy (a bench script finds pal_eval beside itself, but pal_slurm
    where Python finds it)."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(REPO), str(BENCH), env.get("PYTHONPATH"))))
    return env


def require_tool(name: str, package: str) -> str:
    """The path of a command-line tool a test needs; without it the test is skipped, or FAILS
    when PAL_REQUIRE_TOOLS=1 (`make test` and CI set it: there the tool is installed, and a
    test that silently did not run would count as passed)."""
    import shutil

    path = shutil.which(name)
    if path is None:
        reason = f"{name} not found (apt-get install {package})"
        if os.environ.get("PAL_REQUIRE_TOOLS") == "1" or os.environ.get("PAL_REQUIRE_SLURM") == "1":
            pytest.fail(f"{reason}, but PAL_REQUIRE_TOOLS=1 says it is provided", pytrace=False)
        pytest.skip(reason)
    return path


def require_artifact(*parts: str) -> Path:
    """The PAL artifact data (tests/data/pal-artifact, in the repository; PAL_ARTIFACT_DIR names
    another copy), or a failure naming what is missing: the data ships with the tests, so a
    missing part is a broken checkout or a wrong PAL_ARTIFACT_DIR, never a reason to skip."""
    path = ARTIFACT_DIR.joinpath(*parts)
    if not path.exists():
        pytest.fail(f"PAL artifact data missing: {path} (it ships in tests/data/pal-artifact; "
                    "PAL_ARTIFACT_DIR, when set, must name a full copy)", pytrace=False)
    return ARTIFACT_DIR


@pytest.fixture
def artifact_dir() -> Path:
    return require_artifact("variability", "longhorn")


@pytest.fixture(autouse=True)
def _request_shapes_worked_out_afresh() -> None:
    """Request shapes are cached per process (pal_slurm.placer.shapes._shape): each test works its
    own out. `make mutation` runs the tests once unmutated in the process it forks each mutant's
    run from; without this a mutant of the shape rules would be answered from that cache."""
    shapes = sys.modules.get("pal_slurm.placer.shapes")
    if shapes is not None:
        shapes._shape.cache_clear()
