"""placer/refresh.Refreshed, the one refresh cache of the placer: read again when due on the
injected clock, the last value kept while the source is down, retried after `retry_s`."""

from __future__ import annotations

from pathlib import Path

import pytest

from pal_slurm.placer.refresh import Refreshed


class Source:
    """A source that counts its reads and fails while `down`."""

    def __init__(self) -> None:
        self.reads: list[float] = []
        self.down = False

    def __call__(self, now: float) -> int:
        self.reads.append(now)
        if self.down:
            raise OSError("database down\nsecond line")
        return len(self.reads)


def test_it_reads_when_due_on_its_clock() -> None:
    now = [100.0]
    src = Source()
    cache = Refreshed(src, 60.0, initial=0, clock=lambda: now[0])
    assert cache.get() == 1 and cache.loaded_at == 100.0
    now[0] = 159.0
    assert cache.get() == 1 and src.reads == [100.0]
    now[0] = 160.0
    assert cache.get() == 2 and src.reads == [100.0, 160.0] and cache.loaded_at == 160.0
    assert cache.get(500.0) == 3, "a time given to get() wins over the clock (the cycle's own now)"


def test_a_failed_read_keeps_the_value_and_is_retried_after_retry_s() -> None:
    src = Source()
    told: list[str] = []
    cache = Refreshed(src, 60.0, initial=0, clock=lambda: 0.0, retry_s=10.0, on_error=told.append)
    assert cache.get(0.0) == 1
    src.down = True
    assert cache.get(60.0) == 1 and cache.last_error == "OSError: database down" and cache.loaded_at == 0.0
    assert told == ["OSError: database down"]
    assert cache.get(69.0) == 1 and len(src.reads) == 2, "not before retry_s"
    src.down = False
    assert cache.get(70.0) == 3 and cache.last_error is None and cache.loaded_at == 70.0


def test_before_any_good_read_it_gives_the_initial_value() -> None:
    src = Source()
    src.down = True
    cache: Refreshed[int | None] = Refreshed(src, 60.0, initial=None, clock=lambda: 0.0)
    assert cache.get() is None and cache.loaded_at is None and cache.last_error


def test_errors_it_is_not_told_to_keep_on_propagate() -> None:
    def read(_now: float) -> int:
        raise KeyError("a bug")

    cache = Refreshed(read, 60.0, initial=0, keep_on=(OSError,))
    with pytest.raises(KeyError):
        cache.get(0.0)


def test_the_factor_cache_stamps_its_clocks_time(tmp_path: Path) -> None:
    """The classes the placer holds say when they were read on the clock it runs on (a replay or
    a test with a clock of its own), not on the wall clock."""
    from pal_slurm.services.classification import run_classification
    from pal_slurm.config import ClassificationConfig, DatabaseConfig, PalConfig
    from pal_slurm.db.engine import make_engine
    from pal_slurm.db.migrate import upgrade
    from pal_slurm.ingest.jsonl import dump_jsonl
    from pal_slurm.services.ingest import import_files
    from pal_slurm.placer.factors import FactorCache
    from tests.slurm.placer_support import A_PERFVAR, records

    url = f"sqlite:///{tmp_path / 'pal.db'}"
    engine = make_engine(url)
    upgrade(engine)
    (tmp_path / "runs.jsonl").write_text(dump_jsonl(records()), encoding="utf-8")
    import_files(engine, [tmp_path / "runs.jsonl"], "jsonl")
    run_classification(engine, PalConfig(classification=ClassificationConfig(benchmark_set="pal-artifact"), database=DatabaseConfig(url=url), data_dir=tmp_path), note="t", allow_partial=True)
    cache = FactorCache(lambda: engine, refresh_s=60.0, clock=lambda: 1234.0)
    factors = cache.get()
    assert factors.loaded_at == 1234.0 and set(factors.by_slot) == set(A_PERFVAR)
    assert cache.get(1290.0) is factors and cache.get(1294.0) is not factors


def test_an_error_in_raise_on_propagates_and_the_next_get_reads_again() -> None:
    """Slurm being unreachable stops the cycle (a SlurmError the cache would keep on otherwise)."""
    from pal_slurm.errors import SlurmError, SlurmUnavailable

    calls: list[float] = []

    def read(now: float) -> int:
        calls.append(now)
        raise (SlurmUnavailable if len(calls) == 1 else SlurmError)("no")

    cache = Refreshed(read, 60.0, initial=7, clock=lambda: 0.0, keep_on=(SlurmError,), raise_on=(SlurmUnavailable,))
    with pytest.raises(SlurmUnavailable):
        cache.get(10.0)
    assert cache.get(11.0) == 7 and calls == [10.0, 11.0], "not due later: read again at once, then kept"
    assert cache.get(70.0) == 7 and calls == [10.0, 11.0], "a kept error waits retry_s"
