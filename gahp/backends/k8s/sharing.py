"""One copy of equal values across the pods of the watch copy.

Pilots of one CE look alike: the same label and annotation keys, mostly the same values, the same
spec, a handful of phases and conditions. Stored as parsed from each API answer, every pod carries
its own copy of all of it (about 9 KB a pod). :class:`Canon` hands out one shared object for equal
values, so a pod costs what is its own (name, uid, versions, times, its sandbox label).

Shared objects are never changed in place: the watch copy is read-only (a reader that wants a
different pod builds a new dict). The table is bounded (:data:`LIMIT` values): when it is full it is
emptied and fills again, so a stream of unique values (times, ids) never grows it without end; values
already shared stay shared.
"""

from __future__ import annotations

import functools
import json
from typing import Any, Callable, Collection, Dict, Hashable, Optional, Tuple, TypeVar

try:
    from msgspec.json import Encoder
    _encode: Callable[[Any], Any] = Encoder().encode
except ImportError:  # pragma: no cover - an installation without msgspec
    _encode = functools.partial(json.dumps, separators=(",", ":"))

#: Distinct values remembered at most.
LIMIT = 16384

T = TypeVar("T")

#: The tag of the keys of tuples of string pairs (no other key is a tuple starting with it).
_PAIR = "pairs of strings"


def _key(value: Any) -> Hashable:
    """A key equal only for values that are equal *and* of the same JSON shape: a string is its own
    key; anything else is tagged with its type and serialised in order (so ``1``, ``1.0``, ``True`` and
    ``"1"``, or two dicts with their keys in different orders, never share)."""
    if type(value) is str:
        return value
    return (type(value).__name__, _encode(value))


class Canon:
    """A bounded table of values handed out in place of equal ones."""

    __slots__ = ("limit", "_table")

    def __init__(self, limit: int = LIMIT) -> None:
        self.limit = limit
        self._table: Dict[Hashable, Any] = {}

    def __len__(self) -> int:
        return len(self._table)

    def share(self, value: T) -> T:
        """``value``, or an equal value handed out before. JSON values only (str, numbers, bools,
        None, lists and dicts of them); anything else is returned as it is."""
        try:
            key = _key(value)
        except (TypeError, ValueError):
            return value
        shared = self._table.get(key)
        if shared is not None:
            return shared  # type: ignore[no-any-return]
        return self._put(key, value)

    def pairs(self, mapping: Dict[str, Any], only: Optional[Collection[str]] = None) -> Tuple[Tuple[str, str], ...]:
        """The string entries of a dict (labels, annotations; of the keys in ``only`` if given) as a tuple
        of (key, value) pairs, each pair shared, and the tuple too when another pod has the same."""
        table = self._table
        pairs = []
        for key, value in mapping.items():
            if type(value) is not str or (only is not None and key not in only):
                continue
            pair = (key, value)
            # A pair of strings is its own key, tagged apart from the other kinds of keys.
            shared = table.get((_PAIR, pair))
            if shared is None:
                shared = self._put((_PAIR, pair), pair)
            pairs.append(shared)
        whole = tuple(pairs)
        shared = table.get((_PAIR, whole))
        return shared if shared is not None else self._put((_PAIR, whole), whole)

    def _put(self, key: Hashable, value: T) -> T:
        if len(self._table) >= self.limit:
            self._table.clear()
        self._table[key] = value
        return value
