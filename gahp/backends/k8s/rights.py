"""The Kubernetes rights podgahp uses, in one table: what ``BLAH_PING`` checks and what the shipped
Role (``docs/podgahp-rbac.yaml``) grants, no more.  A test holds the two together."""

from __future__ import annotations

from typing import Tuple

#: (resource, verb, what podgahp does with it) in the pilots' namespace.
RIGHTS: Tuple[Tuple[str, str, str], ...] = (
    ("pods", "create", "submit a pilot"),
    ("pods", "get", "check that a job id names a pod of this user"),
    ("pods", "list", "status (one LIST per namespace), re-submits, clean-up"),
    ("pods", "watch", "status (one WATCH per namespace)"),
    ("pods", "patch", "mark a pod whose outcome was reported, so that it is cleaned up"),
    ("pods", "delete", "cancel, clean-up"),
    ("pods/log", "get", "write the pilot's Out/Err"),
    ("secrets", "create", "stage a pilot's input files and proxy"),
    ("secrets", "get", "check a Secret left by an older pod of the same name"),
    ("secrets", "update", "replace such a Secret"),
    ("secrets", "patch", "refresh a pilot's proxy"),
)
