"""The Kubernetes API's requests: a connection per kubeconfig, timeouts, and what an answer says.

Owns loading one client ``Configuration`` per (kubeconfig, context) with the official client's
loaders — never the client library's process-wide default, never ``load_config()`` (it prints to
stdout, the protocol channel) — and :meth:`KubeApi.call`, one attempt of a request, sent through the
kit's HTTP door (:mod:`gahp.backends.http`: retries, ``Retry-After``, the error tree), with the answer
read into the door's :class:`~gahp.backends.http.Failure` (:func:`failure_of`).

The requests go through the connection pool the client builds from the configuration (its TLS,
client certificates, proxy), with the credentials the configuration holds (refreshed by its
loaders), but not through the client's API classes: ``CoreV1Api`` and the models its methods name
are about 20 MB of a GAHP's memory once loaded (kubernetes 37), and they validate and serialise
every call's arguments again. podgahp sends plain JSON it built and parses the answers itself
(:data:`REQUESTS` names the few requests it makes), the same with every client release from 30.1 to 37.
Knows nothing about pods, queues or jobs beyond the names it logs.
"""

from __future__ import annotations

import datetime
import email.utils
import importlib
import json
import logging
import os
import re
import threading
import time
from typing import Any, Callable, Dict, Mapping, Optional, Tuple
from urllib.parse import quote, urlencode

import urllib3

# The client is typed in some releases and not in others (30.1 has no stubs, 37 ships py.typed
# with untyped loaders); it is used only through this module, as Any.
k8s_client: Any = importlib.import_module("kubernetes.client")
k8s_config: Any = importlib.import_module("kubernetes.config")
RESTClientObject: Any = importlib.import_module("kubernetes.client.rest").RESTClientObject
InClusterConfigLoader: Any = importlib.import_module("kubernetes.config.incluster_config").InClusterConfigLoader

try:
    from msgspec.json import Encoder as _Encoder
    _encode: Callable[[Any], bytes] = _Encoder().encode
except ImportError:  # pragma: no cover - an installation without msgspec
    def _encode(value: Any) -> bytes:
        return json.dumps(value, separators=(",", ":")).encode()

from gahp import __version__
from gahp.backends.http import Door, Failed, Failure, JsonObj, Service, translate as door_translate, truncate
from gahp.backends.k8s.settings import KubernetesSettings, QueueSettings
from gahp.core.errors import BackendError, ConfigError, TransientError
from gahp.core.retry import Backoff

log = logging.getLogger(__name__)


#: What an admin should fix, by status.
HINTS = {401: "the API refused our credentials: check the token or certificate in the kubeconfig",
         403: "grant this identity the RBAC rights it needs"}
#: The service as errors name it (retries are each KubeApi's, from the knobs).
API = Service("the Kubernetes API", 0, Backoff(1.0, 1.0), HINTS)
#: Connections kept alive per API server: above PODGAHP_WORKERS' default (50) plus the watch and
#: clean-up threads.
CONNECTIONS = 64
#: Seconds between two runs of the loaders' credential refresh hook. The client runs it before every
#: request, and each run re-applies the whole configuration (the API server's address, which makes
#: it re-read the proxy environment): about a quarter of a millisecond per request, a tenth of a
#: submit's CPU. The loaders refresh tokens minutes before they expire (kubeconfig exec plugins
#: five minutes ahead, the in-cluster token each minute), so a second's delay changes nothing.
CREDENTIAL_REFRESH_SECONDS = 1.0
#: Most bytes of an error answer read (a ``Status`` is a few hundred).
ERROR_BODY_MAX = 64 * 1024

