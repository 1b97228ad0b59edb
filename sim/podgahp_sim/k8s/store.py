"""Object storage of the simulated API server: objects by (resource, namespace, name), the global
resource-version counter, the bounded event log, and watch streams over it.

Every write bumps the counter and appends one event; a watch resumes from any resource version still
in the log and gets :class:`Expired` for older ones (the real server's 410).  An object that stops
matching a watch's selectors is delivered as ``DELETED`` (as it last matched), one that starts matching
as ``ADDED``.
All access happens under :attr:`Store.lock`; :attr:`Store.changed` is notified on every write.
Owns no HTTP or scheduling logic.
"""

from __future__ import annotations

import bisect
import copy
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Deque, Dict, Iterable, Iterator, List, Optional, Set, Tuple, TypeVar

from .errors import expired as expired_body

JsonObj = Dict[str, Any]
Key = Tuple[str, str, str]
Matcher = Callable[[JsonObj], bool]
T = TypeVar("T")


@dataclass(frozen=True)
class Event:
    """One stored change: ``obj`` the object stored (or, for a deletion, the last state with its new
    resourceVersion), ``old`` the object it replaced; neither is ever changed."""

    rv: int
    type: str
    resource: str
    obj: JsonObj
    old: Optional[JsonObj]


class Expired(Exception):
    """The requested resource version is older than the event log."""

    def __init__(self, requested: int, oldest: int) -> None:
        super().__init__("too old resource version: %d (%d)" % (requested, oldest))
        self.requested = requested
        self.oldest = oldest


def json_copy(value: T) -> T:
    """A deep copy of a JSON value (dicts, lists and scalars; anything else by ``copy.deepcopy``):
    several times faster than ``copy.deepcopy``, which the simulator calls for every write."""
    kind = type(value)
    if kind is dict:
        return {k: json_copy(v) for k, v in value.items()}  # type: ignore[attr-defined,return-value]
    if kind is list:
        return [json_copy(v) for v in value]  # type: ignore[attr-defined,return-value]
    if kind in (str, int, float, bool) or value is None:
        return value
    return copy.deepcopy(value)


def now_rfc3339(when: Optional[float] = None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if when is None else when))


