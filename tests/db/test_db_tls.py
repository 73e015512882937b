"""The TLS settings docs/admin-guide.md ("Database") tells admins to put in a database URL do what it
says: the driver demands TLS, checks the server's certificate against the given CA and its host name,
and refuses a server that offers no TLS instead of talking in the clear.

The test servers offer no TLS, which is what shows the refusal; the CA is a throwaway self-signed
certificate (tests/data/tls/test-ca.pem, no key kept).
"""

from __future__ import annotations

import re
import ssl
from urllib.parse import parse_qsl, urlsplit

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from conftest import DATA, REPO, _server_url

CA = DATA / "tls" / "test-ca.pem"
GUIDE = REPO / "docs" / "admin-guide.md"


def _documented_query(scheme: str) -> dict[str, str]:
    """The query string of the guide's example URL for `scheme`, as a dict (every example agrees)."""
    found = {m.group(0) for m in re.finditer(re.escape(scheme) + r"://pal\S*@db\.cluster\.local\S*",
                                             GUIDE.read_text(encoding="utf-8"))}
    assert found, f"docs/admin-guide.md shows no {scheme} URL with TLS"
    queries = {urlsplit(u.rstrip("`")).query for u in found}
    assert len(queries) == 1, f"the guide's {scheme} examples disagree: {queries}"
    return dict(parse_qsl(queries.pop()))


def _test_url(kind: str, query: dict[str, str]) -> str:
    cafile = {k: str(CA) for k in ("sslrootcert", "ssl_ca") if k in query}
    return make_url(_server_url(kind)).update_query_dict({**query, **cafile}).render_as_string(hide_password=False)


@pytest.mark.postgres
def test_the_documented_postgresql_url_demands_a_verified_tls_connection() -> None:
    query = _documented_query("postgresql+psycopg")
    assert query["sslmode"] == "verify-full" and query["sslrootcert"]
    engine = create_engine(_test_url("postgres", query))
    try:
        args = engine.dialect.create_connect_args(engine.url)[1]
        assert (args["sslmode"], args["sslrootcert"]) == ("verify-full", str(CA)), "libpq gets both"
        with pytest.raises(OperationalError, match="SSL was required"):
            with engine.connect() as conn:
                conn.execute(text("SELECT 1"))
    finally:
        engine.dispose()


@pytest.mark.mysql
def test_the_documented_mariadb_url_demands_a_verified_tls_connection() -> None:
    import pymysql

    query = _documented_query("mysql+pymysql")
    assert query.get("ssl_ca") and "ssl_verify_cert" not in query and "ssl_verify_identity" not in query
    engine = create_engine(_test_url("mysql", query))
    try:
        args = engine.dialect.create_connect_args(engine.url)[1]
        conn = pymysql.connect(**args, defer_connect=True)  # the context PyMySQL would handshake with
        assert conn.ctx.verify_mode == ssl.CERT_REQUIRED and conn.ctx.check_hostname
        assert [dict(c["subject"][0]).get("commonName") for c in conn.ctx.get_ca_certs()] == ["pal-slurm test CA"]
        with pytest.raises(OperationalError, match="SSL is required"):
            with engine.connect() as c:
                c.execute(text("SELECT 1"))
    finally:
        engine.dispose()


def test_why_the_guide_warns_against_ssl_verify_cert_in_a_pymysql_url() -> None:
    """Through SQLAlchemy, `ssl_ca` goes into PyMySQL's ssl dict while `ssl_verify_cert` and
    `ssl_verify_identity` go in as keywords; with either keyword PyMySQL builds its context from
    the keywords alone, so the CA file is dropped (the system's CAs instead) and the host name is
    not checked. When this fails, PyMySQL honours both: the guide's warning can go."""
    import pymysql

    url = make_url("mysql+pymysql://pal:pw@db.cluster.local/pal").update_query_dict(
        {"ssl_ca": str(CA), "ssl_verify_cert": "true", "ssl_verify_identity": "true"})
    engine = create_engine(url)
    args = engine.dialect.create_connect_args(engine.url)[1]
    conn = pymysql.connect(**args, defer_connect=True)
    names = [dict(c["subject"][0]).get("commonName") for c in conn.ctx.get_ca_certs()]
    assert "pal-slurm test CA" not in names and not conn.ctx.check_hostname
