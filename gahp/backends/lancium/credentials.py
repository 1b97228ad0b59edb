"""The Lancium API key file (checked like an ssh key: a regular file nobody else can read) and the
expiry of the access tokens it is exchanged for."""

from __future__ import annotations

import base64
import binascii
import json
import os
import stat
from typing import Optional

from gahp.core.errors import AuthError


def read_api_key(path: str, knob: str = "PODGAHP_LANCIUM_API_KEY_FILE") -> str:
    """The API key in ``path``; :class:`AuthError` if missing, empty, or readable by others.

    The file holds the key alone (surrounding blanks ignored) or a ``LANCIUM_API_KEY=<key>`` line
    as in ``~/.lancium/lancium.conf``.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        raise AuthError(f"{knob} = {path}: cannot open the Lancium API key file ({e.strerror}); "
                        f"put the API key there, mode 0600, owned by the user running the pilots") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise AuthError(f"{knob} = {path}: the Lancium API key file is not a regular file")
        if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise AuthError(
                f"{knob} = {path}: the Lancium API key file is accessible by group or others "
                f"(mode {stat.S_IMODE(info.st_mode):04o}); refusing to use it — run chmod 600 {path}")
        with os.fdopen(fd, "r", encoding="utf-8", errors="replace") as f:
            fd = -1
            text = f.read(65536)
    finally:
        if fd >= 0:
            os.close(fd)
    key = ""
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        if sep and name.strip() in ("LANCIUM_API_KEY", "api_key"):
            key = value.strip().strip("'\"")
        else:
            key = line
        break
    if not key or any(c.isspace() for c in key):
        raise AuthError(f"{knob} = {path}: the Lancium API key file holds no key (expected the key alone "
                        f"on one line)")
    return key


def jwt_expiry(token: str) -> Optional[float]:
    """``exp`` of a JWT's payload, decoded without checking the signature; None if unreadable."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload.encode("ascii")))
    except (ValueError, binascii.Error, UnicodeError):
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    if isinstance(exp, (int, float)) and not isinstance(exp, bool):
        return float(exp)
    return None
