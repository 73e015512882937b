"""pal_slurm.atomic_write: a reader sees the old file or the new one, and a failed write leaves
the old one and no temporary file behind."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from pal_slurm.atomic_write import current_umask, write_atomically


def test_a_reader_of_the_old_file_keeps_it_and_a_new_reader_gets_the_new(tmp_path: Path) -> None:
    target = tmp_path / "state"
    target.write_text("old\n")
    with open(target, encoding="utf-8") as reader:
        write_atomically(target, "new\n")
        assert reader.read() == "old\n"  # the rename left the open file whole
    assert target.read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state"]


@pytest.mark.parametrize("durable", [True, False])
def test_the_mode_is_what_open_gives_unless_told(tmp_path: Path, durable: bool) -> None:
    plain, told = tmp_path / "plain", tmp_path / "told"
    write_atomically(plain, "x", durable=durable)
    write_atomically(told, "x", mode=0o640, durable=durable)
    assert stat.S_IMODE(plain.stat().st_mode) == 0o666 & ~current_umask()
    assert stat.S_IMODE(told.stat().st_mode) == 0o640


def test_the_umask_is_read_without_changing_it() -> None:
    old = os.umask(0o027)
    try:
        assert current_umask() == 0o027
        assert current_umask() == 0o027
    finally:
        os.umask(old)


def test_a_failed_write_leaves_the_old_file_and_no_temporary_one(tmp_path: Path) -> None:
    target = tmp_path / "filter-state"
    target.write_text("format 2\nmode enforce\n")
    with pytest.raises(UnicodeEncodeError):
        write_atomically(target, "mode é", encoding="ascii")
    assert target.read_text() == "format 2\nmode enforce\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["filter-state"]


def test_a_missing_directory_is_the_callers_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        write_atomically(tmp_path / "no" / "such" / "file", "x")


def test_the_mode_is_never_set_through_the_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In a directory others can write, the temporary path could be swapped for a link to
    another file between the write and a chmod by name; the mode goes on the open descriptor."""
    def by_name(*_a: object, **_k: object) -> None:
        raise AssertionError("chmod by path name")

    monkeypatch.setattr(os, "chmod", by_name)
    target = tmp_path / "state"
    write_atomically(target, "x", mode=0o640)
    assert stat.S_IMODE(target.stat().st_mode) == 0o640 and target.read_text() == "x"


def test_the_temporary_file_is_made_new_never_opened_through_a_link(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A name planted in the directory (a link to another file, a FIFO) must make the write
    pick another name, never open it: the temporary file is opened with O_EXCL|O_NOFOLLOW."""
    flags: list[int] = []
    real_open = os.open

    def recording_open(path: str, flag: int, *args: object, **kwargs: object) -> int:
        if Path(path).parent == tmp_path:
            flags.append(flag)
        return real_open(path, flag, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", recording_open)
    write_atomically(tmp_path / "state", "x", mode=0o640)
    assert flags and all(f & os.O_CREAT and f & os.O_EXCL and f & os.O_NOFOLLOW for f in flags), flags


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file another group needs root")
def test_the_group_is_set_on_the_descriptor_before_the_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def by_name(*_a: object, **_k: object) -> None:
        raise AssertionError("chown by path name")

    monkeypatch.setattr(os, "chown", by_name)
    target = tmp_path / "state"
    write_atomically(target, "x", mode=0o640, group=4242)
    assert target.stat().st_gid == 4242 and stat.S_IMODE(target.stat().st_mode) == 0o640


def test_a_group_that_cannot_be_given_is_left_as_created(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(*_a: object, **_k: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "fchown", refused)
    target = tmp_path / "state"
    write_atomically(target, "x", mode=0o640, group=os.getegid() + 1)
    assert target.read_text() == "x" and target.stat().st_gid == os.getegid()
