"""Writing a pilot's ``Out`` and ``Err`` back, the same way for every backend.

A file is replaced atomically (a temporary file in the same directory, then a rename), so the CE
never reads half an output; it keeps the mode of the file it replaces (the gridmanager may have
created it), else 0644.
"""

from __future__ import annotations

import logging
import os
import stat
import tempfile
from typing import Iterable

log = logging.getLogger(__name__)


def write_atomic(path: str, chunks: Iterable[bytes]) -> int:
    """Replace ``path`` with the bytes of ``chunks``; the number of bytes written. OSError as raised."""
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".podgahp-", dir=directory)
    written = 0
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
                written += len(chunk)
        try:
            mode = stat.S_IMODE(os.stat(path).st_mode)
        except FileNotFoundError:
            mode = 0o644
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError as e:
            log.debug("cannot remove %s: %s", tmp, e)
        raise
    return written
