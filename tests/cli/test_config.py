"""Configuration: defaults, precedence of overrides, one-line errors naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import REPO

from pal_slurm.config import config_as_dict, default_data_dir, load_config, mask_url
from pal_slurm.errors import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "pal.toml"
    p.write_text(text)
    return p


def test_defaults_without_a_file(tmp_path: Path) -> None:
    cfg = load_config(None, env={"HOME": str(tmp_path)})
    assert cfg.classification.min_runs == 3 and cfg.classification.max_bins == 8
    # what `pal profile run` measures, not the PAL artifact's names
    assert {k: v.benchmark for k, v in cfg.job_classes.items()} == {
        "A": "train-resnet50", "B": "train-bert", "C": "train-bert", "D": "stream"}
    assert cfg.report.compute_benchmarks == ["gemm-fp16", "gemm-fp32", "train-resnet50", "train-bert"]
    assert cfg.db_url == f"sqlite:///{cfg.data_dir / 'pal.db'}"


def test_every_default_benchmark_is_one_the_profiler_runs() -> None:
    """The site's own path: the defaults name the shipped profiler's benchmarks, each of which
    the simulated backend can play (so `pal profile run --backend sim` feeds every class)."""
    from pal_slurm.benchmark_sets import BENCHMARK_SETS
    from pal_slurm.gpu.sim_specs import BENCHMARKS as SIM
    from pal_slurm.profiler.benchmarks import BENCHMARKS

    cfg = load_config(None, env={})
    assert tuple(BENCHMARKS) == BENCHMARK_SETS["profiler"].benchmarks
    for name in [*(jc.benchmark for jc in cfg.job_classes.values()), *(cfg.report.compute_benchmarks or [])]:
        assert name in BENCHMARKS and BENCHMARKS[name].sim_benchmark in SIM
    # the classes keep their order of clock sensitivity in the simulated physics
    frac = [SIM[BENCHMARKS[cfg.job_classes[c].benchmark].sim_benchmark].compute_fraction for c in "ABCD"]
    assert frac == sorted(frac, reverse=True) and frac[0] > frac[1] > frac[3]


def test_the_artifact_set_is_one_setting(tmp_path: Path) -> None:
    f = write(tmp_path, '[classification]\nbenchmark_set = "pal-artifact"\n[job_classes.D]\nbenchmark = "stream"\n')
    cfg = load_config(f, env={})
    assert {k: v.benchmark for k, v in cfg.job_classes.items()} == {
        "A": "resnet50", "B": "bert", "C": "bert", "D": "stream"}
    assert cfg.report.compute_benchmarks == ["resnet50", "bert", "sgemm"]


@pytest.mark.parametrize("text, key", [
    ('[job_classes.A]\nbenchmark = "gemm-fp99"\n', "job_classes.A.benchmark"),
    ('[report]\ncompute_benchmarks = ["gemm-fp16", "gemm-fp99"]\n', "report.compute_benchmarks"),
    ('[classification]\nbenchmark_set = "mine"\n', "classification.benchmark_set"),
])
def test_a_benchmark_no_source_measures_is_refused(tmp_path: Path, text: str, key: str) -> None:
    f = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(f, env={})
    msg = str(err.value)
    assert key in msg and "\n" not in msg.strip()
    if "gemm-fp99" in text:
        assert "did you mean 'gemm-fp16'" in msg or "did you mean 'gemm-fp32'" in msg


def test_data_dir_root_and_user(tmp_path: Path) -> None:
    assert default_data_dir({}, is_root=True) == Path("/var/lib/pal")
    assert default_data_dir({"HOME": "/home/u"}, is_root=False) == Path("/home/u/.local/share/pal")
    assert default_data_dir({"XDG_DATA_HOME": "/x"}, is_root=False) == Path("/x/pal")


def test_precedence(tmp_path: Path) -> None:
    f = write(tmp_path, '[database]\nurl = "sqlite:///file.db"\n')
    assert load_config(f, env={}).db_url == "sqlite:///file.db"
    assert load_config(f, env={"PAL_DB_URL": "sqlite:///env.db"}).db_url == "sqlite:///env.db"
    assert load_config(f, db_url="sqlite:///flag.db", env={"PAL_DB_URL": "sqlite:///env.db"}).db_url == "sqlite:///flag.db"
    assert load_config(None, env={"PAL_CONFIG": str(f)}).db_url == "sqlite:///file.db"


def test_file_settings_and_class_benchmarks(tmp_path: Path) -> None:
    f = write(tmp_path, 'data_dir = "/srv/pal"\n[classification]\nmin_runs = 5\nhysteresis = 0.01\n'
                        '[job_classes.A]\nbenchmark = "gemm-fp16"\n[job_classes.D]\nbenchmark = "stream"\n')
    cfg = load_config(f, env={})
    assert cfg.classification.min_runs == 5 and cfg.classification.hysteresis == 0.01
    # the classes a file leaves out keep their defaults: every class a user can ask for is measured
    assert list(cfg.job_classes) == ["A", "B", "C", "D"]
    assert cfg.job_classes["A"].benchmark == "gemm-fp16" and cfg.job_classes["D"].benchmark == "stream"
    assert cfg.job_classes["B"].benchmark == "train-bert"
    assert cfg.job_classes["A"].description  # kept from the default
    assert cfg.db_url == "sqlite:////srv/pal/pal.db"


def test_a_class_the_filter_does_not_know_is_one_clear_error(tmp_path: Path) -> None:
    f = write(tmp_path, '[job_classes.Z]\nbenchmark = "stream"\n')
    with pytest.raises(ConfigError, match=r"unknown job class 'Z': the classes are A, B, C, D") as err:
        load_config(f, env={})
    assert "\n" not in str(err.value).strip()


def test_the_job_classes_have_one_definition_the_filter_and_spank_plugin_copy() -> None:
    """job_submit.lua and pal_spank.c cannot import Python: their class lists are checked here."""
    import re

    from pal_slurm.config import DEFAULT_JOB_CLASSES
    from pal_slurm.placement.base import CLASS_RANK
    from pal_slurm.placement.model import JOB_CLASSES
    from pal_slurm.simulate.traces import JOB_CLASSES as TRACE_CLASSES

    assert tuple(DEFAULT_JOB_CLASSES) == JOB_CLASSES == TRACE_CLASSES == tuple(CLASS_RANK)
    lua = (REPO / "spank_hooks" / "job_submit.lua").read_text(encoding="utf-8")
    table = re.search(r"local VALID_CLASSES = \{([^}]*)\}", lua)
    assert table, "job_submit.lua: VALID_CLASSES not found"
    lua_classes = [v for k, v in re.findall(r'(\w+) = "([^"]+)"', table.group(1)) if v not in ("auto", "off")]
    assert tuple(lua_classes) == JOB_CLASSES
    c = (REPO / "spank_hooks" / "pal_spank.c").read_text(encoding="utf-8")
    arr = re.search(r"pal_classes\[\] = \{([^}]*)\}", c)
    assert arr, "pal_spank.c: pal_classes not found"
    c_classes = [v for v in re.findall(r'"([^"]+)"', arr.group(1)) if v not in ("auto", "off")]
    assert tuple(c_classes) == JOB_CLASSES
    assert "|".join(JOB_CLASSES) + "|auto|off" in c


@pytest.mark.parametrize("text,fragment", [
    ("[classification]\nmin_runs = 0\n", "classification.min_runs: Input should be greater than or equal to 1"),
    ("[classification]\nmin_run = 2\n", "classification.min_run: unknown setting"),
    ("[classification]\nrun_ratio = 0.5\n",
     "classification.run_ratio: must be 0 (off) or a finite number > 1, got 0.5"),
    ("[classification]\nrun_ratio = inf\n", "classification.run_ratio: must be 0 (off)"),
    ("[database]\necho = 'loud'\n", "database.echo: Input should be a valid boolean"),
    ("[job_classes.A]\nbenchmark = ''\n", "job_classes.A.benchmark: String should have at least 1 character"),
    ("[job_classes.a]\nbenchmark = 'x'\n", "job_classes: unknown job class 'a'"),
    ("[job_classes]\nA = 'resnet50'\n", "job_classes.A: Input should be a valid dictionary"),
    ("[job_classes]\nA = 3\n", "job_classes.A: Input should be a valid dictionary"),
    ("database = 3\n", "database: Input should be a valid dictionary"),
    ("[logging]\nlevel = 'LOUD'\n", "logging.level: Input should be"),
    ("[classification\n", "invalid TOML"),
])
def test_invalid_file_one_line_names_key(tmp_path: Path, text: str, fragment: str) -> None:
    f = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(f, env={})
    msg = str(err.value)
    assert msg.startswith(str(f)) and fragment in msg and "\n" not in msg


def test_explicit_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.toml", env={})


def test_secrets_masked() -> None:
    assert mask_url("mysql+pymysql://pal:hunter2@db:3306/pal") == "mysql+pymysql://pal:***@db:3306/pal"
    cfg = load_config(None, db_url="postgresql+psycopg://u:hunter2@h/d", env={})
    assert "hunter2" not in repr(config_as_dict(cfg))


def test_a_binary_config_file_is_one_line_not_an_internal_error(tmp_path: Path) -> None:
    f = tmp_path / "pal.toml"
    f.write_bytes(b"[database]\n\xfa\xfb\x00\x01")
    with pytest.raises(ConfigError, match=r"pal\.toml: not a TOML file \(byte 11 is not UTF-8 text\)$"):
        load_config(f, env={})


def test_passwords_in_the_query_string_are_masked_too() -> None:
    """libpq and PyMySQL take a password in the query string as well; `pal config show` and
    every log line go through mask_url, so it is masked there like the userinfo one."""
    masked = mask_url("postgresql+psycopg://pal@db/pal?password=hunter2&sslmode=verify-full")
    assert "hunter2" not in masked and "password=***" in masked and "sslmode=verify-full" in masked
    masked = mask_url("mysql+pymysql://pal@db/pal?passwd=hunter2&ssl_ca=/etc/pal/ca.pem")
    assert "hunter2" not in masked and "passwd=***" in masked and "ca.pem" in masked
    cfg = load_config(None, db_url="postgresql+psycopg://u@h/d?password=hunter2", env={})
    assert "hunter2" not in repr(config_as_dict(cfg))


def test_a_service_takes_its_login_from_its_systemd_credential(tmp_path: Path) -> None:
    """`LoadCredential=pal-db-url:/etc/pal/db-url`: systemd hands one service a login only root may
    read; it wins over the shared pal.toml's url_file (which that service may not be able to
    read), and an empty credential is an error naming it, never another database."""
    creds = tmp_path / "credentials"
    creds.mkdir()
    (creds / "pal-db-url").write_text("postgresql+psycopg://pal_placer:s3cret@db/pal\n")
    f = write(tmp_path, '[database]\nurl_file = "/nonexistent/db-url"\n')
    cfg = load_config(f, env={"CREDENTIALS_DIRECTORY": str(creds)})
    assert cfg.db_url == "postgresql+psycopg://pal_placer:s3cret@db/pal"
    assert load_config(f, env={"CREDENTIALS_DIRECTORY": str(creds), "PAL_DB_URL": "sqlite:///e.db"}).db_url \
        == "sqlite:///e.db"
    with pytest.raises(ConfigError, match="does not exist"):  # no credential: the file's url_file, as before
        load_config(f, env={"CREDENTIALS_DIRECTORY": str(tmp_path / "other")})
    (creds / "pal-db-url").write_text("\n")
    with pytest.raises(ConfigError, match="systemd credential pal-db-url.*it has none"):
        load_config(f, env={"CREDENTIALS_DIRECTORY": str(creds)})


def test_the_url_can_come_from_a_credentials_file(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """One pal.toml for every host, each host's login in a file of its own ([database] url_file)."""
    import os

    creds = tmp_path / "db-url"
    creds.write_text("# this node's login\npostgresql+psycopg://pal_node_gpu001:s3cret@db/pal?sslmode=verify-full\n")
    os.chmod(creds, 0o640)
    f = write(tmp_path, '[database]\nurl_file = "db-url"\n')  # relative to the configuration file
    cfg = load_config(f, env={})
    assert cfg.db_url == "postgresql+psycopg://pal_node_gpu001:s3cret@db/pal?sslmode=verify-full"
    assert cfg.database.url_file == Path("db-url")  # `pal config show` says where the URL came from
    assert "s3cret" not in str(config_as_dict(cfg))
    assert not caplog.records, "a 0640 file is not warned about"
    assert load_config(f, env={"PAL_DB_URL": "sqlite:///env.db"}).db_url == "sqlite:///env.db", "overrides win"

    os.chmod(creds, 0o644)
    load_config(f, env={})
    assert any("readable by every user" in r.getMessage() for r in caplog.records)

    for text, message in (
            ('[database]\nurl = "sqlite:///x.db"\nurl_file = "db-url"\n', "set either url or url_file, not both"),
            ('[database]\nurl_file = "missing"\n', "does not exist"),
            ('[database]\nurl_file = "."\n', "is a directory"),
    ):
        with pytest.raises(ConfigError, match=message) as err:
            load_config(write(tmp_path, text), env={})
        assert "\n" not in str(err.value).strip()
    f = write(tmp_path, '[database]\nurl_file = "db-url"\n')
    creds.write_text("sqlite:///a.db\nsqlite:///b.db\n")
    with pytest.raises(ConfigError, match="on one line, it has 2"):
        load_config(f, env={})
    creds.write_text("# nothing\n\n")
    with pytest.raises(ConfigError, match="on one line, it has none"):
        load_config(f, env={})
