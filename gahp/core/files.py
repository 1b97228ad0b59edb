"""Reading files a job ad names — user input — with bounded memory and no way to hang.

A user can name anything as an input (``TransferInput``, ``In``, ``+remote_*`` attributes): a 2 GB
file, ``/dev/zero``, a FIFO nobody writes to.  :func:`read_input` opens without blocking, looks at
the file's type and size before reading a byte, accepts regular files only (symbolic links are
followed, as HTCondor's file transfer does), and never reads more than ``limit`` + 1 bytes.
Every refusal is an :class:`~gahp.core.errors.InvalidJob` naming the file and the reason.
"""

from __future__ import annotations

import os
import stat

from gahp.core.errors import InvalidJob

_CHUNK = 1 << 20


class TooLarge(InvalidJob):
    """The file holds more than the limit (nothing beyond limit + 1 bytes was read)."""

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def read_input(path: str, what: str, limit: int, limit_knob: str) -> bytes:
    """The bytes of regular file ``path``; InvalidJob if it is not one or holds more than ``limit``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except IsADirectoryError:
        raise InvalidJob(f"{what} {path} is a directory; only regular files can be staged") from None
    except OSError as e:
        raise InvalidJob(f"{what} {path} cannot be read: {e.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = next((name for test, name in _KINDS if test(info.st_mode)), "not a regular file")
            raise InvalidJob(f"{what} {path} is {kind}; only regular files can be staged")
        if info.st_size > limit:
            raise TooLarge(f"{what} {path} has {info.st_size} bytes, more than the {limit} allowed "
                           f"({limit_knob})")
        chunks = []
        total = 0
        while total <= limit:
            chunk = os.read(fd, min(_CHUNK, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:
            raise TooLarge(f"{what} {path} grew past the {limit} bytes allowed ({limit_knob}) while it was read")
        return b"".join(chunks)
    except OSError as e:
        raise InvalidJob(f"{what} {path} cannot be read: {e.strerror}") from None
    finally:
        os.close(fd)
