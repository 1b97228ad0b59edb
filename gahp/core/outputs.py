"""Writing a pilot's ``Out`` and ``Err`` back, the same way for every backend, and only inside its job.

Where a file goes comes from what the gridmanager sent at submit, as the GAHP recorded it
(:mod:`gahp.rules.records`), never from the remote side. And a write stays inside the job's directory
(``Iwd``): a path that leads out of it is refused, and no directory on the way may be a symbolic link
(each is opened with ``O_NOFOLLOW`` from the one before), so a link planted in the job's directory
cannot send the bytes elsewhere. The file itself is replaced atomically (a temporary file in the same
directory, then a rename, which replaces a link rather than following it), so the CE never reads half
an output; it keeps the mode of the file it replaces (the gridmanager may have created it), else 0644.
"""

from __future__ import annotations

import errno
import logging
import os
import secrets
import stat
from typing import Iterable, List

log = logging.getLogger(__name__)

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)


def inside(job_dir: str, path: str) -> List[str]:
    """The components of ``path`` (absolute, or relative to ``job_dir``) below ``job_dir``; OSError
    (EPERM) when it is not below it."""
    base = os.path.normpath(job_dir)
    target = os.path.normpath(path if os.path.isabs(path) else os.path.join(base, path))
    prefix = base.rstrip("/") + "/"
    if not os.path.isabs(base) or not target.startswith(prefix) or target == prefix:
        raise OSError(errno.EPERM, f"not inside the job's directory {job_dir}", path)
    return target[len(prefix):].split("/")


def write_output(job_dir: str, path: str, chunks: Iterable[bytes]) -> int:
    """Replace ``path``, inside ``job_dir``, with the bytes of ``chunks``; the number of bytes written.
    OSError as raised, or naming the symbolic link or the way out of the job's directory."""
    parts = inside(job_dir, path)
    dfd = os.open(job_dir, _DIRECTORY)
    try:
        for i, part in enumerate(parts[:-1]):
            try:
                nfd = os.open(part, _DIRECTORY | os.O_NOFOLLOW, dir_fd=dfd)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR):
                    where = os.path.join(job_dir, *parts[:i + 1])
                    raise OSError(e.errno, f"{where} is a symbolic link or not a directory (not followed)",
                                  path) from None
                raise OSError(e.errno, e.strerror, path) from None
            os.close(dfd)
            dfd = nfd
        return _replace(dfd, parts[-1], chunks, path)
    finally:
        os.close(dfd)


def _replace(dfd: int, name: str, chunks: Iterable[bytes], path: str) -> int:
    try:
        info = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        mode = stat.S_IMODE(info.st_mode) & 0o777 if stat.S_ISREG(info.st_mode) else 0o644
    except FileNotFoundError:
        mode = 0o644
    tmp = f".podgahp-{secrets.token_hex(8)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600,
                 dir_fd=dfd)
    written = 0
    try:
        try:
            for chunk in chunks:  # the chunks as they come (a pod log streams 64 KiB at a time), unbuffered
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view):]
                written += len(chunk)
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException as e:
        try:
            os.unlink(tmp, dir_fd=dfd)
        except OSError as e2:
            log.debug("cannot remove %s next to %s: %s", tmp, path, e2)
        if isinstance(e, OSError) and not e.filename:
            raise OSError(e.errno, e.strerror, path) from None
        raise
    return written


def write_atomic(path: str, chunks: Iterable[bytes]) -> int:
    """Replace ``path`` (in its own directory) with the bytes of ``chunks``."""
    return write_output(os.path.dirname(path) or ".", path, chunks)
