"""An in-memory copy of this CE's pods in one namespace, kept current by one LIST + WATCH.

Owns the watch thread: a label-selected LIST, then WATCH requests resumed from the last
``resourceVersion`` seen (bookmarks included); ``410 Expired`` (as an HTTP status or an in-stream
``ERROR`` event) makes it LIST again. Status polls read the copy, so the number of API requests
does not grow with the number of pilots polled. On API failures the copy keeps its last data and
the thread reconnects by the kit's one reconnect loop and back-off (:func:`gahp.core.retry.reconnected`);
a stream read that fails is translated into the error tree as any request is (:func:`.api.translate`).
Knows nothing about jobs: it stores pods by name, each as the flat record of the fields podgahp reads (:class:`~gahp.backends.k8s.view.PodRecord`), so memory stays small.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Collection, Dict, Iterator, List, Optional, Tuple, Union

from gahp.backends.http import JsonObj
from gahp.backends.k8s.api import KubeApi, translate
from gahp.backends.k8s.sharing import Canon
from gahp.backends.k8s.view import PodRecord, continue_token, decode_event, decode_pod, decode_pod_list
from gahp.core.errors import Expired, GahpError, InvalidJob, NotFound, TransientError
from gahp.core.retry import Backoff, reconnected

log = logging.getLogger(__name__)


#: How long, and for how many pods, the last state of a deleted pod is remembered, so that a pilot
#: whose pod was preempted and deleted can still be reported with its outcome.
GONE_KEEP_SECONDS = 3600.0
GONE_KEEP_MAX = 10000
#: Pods per LIST request.
PAGE = 500
#: Longest wait in :meth:`PodCache.close` for the watch thread to end (a LIST under way ends by its
#: request timeout at the latest; the thread is a daemon, so a process exits whatever it does).
CLOSE_WAIT_SECONDS = 10.0


def resource_version(obj: JsonObj) -> Optional[str]:
    rv = (obj.get("metadata") or {}).get("resourceVersion")
    return str(rv) if rv is not None else None


def _names(entry: Union[str, Tuple[str, ...], None]) -> Tuple[str, ...]:
    """The names of an entry of the index (one name is kept as the name alone)."""
    if entry is None:
        return ()
    return (entry,) if isinstance(entry, str) else entry


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
        self._pods: Dict[str, PodRecord] = {}
        self._index_label = index_label
        self._index: Dict[str, Union[str, Tuple[str, ...]]] = {}
        """Value of ``index_label`` -> the name of the pod that has it, or a tuple of names when several do."""
        self._canon = Canon()
        """What the stored pods share (:mod:`gahp.backends.k8s.sharing`)."""
        self._kept = {"labels": labels, "annotations": annotations}
        """The label and annotation keys the copy keeps (None: all)."""
        self._gone: Dict[str, Tuple[float, PodRecord]] = {}
        self._rv: Optional[str] = None
        self._floor_rv: Optional[str] = None
        self._synced = False
        self._error: Optional[Exception] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._response: Any = None
        self.lists = 0
        """Completed full LISTs (initial, after 410, and on demand)."""
        self.watches = 0
        """WATCH requests started."""

    # -- reading ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start the watch thread (once; never after :meth:`close`)."""
        with self._cond:
            if self._thread is not None or self._stop.is_set():
                return
            self._thread = threading.Thread(target=self._run, name=f"watch-{self.namespace}", daemon=True)
            self._thread.start()

    @property
    def synced(self) -> bool:
        return self._synced

    @property
    def watching(self) -> bool:
        """Whether a WATCH is open (the API server has taken it and its events are being read)."""
        return self._response is not None

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

    def get(self, name: str) -> Optional[PodRecord]:
        with self._cond:
            return self._pods.get(name)

    def gone(self, name: str) -> Optional[PodRecord]:
        """The last state seen of a pod that has been deleted (kept :data:`GONE_KEEP_SECONDS`)."""
        with self._cond:
            entry = self._gone.get(name)
            return entry[1] if entry else None

    def _record(self, pod: JsonObj) -> PodRecord:
        return PodRecord.of(pod, self._canon, **self._kept)

    def _bury(self, name: str, record: PodRecord) -> None:
        """Remember a deleted pod's last state; caller holds ``_cond``."""
        now = time.monotonic()
        self._gone[name] = (now, record)
        if len(self._gone) > GONE_KEEP_MAX:
            for old in [n for n, (when, _) in self._gone.items() if now - when > GONE_KEEP_SECONDS]:
                del self._gone[old]
            while len(self._gone) > GONE_KEEP_MAX:
                del self._gone[next(iter(self._gone))]

    def pods(self) -> List[PodRecord]:
        with self._cond:
            return list(self._pods.values())

    def labelled(self, value: str) -> List[PodRecord]:
        """The pods whose ``index_label`` is ``value`` (an index: no scan of the namespace)."""
        with self._cond:
            return [self._pods[name] for name in _names(self._index.get(value)) if name in self._pods]

    def _store(self, record: PodRecord) -> None:
        """Put a pod in the copy and the index; caller holds ``_cond``."""
        name = record.name
        self._unindex(name)
        self._pods[name] = record
        if self._index_label:
            value = record.label(self._index_label)
            if value:
                names = _names(self._index.get(value))
                if name not in names:
                    self._index[value] = names + (name,) if names else name

    def _drop(self, name: str) -> None:
        self._unindex(name)
        self._pods.pop(name, None)

    def _unindex(self, name: str) -> None:
        old = self._pods.get(name)
        if old is None or not self._index_label:
            return
        value = old.label(self._index_label)
        names = tuple(n for n in _names(self._index.get(value)) if n != name)
        if names:
            self._index[value] = names if len(names) > 1 else names[0]
        else:
            self._index.pop(value, None)

    def put(self, pod: JsonObj) -> Optional[PodRecord]:
        """Record a pod the caller just got from the API (e.g. a create's response); the copy's record
        of it (the one it had when that is newer), None for a pod without a name."""
        record = self._record(pod)
        if not record.name:
            return None
        with self._cond:
            current = self._pods.get(record.name)
            if current is None or _newer(record.resource_version, current.resource_version):
                self._store(record)
                return record
            return current

    def read(self, name: str, job_id: str, refusal: Callable[[JsonObj], Optional[str]]) -> Optional[PodRecord]:
        """One GET of a pod the copy lacks (a miss, or a copy still being listed), into the copy; the
        copy's record of it, None when there is no such pod. A pod ``refusal`` finds a reason against
        (not this user's) is InvalidJob naming it, and stays out of the copy."""
        try:
            pod: JsonObj = self.api.call(f"read pod {self.namespace}/{name}", "read_namespaced_pod", name,
                                         self.namespace, job_id=job_id, decode=decode_pod)
        except NotFound:
            return None
        why = refusal(pod)
        if why is not None:
            raise InvalidJob(f"{why}; this GAHP acts only on the pods it created for its user")
        return self.put(pod)

    # -- the watch thread --------------------------------------------------------------------

    def _list(self) -> None:
        """LIST the namespace, :data:`PAGE` pods a request (``limit``/``continue``: one snapshot, so an
        API server never builds one huge answer), and replace the copy; caller holds ``_list_lock``.
        Each page is reduced to what podgahp reads as it comes, so a LIST never holds all pods in full.
        A continue token that expired mid-way (410) starts the LIST again. A pod the copy got after
        the snapshot (a create's answer, a read) stays."""
        fresh, rv = self._snapshot()
        listed_rv = str(rv) if rv is not None else None
        with self._cond:
            self._replace(fresh, listed_rv)
        log.debug("listed %d pods in namespace %s at resourceVersion %s", len(fresh), self.namespace, rv)

    def _snapshot(self) -> Tuple[Dict[str, PodRecord], Any]:
        """Every pod of one LIST, and the LIST's resource version; listed again when it expires mid-way."""
        while True:
            fresh: Dict[str, PodRecord] = {}
            meta: JsonObj = {}
            pages = 0
            try:
                for body in self._pages():
                    pages += 1
                    for item in body.get("items") or []:
                        if isinstance(item, dict):
                            record = self._record(item)
                            if record.name:
                                fresh[record.name] = record
                    meta = body.get("metadata") or {}
                return fresh, meta.get("resourceVersion")
            except Expired:
                if not pages:
                    raise
                log.info("pod list of namespace %s expired mid-way; listing again", self.namespace)

    def _replace(self, fresh: Dict[str, PodRecord], listed_rv: Optional[str]) -> None:
        """The copy becomes a LIST's pods, keeping what the copy got after the snapshot; caller holds
        ``_cond``."""
        for name, obj in self._pods.items():
            if name in fresh:
                if not _newer(fresh[name].resource_version, obj.resource_version):
                    fresh[name] = obj
            elif _after(obj.resource_version, listed_rv):
                fresh[name] = obj  # newer than the snapshot: the watch from it will bring it again
            else:
                self._bury(name, obj)
        self._pods, self._index = {}, {}
        for obj in fresh.values():
            self._store(obj)
        self._rv = listed_rv
        self._floor_rv = self._rv
        self._synced = True
        self._error = None
        self.lists += 1
        self._cond.notify_all()

    def _page(self, token: Optional[str]) -> bytes:
        """One page of a LIST, as the API server sent it."""
        extra: Dict[str, Any] = {"_continue": token} if token else {}
        page = self.api.call(f"list pods in {self.namespace}", "list_namespaced_pod", self.namespace,
                             label_selector=self.selector, limit=PAGE, decode=bytes, **extra)
        return page if isinstance(page, bytes) else b"{}"

    def _parse(self, page: bytes) -> JsonObj:
        try:
            return decode_pod_list(page)
        except ValueError as e:
            raise translate(e, f"list pods in {self.namespace}") from e

    def _pages(self) -> Iterator[JsonObj]:
        """The pages of one LIST, each parsed (:func:`~gahp.backends.k8s.view.decode_pod_list`). Where
        the next page's token can be read without parsing the page (msgspec), the next page is asked
        for before this one is parsed, so the API server builds it while this process reads this one."""
        page = self._page(None)
        if continue_token(page, None) is None:  # no fast reader of the token: one page after the other
            while True:
                body = self._parse(page)
                yield body
                token = (body.get("metadata") or {}).get("continue") or None
                if not token:
                    return
                page = self._page(str(token))
        with ThreadPoolExecutor(1, thread_name_prefix=f"list-{self.namespace}") as ahead:
            while True:
                token = continue_token(page, "")
                following = ahead.submit(self._page, token) if token else None
                yield self._parse(page)
                if following is None:
                    return
                page = following.result()

    def _apply(self, event: JsonObj) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            raise self._watch_error(obj)
        rv = resource_version(obj)
        # Built before the lock is taken: status reads wait for none of it.
        record = self._record(obj) if kind in ("ADDED", "MODIFIED", "DELETED") else None
        with self._cond:
            if rv is not None:
                self._rv = rv
            if record is not None and record.name:
                self._merge(str(kind), rv, record)

    def _watch_error(self, obj: JsonObj) -> GahpError:
        """What a watch's ERROR event means: the resource version expired (410), or a passing fault."""
        code = obj.get("code")
        message = obj.get("message") or obj.get("reason") or "watch error"
        if code == 410 or obj.get("reason") in ("Expired", "Gone"):
            return Expired(f"watch of namespace {self.namespace}: {message}")
        return TransientError(f"watch of namespace {self.namespace}: {message} ({code})")

    def _merge(self, kind: str, rv: Optional[str], record: PodRecord) -> None:
        """A watch event's pod into the copy, when it is newer than the copy's; caller holds ``_cond``."""
        name = record.name
        current = self._pods.get(name)
        if kind == "DELETED":
            if current is None or _newer(rv, current.resource_version):
                self._drop(name)
                self._bury(name, record)
        elif current is None:
            # A pod absent from the last LIST may appear only through a change after it.
            if _after(rv, self._floor_rv):
                self._store(record)
        elif _newer(rv, current.resource_version):
            self._store(record)

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
            if self._stop.is_set():  # closed while the request was under way: close() missed this response
                return
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

    def _session(self) -> None:
        """A LIST when the copy has no version to resume from, then one WATCH until the server ends it;
        an expired version (410) starts over with a LIST, at once."""
        try:
            if self._rv is None:
                with self._list_lock:
                    self._list()
            if not self._stop.is_set():
                self._watch()
        except Expired as e:
            log.info("%s; listing again", e)
            with self._cond:
                self._rv = None

    def _failed(self, error: Exception) -> None:
        """The copy keeps its data; a reader waiting for the first LIST learns why it is late."""
        with self._cond:
            self._error = error
            self._cond.notify_all()

    def _run(self) -> None:
        reconnected(self._session, what=f"pod watch in namespace {self.namespace}", stop=self._stop,
                    backoff=Backoff(max(self.backoff_s, 0.1), self.backoff_max_s), failed=self._failed)

    def close(self, timeout: float = CLOSE_WAIT_SECONDS) -> None:
        """Stop the watch thread and wait for it to end (at most ``timeout`` seconds): once closed, the
        copy makes no request. A request under way is cut short where it can be (an open WATCH), else
        ends by its own timeout; the caller closes the client first so that no retry waits."""
        self._stop.set()
        response = self._response
        if response is not None:
            for method in ("shutdown", "close"):
                try:
                    getattr(response, method)()
                except Exception:  # noqa: BLE001 - best effort to unblock the reading thread
                    pass
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            if thread.is_alive():
                log.warning("the pod watch of namespace %s did not end within %.0f s of its close",
                            self.namespace, timeout)
