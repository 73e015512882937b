"""Job fingerprints: stable across resubmissions, versions of pal and machines."""

from __future__ import annotations

import hashlib

import pytest

from pal_slurm.jobs.fingerprint import canonical_form, fingerprint


def test_known_value_never_changes() -> None:
    # job_identities and job_sensitivity store these; a change would orphan everything learned.
    assert fingerprint("alice", "train", "python train.py --epochs 90") == "c1230893da034449"
    assert canonical_form("alice", "train", "x") == b"pal-job/1\x00alice\x00train\x00x"
    assert fingerprint("a", "b", "c") == hashlib.sha256(b"pal-job/1\x00a\x00b\x00c").hexdigest()[:16]


def test_resubmission_gives_the_same_fingerprint() -> None:
    first = fingerprint("alice", "train", "python train.py --epochs 90")
    assert fingerprint("alice", "train", "python train.py --epochs 90\n") == first  # script reader's newline
    assert fingerprint(" alice", "train ", "python train.py --epochs 90") == first
    assert fingerprint(None, None, None) == fingerprint("", "", "")


@pytest.mark.parametrize("other", [
    ("bob", "train", "python train.py --epochs 90"),
    ("alice", "train2", "python train.py --epochs 90"),
    ("alice", "train", "python train.py --epochs 9"),
    ("alice", "train", "python  train.py --epochs 90"),  # inner whitespace can matter to a shell
    ("alice", "Train", "python train.py --epochs 90"),
])
def test_any_field_change_gives_another_fingerprint(other: tuple[str, str, str]) -> None:
    assert fingerprint(*other) != fingerprint("alice", "train", "python train.py --epochs 90")


def test_fields_cannot_run_into_each_other() -> None:
    assert fingerprint("a", "b c", "") != fingerprint("a b", "c", "")
    assert fingerprint("ab", "", "c") != fingerprint("a", "b", "c")


def test_shape_and_unicode() -> None:
    fp = fingerprint("jörg", "训练", "python -c 'print(\"é\")'")
    assert len(fp) == 16 and all(c in "0123456789abcdef" for c in fp)