_PODS = "/api/v1/namespaces/{namespace}/pods"
_SECRETS = "/api/v1/namespaces/{namespace}/secrets"
#: The requests podgahp makes, by the official client's names for them (``CoreV1Api`` and
#: ``AuthorizationV1Api`` methods): HTTP method, path, and the positional arguments the path's fields
#: (and ``body``, the request's JSON) come from, in the client's order. Keyword arguments are the
#: request's query, by the client's names (``label_selector`` is ``labelSelector``), except ``body``.
REQUESTS: Mapping[str, Tuple[str, str, Tuple[str, ...]]] = {
    "list_namespaced_pod": ("GET", _PODS, ("namespace",)),
    "create_namespaced_pod": ("POST", _PODS, ("namespace", "body")),
    "read_namespaced_pod": ("GET", _PODS + "/{name}", ("name", "namespace")),
    "patch_namespaced_pod": ("PATCH", _PODS + "/{name}", ("name", "namespace", "body")),
    "delete_namespaced_pod": ("DELETE", _PODS + "/{name}", ("name", "namespace")),
    "read_namespaced_pod_log": ("GET", _PODS + "/{name}/log", ("name", "namespace")),
    "create_namespaced_secret": ("POST", _SECRETS, ("namespace", "body")),
    "read_namespaced_secret": ("GET", _SECRETS + "/{name}", ("name", "namespace")),
    "replace_namespaced_secret": ("PUT", _SECRETS + "/{name}", ("name", "namespace", "body")),
    "patch_namespaced_secret": ("PATCH", _SECRETS + "/{name}", ("name", "namespace", "body")),
    "list_namespaced_event": ("GET", "/api/v1/namespaces/{namespace}/events", ("namespace",)),
    "list_node": ("GET", "/api/v1/nodes", ()),
    "create_self_subject_access_review": ("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                                          ("body",)),
}
#: Content types of a request body: an object patch of a built-in kind is a strategic merge.
_CONTENT_TYPES = {"PATCH": "application/strategic-merge-patch+json"}


def request_of(method: str, args: Tuple[Any, ...], kwargs: Mapping[str, Any]) -> Tuple[str, str, Any]:
    """(HTTP method, path with its query, body or None) of a call of :data:`REQUESTS` ``method``;
    ValueError for a request podgahp does not make or arguments that do not fit it."""
    try:
        verb, template, names = REQUESTS[method]
    except KeyError:
        raise ValueError(f"podgahp makes no request {method!r}") from None
    if len(args) != len(names):
        raise ValueError(f"{method} takes {', '.join(names) or 'no arguments'}, not {len(args)} arguments")
    values = dict(zip(names, args))
    body = values.pop("body", kwargs.get("body"))
    path = template.format(**{k: quote(str(v), safe="") for k, v in values.items()})
    query = [(_query_name(k), _query_value(v)) for k, v in kwargs.items() if k != "body" and v is not None]
    return verb, path + ("?" + urlencode(query) if query else ""), body


def _query_name(name: str) -> str:
    """The API's name of a query parameter from the client's (``label_selector`` -> ``labelSelector``)."""
    if name == "_continue":
        return "continue"
    first, *rest = name.split("_")
    return first + "".join(word.capitalize() for word in rest)


def _query_value(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


class ThrottledRefresh:
    """The configuration's credential refresh hook, run at most once per ``every`` seconds whoever
    calls. The kubeconfig loader's hook installs a new hook each time it runs: that one is kept as
    the hook to run next, and this object stays in place."""

    def __init__(self, configuration: Any, every: float = CREDENTIAL_REFRESH_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._hook: Callable[[Any], None] = configuration.refresh_api_key_hook
        self._every = every
        self._clock = clock
        self._last = float("-inf")
        self._lock = threading.Lock()
        configuration.refresh_api_key_hook = self

    def __call__(self, configuration: Any) -> None:
        with self._lock:
            now = self._clock()
            if now - self._last < self._every:
                return
            try:
                self._hook(configuration)
            finally:
                installed = configuration.refresh_api_key_hook
                if installed is not self and installed is not None:
                    self._hook = installed
                configuration.refresh_api_key_hook = self
            self._last = now


def _status_message(status: int, body: bytes, reason: str) -> Tuple[str, str]:
    """(message, reason word) of an error answer, from its ``Status`` body when it has one."""
    text = body.decode("utf-8", "replace").strip()
    if text.startswith("{"):
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and parsed.get("kind") == "Status":
            return truncate(str(parsed.get("message") or reason or "")), str(parsed.get("reason") or "")
    return truncate(reason or f"HTTP {status}"), ""


def _retry_after(headers: Any) -> Optional[float]:
    try:
        value = headers.get("Retry-After") if headers is not None else None
    except AttributeError:
        return None
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


_DENIED = re.compile(r'is forbidden: User "[^"]*" cannot ')
"""The words of an authorizer's refusal (RBAC, Node): a 403 that says otherwise ``<what> is forbidden:
<why>`` is an admission plugin's (a quota, a LimitRange, an unknown priority class, Pod Security)."""


def answer_failure(status: int, body: bytes, reason: str = "", headers: Any = None) -> Failure:
    """What an error answer of the API (status, body, HTTP reason phrase, headers) says."""
    message, word = _status_message(status, body, reason)
    lower = message.lower()
    return Failure(status, message, word, _retry_after(headers),
                   admission=status == 403 and " is forbidden: " in lower and not _DENIED.search(message))


def failure_of(e: BaseException) -> Optional[Failure]:
    """What a transport exception says: that no answer came (None: not a transport failure)."""
    if isinstance(e, (urllib3.exceptions.HTTPError, OSError)):
        unsent = isinstance(e, (urllib3.exceptions.NewConnectionError, urllib3.exceptions.ConnectTimeoutError)) or \
            isinstance(getattr(e, "reason", None), urllib3.exceptions.NewConnectionError)
        return Failure(0, str(e), sent=not unsent)
    return None


def translate(e: BaseException, what: str) -> Exception:
    """The :mod:`gahp.core.errors` exception for a client exception raised while doing ``what`` (a stream read
    after :meth:`KubeApi.call` returned, which the door does not see)."""
    failure = failure_of(e)
    if failure is not None:
        return door_translate(failure, what, API)
    if isinstance(e, ValueError):  # bad JSON in a reply
        return BackendError(f"{what}: {truncate(str(e))}")
    return BackendError(f"{what}: unexpected client error {type(e).__name__}: {truncate(str(e))}")


class Connection:
    """A loaded configuration and the connection pool the client builds from it (TLS, client
    certificates, proxy), with the headers every request carries."""

    def __init__(self, configuration: Any, agent: str) -> None:
        self.configuration = configuration
        self.host = str(configuration.host).rstrip("/")
        self.pool: Any = RESTClientObject(configuration).pool_manager
        self.agent = agent

    def headers(self, verb: str, body: bool) -> Dict[str, str]:
        """Accept, User-Agent, the credentials (the configuration's, refreshed by its loaders' hook),
        and the body's content type."""
        headers = {"Accept": "application/json", "User-Agent": self.agent}
        for auth in self.configuration.auth_settings().values():
            if auth.get("in") == "header" and auth.get("value"):
                headers[auth["key"]] = auth["value"]
        if body:
            headers["Content-Type"] = _CONTENT_TYPES.get(verb, "application/json")
        return headers

    def close(self) -> None:
        self.pool.clear()


class KubeApi:
    """One cluster (kubeconfig + context, or the in-cluster service account) and its requests."""

    def __init__(self, settings: KubernetesSettings, queue: QueueSettings, agent: str = "gahp") -> None:
        self.settings = settings
        self.agent = agent
        """Who calls (``gahp``, ``reap``): sent in the User-Agent, so an API server's audit log tells them apart."""
        self.kubeconfig = queue.kubeconfig
        self.context = queue.context
        self._lock = threading.Lock()
        self._connection: Optional[Connection] = None
        self._closed = threading.Event()
        self._default_namespace = "default"
        self.door = Door(Service(API.name, settings.retries, Backoff(settings.backoff_s, settings.backoff_max_s),
                                 HINTS, settings.throttle_wait_s), sleep=self._pause)
        """Every request goes through it: its counters are this cluster's requests, failures, seconds."""
        self.server_time: Optional[datetime.datetime] = None
        """The API server's clock at its last answer (its ``Date`` header), None before any: ages of
        objects it stamped are measured on this clock, not on the local one."""
        self._date_text: Optional[str] = None
        """That ``Date`` header as sent (answers within one second repeat it: read once)."""

    @property
    def description(self) -> str:
        if self.kubeconfig:
            return f"kubeconfig {self.kubeconfig}" + (f" context {self.context}" if self.context else "")
        return "in-cluster service account"

    def _pause(self, seconds: float) -> None:
        """The wait between two attempts of a request; cut short by :meth:`close`."""
        self._closed.wait(seconds)

    def _connect(self) -> Connection:
        """Load the configuration on first use; ConfigError when no cluster is usable, TransientError
        once closed (a thread still at work then makes no new connection)."""
        with self._lock:
            if self._closed.is_set():
                raise TransientError(f"{self.description}: the client is closed")
            if self._connection is not None:
                return self._connection
            configuration = k8s_client.Configuration()
            try:
                self._load(configuration)
            except ConfigError:
                raise
            except Exception as e:  # noqa: BLE001 - the loaders raise many kinds (ConfigException, YAML, OS)
                raise ConfigError(f"{self.description} cannot be loaded: {truncate(str(e))}") from e
            self._refuse_plain_http(configuration)
            if configuration.refresh_api_key_hook is not None:
                ThrottledRefresh(configuration)
            configuration.retries = False  # our own loop retries; urllib3 must not retry behind it
            # One kept-alive connection for every thread that may call at once (workers, watches,
            # clean-up): the client's default (5 per CPU) is below PODGAHP_WORKERS on small machines,
            # and a connection past the pool's size is closed after each request (a TLS handshake
            # per request). Connections are opened only as they are needed.
            configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize or 0,
                                                        CONNECTIONS)
            self._connection = Connection(configuration, f"podgahp/{__version__} ({self.agent})")
            return self._connection

    def _load(self, configuration: Any) -> None:
        """The cluster and credentials into ``configuration``: from the kubeconfig, else in-cluster."""
        if self.kubeconfig:
            self._load_kubeconfig(self.kubeconfig, configuration)
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            self._load_service_account(configuration)
        else:
            raise ConfigError("no Kubernetes cluster is configured: set PODGAHP_K8S_KUBECONFIG "
                              "to a kubeconfig file readable by the job owner, or run podgahp "
                              "in a pod with a service account")

    def _load_kubeconfig(self, kubeconfig: str, configuration: Any) -> None:
        """The kubeconfig's context (``self.context``, else its current one), and its namespace as the
        default."""
        if not os.path.exists(kubeconfig):
            raise ConfigError(f"kubeconfig {kubeconfig} does not exist (PODGAHP_K8S_KUBECONFIG)")
        contexts, chosen = k8s_config.list_kube_config_contexts(kubeconfig)
        if self.context:
            chosen = next((c for c in contexts if c.get("name") == self.context), None)
            if chosen is None:
                raise ConfigError(f"kubeconfig {kubeconfig} has no context "
                                  f"{self.context!r} (PODGAHP_K8S_CONTEXT)")
        namespace = ((chosen or {}).get("context") or {}).get("namespace")
        self._default_namespace = namespace or "default"
        k8s_config.load_kube_config(config_file=kubeconfig, context=self.context,
                                    client_configuration=configuration, persist_config=False)

    def _load_service_account(self, configuration: Any) -> None:
        """The in-cluster identity: token (re-read as the kubelet rotates it), CA and namespace
        from the service-account directory, the API server from ``KUBERNETES_SERVICE_HOST``/``_PORT``."""
        directory = self.settings.service_account_dir
        token, ca = os.path.join(directory, "token"), os.path.join(directory, "ca.crt")
        for path in (token, ca):
            if not os.path.isfile(path):
                raise ConfigError(f"in-cluster service account: {path} does not exist "
                                  "(PODGAHP_K8S_SERVICE_ACCOUNT_DIR; or set PODGAHP_K8S_KUBECONFIG)")
        InClusterConfigLoader(token_filename=token, cert_filename=ca).load_and_set(configuration)
        try:
            with open(os.path.join(directory, "namespace"), encoding="utf-8") as f:
                self._default_namespace = f.read(256).strip() or "default"
        except OSError:
            pass

    def _refuse_plain_http(self, configuration: Any) -> None:
        """A credential never goes over plain HTTP unless the admin says so (client-go refuses it)."""
        if not str(configuration.host).lower().startswith("http://") or self.settings.allow_insecure_http:
            return
        credential = configuration.api_key or configuration.cert_file or configuration.username \
            or configuration.refresh_api_key_hook is not None
        if credential:
            raise ConfigError(f"{self.description}: the API server {configuration.host} is plain HTTP and "
                              "a credential would be sent unencrypted; use https, or set "
                              "PODGAHP_K8S_ALLOW_INSECURE_HTTP = True (test clusters only)")

    def namespace(self, queue: QueueSettings) -> str:
        """The queue's namespace: its knob, else the kubeconfig context's namespace, else default."""
        if queue.namespace:
            return queue.namespace
        self._connect()
        return self._default_namespace

    def configuration(self) -> Any:
        """The client configuration this cluster's requests use (loaded on first use)."""
        return self._connect().configuration

    def call(self, what: str, method: str, *args: Any, job_id: Optional[str] = None,
             stream: bool = False, retry: bool = True, read_timeout: Optional[float] = None,
             answer: bool = True, decode: Optional[Callable[[bytes], Any]] = None, **kwargs: Any) -> Any:
        """Make the request the client calls ``method`` (:data:`REQUESTS`) with bounded retries; returns
        the answer's parsed JSON (or the response, to read as a stream).

        ``what`` names the operation in errors and logs (``create pod ns/name``); ``answer=False``: the
        caller does not read the object the server sends back (a created Secret repeats every input
        file): {} is returned without parsing it; ``decode`` parses the answer (default: the whole JSON
        document; :func:`gahp.backends.k8s.view.decode_pod` keeps of a pod only what podgahp reads).
        Transient failures (429, 5xx, timeouts, connection errors) are retried with exponential back-off
        honouring ``Retry-After``; everything else is translated at once.
        """
        connection = self._connect()
        verb, path, body = request_of(method, args, kwargs)
        url = connection.host + path
        data_out = _encode(body) if body is not None else None
        timeout = urllib3.Timeout(connect=self.settings.connect_timeout_s,
                                  read=read_timeout or self.settings.request_timeout_s)

        def attempt() -> Any:
            try:
                response = connection.pool.request(verb, url, body=data_out, timeout=timeout, retries=False,
                                                   headers=connection.headers(verb, data_out is not None),
                                                   preload_content=False)
                self._note_date(response)
                if 200 <= response.status < 300 and stream:
                    return response
                try:
                    if response.status < 300:
                        data = response.data
                    else:
                        data = response.read(ERROR_BODY_MAX)
                        if len(data) >= ERROR_BODY_MAX:
                            response.close()  # the rest is not read: the connection cannot serve another
                finally:
                    response.release_conn()
            except Exception as e:  # noqa: BLE001 - the choke point: every transport failure is read here
                failure = failure_of(e)
                if failure is None:
                    raise translate(e, what) from e
                raise Failed(failure) from e
            if response.status >= 300:
                raise Failed(answer_failure(response.status, data, response.reason or "", response.headers))
            if not data or not answer:
                return {}
            try:
                return (decode or json.loads)(data)
            except ValueError as e:
                raise translate(e, what) from e

        # Every call is idempotent: pods and Secrets have names fixed in advance (a repeated create is
        # a 409 the caller reads), deletes and patches name their object.
        return self.door.call(what, attempt, retry=retry, job_id=job_id)

    @property
    def requests(self) -> int:
        """API requests made (every attempt counts), for logs, tests and the health figures."""
        return self.door.requests

    @property
    def errors(self) -> int:
        """Requests that failed (an error answer or no answer)."""
        return self.door.errors

    @property
    def seconds(self) -> float:
        """Time spent waiting for answers (until the headers, for a stream)."""
        return self.door.seconds

    def _note_date(self, response: Any) -> None:
        headers = getattr(response, "headers", None)
        text = headers.get("Date") if headers is not None else None
        if text is not None and text == self._date_text:
            return  # the same second as the answer before: already read
        self._date_text = text
        try:
            when = email.utils.parsedate_to_datetime(text) if isinstance(text, str) else None
        except (TypeError, ValueError):
            when = None
        if when is not None and when.tzinfo is not None:
            self.server_time = when

    def close(self) -> None:
        """Close the connections; a request's wait before its next attempt ends at once, and no
        request is made after."""
        self._closed.set()
        with self._lock:
            connection, self._connection = self._connection, None
        if connection is not None:
            try:
                connection.close()
            except Exception:  # noqa: BLE001 - closing a pool must never fail a shutdown
                log.debug("closing the connection pool failed", exc_info=True)
