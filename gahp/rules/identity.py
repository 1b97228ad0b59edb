"""Who a remote object belongs to, the same way for every backend.

A CE serves many users, and everything in a job ad is user input: a user can claim another user's
sandbox (``+remote_JobDirectory``). So the name of what a GAHP makes for a sandbox is fixed by a key
that hashes this CE, the HTCondor user the GAHP runs as and the sandbox together: two users never
reach the same key, whatever sandbox they claim, and two CEs sharing a cluster or an account neither.
"""

from __future__ import annotations

import hashlib

#: Hex digits of a sandbox key (80 bits: no collision among any realistic number of pilots).
KEY_LENGTH = 20


def sandbox_key(ce_name: str, user: str, sandbox_id: str) -> str:
    """The part of a remote object's name fixed by (CE, user, sandbox)."""
    digest = hashlib.sha256("\0".join((ce_name, user, sandbox_id)).encode("utf-8", "surrogateescape"))
    return digest.hexdigest()[:KEY_LENGTH]
