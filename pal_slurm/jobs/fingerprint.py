"""A job's fingerprint: what stays the same when the same work is submitted again.

A new submission gets a new job id, but the same user running the same job name with
the same command (or the same batch script, hashed by the caller) is the same kind of
work and should inherit what was learned about it. The placement daemon computes this
for every GPU job it sees (job_identities) and the learner keys job_sensitivity by it,
so the canonical form below must never change without a migration of stored values.
"""

from __future__ import annotations

import hashlib

__all__ = ["FINGERPRINT_LENGTH", "canonical_form", "fingerprint"]

FINGERPRINT_LENGTH = 16
_VERSION = "pal-job/1"


def canonical_form(user: str | None, name: str | None, command: str | None) -> bytes:
    """`pal-job/1 \\0 user \\0 name \\0 command`, UTF-8; None is the empty string.

    Only leading and trailing whitespace is stripped (a trailing newline from a script
    reader must not make a new fingerprint); inner whitespace and case are kept because
    they can change what a command does. NUL cannot occur in a Slurm string, so the
    fields cannot run into each other.
    """
    fields = [_VERSION, *((value or "").strip() for value in (user, name, command))]
    return "\0".join(fields).encode("utf-8", "surrogatepass")


def fingerprint(user: str | None, name: str | None, command: str | None) -> str:
    """The first 16 hex digits of sha256 over `canonical_form` (64 bits: collisions need ~4e9 jobs)."""
    return hashlib.sha256(canonical_form(user, name, command)).hexdigest()[:FINGERPRINT_LENGTH]