class Store:
    """Objects, resource versions and the event log; see the module docstring."""

    def __init__(self, log_size: int) -> None:
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.rv = 1
        self.objects: Dict[Key, JsonObj] = {}
        self._keys: Dict[str, Set[Key]] = {}
        """Keys of each resource (reads of one resource do not scan the others)."""
        self._sorted: Dict[str, List[Key]] = {}
        """Keys of each resource in order, kept while no object of it is created or deleted."""
        self._dependents: Dict[str, Set[Key]] = {}
        """Owner uid -> keys of the objects whose ownerReferences name it."""
        self._uids: Dict[str, Key] = {}
        """Key of the object with each uid (the garbage collector's owner lookups)."""
        # One history per resource, as kube-apiserver keeps one watch cache per resource: a burst of
        # Events does not push pod history out.
        self.logs: Dict[str, Deque[Event]] = {}
        self.log_size = max(1, log_size)
        self.compacted: Dict[str, int] = {}
        self.compacted_all = 0
        self.drop_generation = 0
        self.closed = False

    # ------------------------------------------------------------------ reads

    def get(self, resource: str, namespace: str, name: str) -> Optional[JsonObj]:
        """The stored object itself (callers copy before handing it out)."""
        return self.objects.get((resource, namespace, name))

    def sorted_keys(self, resource: str, namespace: Optional[str] = None) -> List[Key]:
        """Keys of ``resource`` (of one namespace if given) in (namespace, name) order; the order is
        kept between writes, so a read of many objects does not sort them each time."""
        with self.lock:
            keys = self._sorted.get(resource)
            if keys is None:
                keys = self._sorted[resource] = sorted(self._keys.get(resource, ()))
            if namespace is None:
                return keys
            return keys[bisect.bisect_left(keys, (resource, namespace, "")):
                        bisect.bisect_left(keys, (resource, namespace + "\0", ""))]

    def count(self, resource: str) -> int:
        return len(self._keys.get(resource, ()))

    def items(self, resource: str, namespace: Optional[str] = None) -> List[JsonObj]:
        with self.lock:
            return [self.objects[k] for k in self.sorted_keys(resource, namespace)]

    def page(self, resource: str, namespace: Optional[str], after: Optional[Tuple[str, str]],
             matches: Matcher, limit: int) -> Tuple[List[JsonObj], bool]:
        """Up to ``limit`` matching objects (all if ``limit`` is 0) after ``after`` (namespace, name)
        in order, and whether more follow: a page costs its own objects, not the resource's."""
        with self.lock:
            keys = self.sorted_keys(resource, namespace)
            start = bisect.bisect_right(keys, (resource,) + after) if after else 0
            found: List[JsonObj] = []
            for index in range(start, len(keys)):
                obj = self.objects[keys[index]]
                if not matches(obj):
                    continue
                if limit and len(found) == limit:
                    return found, True
                found.append(obj)
            return found, False

    def by_uid(self, uid: str) -> Optional[JsonObj]:
        with self.lock:
            key = self._uids.get(uid)
            obj = self.objects.get(key) if key is not None else None
            return obj if obj is not None and obj["metadata"].get("uid") == uid else None

    def dependents(self, uid: str) -> List[Key]:
        """Keys of the objects that name ``uid`` as an owner."""
        with self.lock:
            return list(self._dependents.get(uid, ()))

    def _owners(self, obj: JsonObj) -> List[str]:
        refs = obj["metadata"].get("ownerReferences")
        return [r["uid"] for r in refs if isinstance(r, dict) and isinstance(r.get("uid"), str)] \
            if isinstance(refs, list) else []

    def _index(self, key: Key, obj: JsonObj) -> None:
        for owner in self._owners(obj):
            self._dependents.setdefault(owner, set()).add(key)
        keys = self._keys.setdefault(key[0], set())
        if key not in keys:
            keys.add(key)
            self._sorted.pop(key[0], None)
        uid = obj["metadata"].get("uid")
        if uid:
            self._uids[uid] = key

    def _unindex(self, key: Key, obj: JsonObj, *, keep_key: bool = False) -> None:
        for owner in self._owners(obj):
            keys = self._dependents.get(owner)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._dependents[owner]
        if not keep_key and key in self._keys.get(key[0], ()):
            self._keys[key[0]].discard(key)
            self._sorted.pop(key[0], None)
        uid = obj["metadata"].get("uid")
        if uid and self._uids.get(uid) == key:
            del self._uids[uid]

    # ------------------------------------------------------------------ writes

    def _record(self, etype: str, resource: str, obj: JsonObj, old: Optional[JsonObj]) -> None:
        log = self.logs.setdefault(resource, deque())
        # Stored objects are never changed in place (a write stores a new dict; a delete records a
        # changed copy), so the event log holds them as they are.
        log.append(Event(self.rv, etype, resource, obj, old))
        while len(log) > self.log_size:
            self.compacted[resource] = log.popleft().rv
        self.changed.notify_all()

    def _bump(self, obj: JsonObj) -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)

    def create(self, resource: str, obj: JsonObj) -> JsonObj:
        with self.lock:
            meta = obj["metadata"]
            self._bump(obj)
            key = (resource, meta.get("namespace", ""), meta["name"])
            self.objects[key] = obj
            self._index(key, obj)
            self._record("ADDED", resource, obj, None)
            return obj

    def load(self, resource: str, objs: Iterable[JsonObj]) -> int:
        """Store many new objects at once, as a restore from a backup would: each gets its resource
        version and none an event, so a watch from before the load cannot resume across it (410
        Expired: it lists again). The cheap way to give a simulated cluster 100,000 objects; objects
        may share parts (stored objects are never changed in place). Returns how many were stored."""
        with self.lock:
            stored = 0
            for obj in objs:
                meta = obj["metadata"]
                self._bump(obj)
                key = (resource, meta.get("namespace", ""), meta["name"])
                self.objects[key] = obj
                self._index(key, obj)
                stored += 1
            self.compacted[resource] = self.rv
            self.changed.notify_all()
            return stored

    def update(self, resource: str, obj: JsonObj) -> JsonObj:
        """Store ``obj`` (a new dict) in place of the object with the same name."""
        with self.lock:
            meta = obj["metadata"]
            key = (resource, meta.get("namespace", ""), meta["name"])
            old = self.objects[key]
            self._bump(obj)
            self._unindex(key, old, keep_key=True)
            self.objects[key] = obj
            self._index(key, obj)
            self._record("MODIFIED", resource, obj, old)  # no longer stored: nothing changes it
            return obj

    def delete(self, resource: str, namespace: str, name: str) -> Optional[JsonObj]:
        with self.lock:
            old = self.objects.pop((resource, namespace, name), None)
            if old is None:
                return None
            self._unindex((resource, namespace, name), old)
            gone = dict(old, metadata=dict(old["metadata"]))
            self._bump(gone)
            self._record("DELETED", resource, gone, old)
            return gone

    def compact(self) -> None:
        """Forget every event: watches resuming from an older version get 410."""
        with self.lock:
            self.compacted_all = self.rv
            self.logs.clear()
            self.changed.notify_all()

    def drop_watches(self) -> None:
        with self.lock:
            self.drop_generation += 1
            self.changed.notify_all()

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.changed.notify_all()

    # ------------------------------------------------------------------ watch

    def events_after(self, resource: str, rv: int) -> List[Event]:
        log = self.logs.get(resource, deque())
        if rv < max(self.compacted_all, self.compacted.get(resource, 0)):
            raise Expired(rv, log[0].rv if log else self.rv)
        found: List[Event] = []
        for event in reversed(log):
            if event.rv <= rv:
                break
            found.append(event)
        found.reverse()
        return found


