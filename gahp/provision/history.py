"""What the provisioner remembers from one cycle to the next: each pilot it has at the CE (did it
join the pool, did it run a job) and each group held back (its jobs do not match its pilots; its
pilots do not join the pool). Bounded by the pilots and groups of the last cycle.

:mod:`gahp.provision.plan` reads and updates it; :mod:`gahp.provision.service` keeps it between
cycles and in a file, so that ``--once`` from cron remembers as the service does. The file is the
provisioner's own, but read as untrusted: anything malformed is dropped, never an error.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Dict, Iterable, Mapping, Optional, Type, TypeVar

log = logging.getLogger(__name__)

#: Largest history file read (a history holds one short entry per pilot and group).
MAX_FILE_BYTES = 16 * 1024 * 1024
#: Most pilots and groups kept from a file.
MAX_ENTRIES = 200_000

T = TypeVar("T")


@dataclass
class PilotRecord:
    group: str
    first_seen: float
    joined: bool = False
    """Seen in the pool."""
    served: bool = False
    """Seen running a job (or its slot showed it had)."""
    lost: bool = False
    """Started at the CE, not in the pool past the boot tolerance (counted as a failure once)."""
    waited: bool = False
    """Last seen idle in the pool while jobs of its group waited."""
    removed: bool = False
    """Removed by the provisioner (its end says nothing about the group)."""


@dataclass
class GroupRecord:
    unmatched_at: float = 0.0
    """When its pilots were last seen idle while its jobs waited (0: not held back)."""
    unmatched_waiting: int = 0
    """Jobs waiting then (fewest since): more than that is a change."""
    failures: int = 0
    """Its pilots in a row that ended (or got lost) without joining the pool."""
    failed_at: float = 0.0
    unplaced: int = 0
    """The most pilots it may have on their way since the cluster last left its pilots unplaced past the
    start tolerance, doubled each cycle it plans more (0: no such limit)."""

    def hold(self, now: float, waiting: int) -> None:
        self.unmatched_at = now
        self.unmatched_waiting = waiting

    def clear(self) -> None:
        self.unmatched_at = 0.0
        self.unmatched_waiting = 0

    def failed(self, now: float) -> None:
        self.failures += 1
        self.failed_at = now

    @property
    def empty(self) -> bool:
        return not self.unmatched_at and not self.failures and not self.unplaced


@dataclass
class History:
    pilots: Dict[str, PilotRecord] = field(default_factory=dict)
    groups: Dict[str, GroupRecord] = field(default_factory=dict)
    saved_at: float = 0.0
    """When it was saved (a file from long ago says nothing of the pilots at the CE now)."""

    def group(self, key: str) -> GroupRecord:
        return self.groups.setdefault(key, GroupRecord())

    def copy(self) -> History:
        return History({k: PilotRecord(**asdict(v)) for k, v in self.pilots.items()},
                       {k: GroupRecord(**asdict(v)) for k, v in self.groups.items()}, self.saved_at)

    def prune(self, keys: Iterable[str]) -> None:
        """Keep group records only for ``keys`` (the groups of this cycle) with something to remember."""
        wanted = set(keys)
        self.groups = {k: v for k, v in self.groups.items() if k in wanted and not v.empty}

    def to_json(self) -> str:
        return json.dumps({"pilots": {k: asdict(v) for k, v in self.pilots.items()},
                           "groups": {k: asdict(v) for k, v in self.groups.items()}, "saved_at": self.saved_at},
                          separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> History:
        """A history from its JSON; entries that are not what :meth:`to_json` writes are dropped."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("not an object")
        saved_at = data.get("saved_at")
        return cls(_records(data.get("pilots"), PilotRecord), _records(data.get("groups"), GroupRecord),
                   float(saved_at) if isinstance(saved_at, (int, float)) and _CHECKS["float"](saved_at) else 0.0)


def _records(raw: Any, kind: Type[T]) -> Dict[str, T]:
    if not isinstance(raw, dict):
        return {}
    types = {f.name: f.type for f in fields(kind)}  # type: ignore[arg-type]
    found: Dict[str, T] = {}
    for key, value in list(raw.items())[:MAX_ENTRIES]:
        if isinstance(key, str) and len(key) <= 1024 and isinstance(value, dict) and _typed(value, types):
            found[key] = kind(**value)
    return found


_CHECKS = {"str": lambda v: isinstance(v, str) and len(v) <= 1024,
           "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v == v,
           "int": lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 10 ** 9,
           "bool": lambda v: isinstance(v, bool)}


def _typed(value: Mapping[str, Any], types: Mapping[str, Any]) -> bool:
    if set(value) - set(types):
        return False
    return all(_CHECKS[str(types[k])](v) for k, v in value.items())


def load(path: str) -> History:
    """The history saved at ``path``; empty when there is none or it cannot be read (logged)."""
    try:
        if os.path.getsize(path) > MAX_FILE_BYTES:
            raise ValueError(f"larger than {MAX_FILE_BYTES} bytes")
        with open(path, encoding="utf-8") as f:
            return History.from_json(f.read())
    except FileNotFoundError:
        return History()
    except (OSError, ValueError, TypeError) as e:
        log.warning("history %s not read, starting afresh: %s", path, e)
        return History()


def save(history: History, path: str) -> Optional[str]:
    """Write ``history`` to ``path`` (whole or not at all); the error when it could not be written."""
    directory = os.path.dirname(path) or "."
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        fd, temporary = tempfile.mkstemp(prefix=".history.", dir=directory)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(history.to_json())
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise
    except OSError as e:
        return f"history {path} not saved: {e}"
    return None
