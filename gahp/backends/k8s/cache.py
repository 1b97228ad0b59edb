"""An in-memory copy of this CE's pods in one namespace, kept current by one LIST + WATCH.

Owns the watch thread: a label-selected LIST, then WATCH requests resumed from the last
``resourceVersion`` seen (bookmarks included); ``410 Expired`` (as an HTTP status or an in-stream
``ERROR`` event) makes it LIST again. Status polls read the copy, so the number of API requests
does not grow with the number of pilots polled. On API failures the copy keeps its last data and
the thread retries with back-off. Knows nothing about jobs: it stores pods by name, each reduced to
the fields podgahp reads (:func:`~gahp.backends.k8s.view.compact`), so memory stays small.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Collection, Dict, List, Optional, Tuple

from gahp.backends.k8s.api import KubeApi, translate
from gahp.backends.k8s.sharing import Canon
from gahp.backends.k8s.view import PodView, compact, decode_event, decode_pod_list
from gahp.errors import Expired, GahpError, TransientError
from gahp.retry import Backoff

log = logging.getLogger(__name__)

JsonObj = Dict[str, Any]

#: How long, and for how many pods, the last state of a deleted pod is remembered, so that a pilot
#: whose pod was preempted and deleted can still be reported with its outcome.
GONE_KEEP_SECONDS = 3600.0
GONE_KEEP_MAX = 10000
#: Pods per LIST request.
PAGE = 500


def resource_version(obj: JsonObj) -> Optional[str]:
    rv = (obj.get("metadata") or {}).get("resourceVersion")
    return str(rv) if rv is not None else None


def _newer(candidate: Optional[str], current: Optional[str]) -> bool:
    """True unless both versions are numbers and ``candidate`` is older (versions are opaque strings
    to clients, but every real and simulated server uses a counter; compare only when safe)."""
    if candidate is None or current is None:
        return True
    try:
        return int(candidate) >= int(current)
    except ValueError:
        return True


def _after(candidate: Optional[str], floor: Optional[str]) -> bool:
    """True unless both are numbers and ``candidate`` is not strictly after ``floor``."""
    if candidate is None or floor is None:
        return True
    try:
        return int(candidate) > int(floor)
    except ValueError:
        return True


class PodCache:
    """Pods of one namespace matching ``selector``, by name."""

    def __init__(self, api: KubeApi, namespace: str, selector: str, *, watch_timeout_s: int,
                 backoff_s: float, backoff_max_s: float, index_label: str = "",
                 labels: Optional[Collection[str]] = None, annotations: Optional[Collection[str]] = None) -> None:
        self.api = api
        self.namespace = namespace
        self.selector = selector
        self.watch_timeout_s = watch_timeout_s
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self._cond = threading.Condition()
        self._list_lock = threading.Lock()
        self._pods: Dict[str, JsonObj] = {}
        self._index_label = index_label
        self._index: Dict[str, Tuple[str, ...]] = {}
        """Value of ``index_label`` -> names of the pods that have it (a tuple: mostly one name)."""
        self._canon = Canon()
        """What the stored pods share (:mod:`gahp.backends.k8s.sharing`)."""
        self._kept = {"labels": labels, "annotations": annotations}
        """The label and annotation keys the copy keeps (None: all)."""
        self._gone: Dict[str, Tuple[float, JsonObj]] = {}
        self._rv: Optional[str] = None
        self._floor_rv: Optional[str] = None
        self._synced = False
        self._error: Optional[GahpError] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._response: Any = None
        self.lists = 0
        """Completed full LISTs (initial, after 410, and on demand)."""
        self.watches = 0
        """WATCH requests started."""

    # -- reading ---------------------------------------------------------------------------

    def start(self) -> None:
        with self._cond:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name=f"watch-{self.namespace}", daemon=True)
            self._thread.start()

    @property
    def synced(self) -> bool:
        return self._synced

    def wait_synced(self, timeout: float) -> None:
        """Block until the first LIST is in; TransientError carrying the last API error if not in time."""
        self.start()
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self._synced:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    detail = f": {self._error}" if self._error else ""
                    raise TransientError(f"pods of namespace {self.namespace} not listed yet{detail}")
                self._cond.wait(remaining)

    def get(self, name: str) -> Optional[JsonObj]:
        with self._cond:
            return self._pods.get(name)

    def gone(self, name: str) -> Optional[JsonObj]:
        """The last state seen of a pod that has been deleted (kept :data:`GONE_KEEP_SECONDS`)."""
        with self._cond:
            entry = self._gone.get(name)
            return entry[1] if entry else None

    def _compact(self, pod: JsonObj) -> JsonObj:
        return compact(pod, self._canon, **self._kept)

    def _bury(self, name: str, obj: JsonObj, compacted: bool = False) -> None:
        """Remember a deleted pod's last state; caller holds ``_cond``."""
        now = time.monotonic()
        self._gone[name] = (now, obj if compacted else self._compact(obj))
        if len(self._gone) > GONE_KEEP_MAX:
            for old in [n for n, (when, _) in self._gone.items() if now - when > GONE_KEEP_SECONDS]:
                del self._gone[old]
            while len(self._gone) > GONE_KEEP_MAX:
                del self._gone[next(iter(self._gone))]

    def pods(self) -> List[JsonObj]:
        with self._cond:
            return list(self._pods.values())

    def labelled(self, value: str) -> List[JsonObj]:
        """The pods whose ``index_label`` is ``value`` (an index: no scan of the namespace)."""
        with self._cond:
            return [self._pods[name] for name in self._index.get(value, ()) if name in self._pods]

    def _store(self, name: str, obj: JsonObj, compacted: bool = False) -> None:
        """Put a pod in the copy (only the fields podgahp reads) and the index; caller holds ``_cond``."""
        self._unindex(name)
        if not compacted:
            obj = self._compact(obj)
        self._pods[name] = obj
        if self._index_label:
            value = PodView(obj).label(self._index_label)
            if value:
                names = self._index.get(value, ())
                if name not in names:
                    self._index[value] = names + (name,)

    def _drop(self, name: str) -> None:
        self._unindex(name)
        self._pods.pop(name, None)

    def _unindex(self, name: str) -> None:
        old = self._pods.get(name)
        if old is None or not self._index_label:
            return
        value = PodView(old).label(self._index_label)
        names = tuple(n for n in self._index.get(value, ()) if n != name)
        if names:
            self._index[value] = names
        else:
            self._index.pop(value, None)

    def put(self, pod: JsonObj) -> None:
        """Record a pod the caller just got from the API (e.g. a create's response)."""
        name = (pod.get("metadata") or {}).get("name")
        if not name:
            return
        with self._cond:
            current = self._pods.get(name)
            if current is None or _newer(resource_version(pod), resource_version(current)):
                self._store(name, pod)

    # -- the watch thread --------------------------------------------------------------------

    def _list(self) -> None:
        """LIST the namespace, :data:`PAGE` pods a request (``limit``/``continue``: one snapshot, so an
        API server never builds one huge answer), and replace the copy; caller holds ``_list_lock``.
        Each page is reduced to what podgahp reads as it comes, so a LIST never holds all pods in full.
        A continue token that expired mid-way (410) starts the LIST again. A pod the copy got after
        the snapshot (a create's answer, a read) stays."""
        fresh: Dict[str, JsonObj] = {}
        token: Optional[str] = None
        while True:
            extra: Dict[str, Any] = {"_continue": token} if token else {}
            try:
                body = self.api.call(f"list pods in {self.namespace}", "list_namespaced_pod", self.namespace,
                                     label_selector=self.selector, limit=PAGE, decode=decode_pod_list, **extra)
            except Expired:
                if token is None:
                    raise
                log.info("pod list of namespace %s expired mid-way; listing again", self.namespace)
                fresh, token = {}, None
                continue
            for item in body.get("items") or []:
                name = (item.get("metadata") or {}).get("name") if isinstance(item, dict) else None
                if name:
                    fresh[name] = self._compact(item)
            body.pop("items", None)  # the full pods of this page are not kept
            meta = body.get("metadata") or {}
            token = meta.get("continue") or None
            if not token:
                break
        rv = meta.get("resourceVersion")
        listed_rv = str(rv) if rv is not None else None
        with self._cond:
            for name, obj in self._pods.items():
                if name in fresh:
                    if not _newer(resource_version(fresh[name]), resource_version(obj)):
                        fresh[name] = obj
                elif _after(resource_version(obj), listed_rv):
                    fresh[name] = obj  # newer than the snapshot: the watch from it will bring it again
                else:
                    self._bury(name, obj, compacted=True)
            self._pods, self._index = {}, {}
            for name, obj in fresh.items():
                self._store(name, obj, compacted=True)
            self._rv = listed_rv
            self._floor_rv = self._rv
            self._synced = True
            self._error = None
            self.lists += 1
            self._cond.notify_all()
        log.debug("listed %d pods in namespace %s at resourceVersion %s", len(fresh), self.namespace, rv)

    def _apply(self, event: JsonObj) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            code = obj.get("code")
            message = obj.get("message") or obj.get("reason") or "watch error"
            if code == 410 or obj.get("reason") in ("Expired", "Gone"):
                raise Expired(f"watch of namespace {self.namespace}: {message}")
            raise TransientError(f"watch of namespace {self.namespace}: {message} ({code})")
        rv = resource_version(obj)
        name = (obj.get("metadata") or {}).get("name")
        with self._cond:
            if rv is not None:
                self._rv = rv
            if kind == "BOOKMARK" or not name:
                return
            if kind == "DELETED":
                current = self._pods.get(name)
                if current is None or _newer(rv, resource_version(current)):
                    self._drop(name)
                    self._bury(name, obj)
            elif kind in ("ADDED", "MODIFIED"):
                current = self._pods.get(name)
                if current is None:
                    # A pod absent from the last LIST may appear only through a change after it.
                    if _after(rv, self._floor_rv):
                        self._store(name, obj)
                elif _newer(rv, resource_version(current)):
                    self._store(name, obj)

    def _watch(self) -> None:
        """One WATCH request from the current resource version, until the server ends it."""
        self.watches += 1
        response = self.api.call(f"watch pods in {self.namespace}", "list_namespaced_pod", self.namespace,
                                 label_selector=self.selector, watch=True, resource_version=self._rv,
                                 timeout_seconds=self.watch_timeout_s, allow_watch_bookmarks=True,
                                 stream=True, retry=False, read_timeout=self.watch_timeout_s + 30)
        self._response = response
        buffer = b""
        try:
            for chunk in response.stream(64 * 1024, decode_content=True):
                if self._stop.is_set():
                    return
                buffer += chunk
                if b"\n" not in chunk:
                    continue
                lines = buffer.split(b"\n")
                buffer = lines.pop()
                for line in lines:
                    if line.strip():
                        self._apply(decode_event(line))
            if buffer.strip():
                self._apply(decode_event(buffer))
        except GahpError:
            raise
        except Exception as e:  # noqa: BLE001 - stream read failures are translated like any call
            if self._stop.is_set():
                return
            raise translate(e, f"watch pods in {self.namespace}") from e
        finally:
            self._response = None
            try:
                response.release_conn()
            except Exception:  # noqa: BLE001 - a broken connection cannot be released cleanly
                pass

    def _run(self) -> None:
        backoff = Backoff(max(self.backoff_s, 0.1), self.backoff_max_s)
        failures = 0
        while not self._stop.is_set():
            delay = backoff.delay(failures + 1)
            try:
                if self._rv is None:
                    with self._list_lock:
                        self._list()
                self._watch()
                failures = 0
            except Expired as e:
                log.info("%s; listing again", e)
                with self._cond:
                    self._rv = None
            except GahpError as e:
                with self._cond:
                    self._error = e
                    self._cond.notify_all()
                log.warning("pod watch in namespace %s failed, retrying in %.1f s: %s", self.namespace,
                            delay, e)
                if self._stop.wait(delay):
                    return
                failures += 1
            except Exception:  # noqa: BLE001 - the thread must survive anything; the copy stays usable
                log.exception("pod watch in namespace %s failed unexpectedly", self.namespace)
                if self._stop.wait(max(delay, 1.0)):
                    return

    def close(self) -> None:
        self._stop.set()
        response = self._response
        if response is not None:
            for method in ("shutdown", "close"):
                try:
                    getattr(response, method)()
                except Exception:  # noqa: BLE001 - best effort to unblock the reading thread
                    pass