def translate(event: Event, matches: Matcher) -> Optional[Tuple[str, JsonObj]]:
    """The event a watcher with this filter sees, if any (type, object)."""
    if event.type == "ADDED":
        return ("ADDED", event.obj) if matches(event.obj) else None
    if event.type == "DELETED":
        return ("DELETED", event.obj) if matches(event.obj) else None
    now_matches = matches(event.obj)
    old_matched = event.old is not None and matches(event.old)
    if now_matches and old_matched:
        return ("MODIFIED", event.obj)
    if now_matches:
        return ("ADDED", event.obj)
    if old_matched:
        # as the watch cache: the object as it last matched, at the resource version of the change
        assert event.old is not None
        last = dict(event.old, metadata=dict(event.old["metadata"],
                                             resourceVersion=event.obj["metadata"]["resourceVersion"]))
        return ("DELETED", last)
    return None


class WatchStream:
    """Iterates ``(type, object)`` pairs for one watch request until its deadline or a drop.

    Yields ``("BOOKMARK", obj)`` when bookmarks are due, ``("ERROR", status)`` on expiry, and
    ``None`` as a keep-alive when nothing happened for a while (lets the writer notice a closed peer).
    """

    def __init__(self, store: Store, resource: str, matches: Matcher, since: Optional[int], deadline: float,
                 bookmark_kind: Optional[str], bookmark_seconds: float) -> None:
        self.store = store
        self.resource = resource
        self.matches = matches
        self.since = since
        self.deadline = deadline
        self.bookmark_kind = bookmark_kind
        self.bookmark_seconds = bookmark_seconds

    def __iter__(self) -> Iterator[Optional[Tuple[str, JsonObj]]]:
        store = self.store
        with store.lock:
            generation = store.drop_generation
            if self.since is None:
                initial = [json_copy(o) for o in store.items(self.resource) if self.matches(o)]
                pos = store.rv
            else:
                initial = []
                pos = self.since
        for obj in initial:
            yield ("ADDED", obj)
        next_bookmark = time.monotonic() + self.bookmark_seconds if self.bookmark_kind else float("inf")
        while True:
            batch: List[Tuple[str, JsonObj]] = []
            expired: Optional[Expired] = None
            finished = idle = bookmark = False
            with store.lock:
                while True:
                    if store.closed or store.drop_generation != generation or time.monotonic() >= self.deadline:
                        finished = True
                        break
                    try:
                        events = store.events_after(self.resource, pos)
                    except Expired as e:
                        expired = e
                        break
                    for event in events:
                        seen = translate(event, self.matches)
                        if seen is not None:
                            batch.append(seen)  # event objects are private snapshots, never changed
                    pos = max(pos, store.rv)
                    if batch:
                        break
                    if time.monotonic() >= next_bookmark:
                        bookmark = True
                        next_bookmark = time.monotonic() + self.bookmark_seconds
                        break
                    wake = min(self.deadline, next_bookmark)
                    idle_at = time.monotonic() + 1.0
                    if (not store.changed.wait(max(0.0, min(wake, idle_at) - time.monotonic()))
                            and idle_at <= time.monotonic() < wake):
                        idle = True
                        break
                current = pos
            if expired is not None:
                yield ("ERROR", expired_body(expired.requested, expired.oldest))
                return
            for item in batch:
                yield item
            if finished:
                return
            if bookmark:
                yield ("BOOKMARK", {"kind": self.bookmark_kind or "", "apiVersion": "v1",
                                    "metadata": {"resourceVersion": str(current)}})
            if idle:
                yield None
