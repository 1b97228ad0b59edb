"""The Kubernetes API's client calls: clients per kubeconfig, timeouts, and what an answer says.

Owns building one ``ApiClient`` per (kubeconfig, context) — never the client library's process-wide
default, never ``load_config()`` (it prints to stdout, the protocol channel) — and :meth:`KubeApi.call`,
one attempt of a client method, sent through the kit's HTTP door (:mod:`gahp.backends.http`: retries,
``Retry-After``, the error tree), with the client's exceptions read into the door's
:class:`~gahp.backends.http.Failure` (:func:`failure_of`). Every call asks for the raw response
(``_preload_content=False``) and parses the JSON itself, so the code reads plain dicts whether the
installed client builds old-style or pydantic models (kubernetes 30.1 to 37). Knows nothing about
pods, queues or jobs beyond the names it logs.
"""

from __future__ import annotations

import datetime
import email.utils
import functools
import importlib
import json
import logging
import os
import threading
import time
from typing import Any, Callable, Dict, Optional, Tuple

import urllib3

# The client is typed in some releases and not in others (30.1 has no stubs, 37 ships py.typed
# with untyped loaders); it is used only through this module, as Any.
k8s_client: Any = importlib.import_module("kubernetes.client")
k8s_config: Any = importlib.import_module("kubernetes.config")
ApiException: Any = importlib.import_module("kubernetes.client.exceptions").ApiException
InClusterConfigLoader: Any = importlib.import_module("kubernetes.config.incluster_config").InClusterConfigLoader

from gahp import __version__
from gahp.backends.http import Door, Failed, Failure, Service, translate as door_translate, truncate
from gahp.backends.k8s.settings import KubernetesSettings, QueueSettings
from gahp.errors import BackendError, ConfigError
from gahp.retry import Backoff

log = logging.getLogger(__name__)

JsonObj = Dict[str, Any]

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


def _status_message(e: Any) -> Tuple[str, str]:
    """(message, reason) of an API error, from its ``Status`` body when it has one."""
    body = getattr(e, "body", None)
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if isinstance(body, str) and body.strip().startswith("{"):
        try:
            status = json.loads(body)
        except ValueError:
            status = None
        if isinstance(status, dict) and status.get("kind") == "Status":
            return truncate(str(status.get("message") or e.reason or "")), str(status.get("reason") or "")
    return truncate(str(getattr(e, "reason", "") or f"HTTP {e.status}")), ""


def _retry_after(e: Any) -> Optional[float]:
    headers = getattr(e, "headers", None) or {}
    try:
        value = headers.get("Retry-After")
    except AttributeError:
        return None
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def failure_of(e: BaseException) -> Optional[Failure]:
    """What a client exception says the API answered (None: not an answer, nor the lack of one)."""
    if isinstance(e, ApiException):
        status = int(e.status or 0)
        message, reason = _status_message(e)
        lower = message.lower()
        return Failure(status, message, reason, _retry_after(e),
                       admission=status == 403 and ("quota" in lower or "priorityclass" in lower))
    if isinstance(e, (urllib3.exceptions.HTTPError, OSError)):
        unsent = isinstance(e, (urllib3.exceptions.NewConnectionError, urllib3.exceptions.ConnectTimeoutError)) or \
            isinstance(getattr(e, "reason", None), urllib3.exceptions.NewConnectionError)
        return Failure(0, str(e), sent=not unsent)
    return None


def translate(e: BaseException, what: str) -> Exception:
    """The :mod:`gahp.errors` exception for a client exception raised while doing ``what`` (a stream read
    after :meth:`KubeApi.call` returned, which the door does not see)."""
    failure = failure_of(e)
    if failure is not None:
        return door_translate(failure, what, API)
    if isinstance(e, ValueError):  # bodies rejected by the client's own models, bad JSON in a reply
        return BackendError(f"{what}: {truncate(str(e))}")
    return BackendError(f"{what}: unexpected client error {type(e).__name__}: {truncate(str(e))}")


class KubeApi:
    """One cluster (kubeconfig + context, or the in-cluster service account) and its requests."""

    def __init__(self, settings: KubernetesSettings, queue: QueueSettings, agent: str = "gahp") -> None:
        self.settings = settings
        self.agent = agent
        """Who calls (``gahp``, ``reap``): sent in the User-Agent, so an API server's audit log tells them apart."""
        self.kubeconfig = queue.kubeconfig
        self.context = queue.context
        self._lock = threading.Lock()
        self._core: Any = None
        self._groups: Dict[str, Any] = {}
        self._default_namespace = "default"
        self.door = Door(Service(API.name, settings.retries, Backoff(settings.backoff_s, settings.backoff_max_s),
                                 HINTS))
        """Every request goes through it: its counters are this cluster's requests, failures, seconds."""
        self.server_time: Optional[datetime.datetime] = None
        """The API server's clock at its last answer (its ``Date`` header), None before any: ages of
        objects it stamped are measured on this clock, not on the local one."""

    @property
    def description(self) -> str:
        if self.kubeconfig:
            return f"kubeconfig {self.kubeconfig}" + (f" context {self.context}" if self.context else "")
        return "in-cluster service account"

    def _connect(self) -> Any:
        """Build the client on first use; ConfigError when no cluster is usable."""
        with self._lock:
            if self._core is not None:
                return self._core
            configuration = k8s_client.Configuration()
            try:
                if self.kubeconfig:
                    if not os.path.exists(self.kubeconfig):
                        raise ConfigError(f"kubeconfig {self.kubeconfig} does not exist "
                                          "(PODGAHP_K8S_KUBECONFIG)")
                    contexts, current = k8s_config.list_kube_config_contexts(self.kubeconfig)
                    chosen = current
                    if self.context:
                        chosen = next((c for c in contexts if c.get("name") == self.context), None)
                        if chosen is None:
                            raise ConfigError(f"kubeconfig {self.kubeconfig} has no context "
                                              f"{self.context!r} (PODGAHP_K8S_CONTEXT)")
                    namespace = ((chosen or {}).get("context") or {}).get("namespace")
                    self._default_namespace = namespace or "default"
                    k8s_config.load_kube_config(config_file=self.kubeconfig, context=self.context,
                                                client_configuration=configuration,
                                                persist_config=False)
                elif os.environ.get("KUBERNETES_SERVICE_HOST"):
                    self._load_service_account(configuration)
                else:
                    raise ConfigError("no Kubernetes cluster is configured: set PODGAHP_K8S_KUBECONFIG "
                                      "to a kubeconfig file readable by the job owner, or run podgahp "
                                      "in a pod with a service account")
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
            api_client = k8s_client.ApiClient(configuration)
            api_client.user_agent = f"podgahp/{__version__} ({self.agent})"
            self._groups = {"authorization": k8s_client.AuthorizationV1Api(api_client)}
            self._core = k8s_client.CoreV1Api(api_client)
            return self._core

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

    def core(self) -> Any:
        return self._connect()

    def call(self, what: str, method: str, *args: Any, job_id: Optional[str] = None,
             stream: bool = False, retry: bool = True, read_timeout: Optional[float] = None,
             group: Optional[str] = None, answer: bool = True,
             decode: Optional[Callable[[bytes], Any]] = None, **kwargs: Any) -> Any:
        """Call ``CoreV1Api.<method>`` with bounded retries; returns parsed JSON (or the raw stream).

        ``what`` names the operation in errors and logs (``create pod ns/name``); ``group`` picks an
        API group other than the core one (``authorization``); ``answer=False``: the caller does not
        read the object the server sends back (a created Secret repeats every input file): {} is
        returned without parsing it; ``decode`` parses the answer (default: the whole JSON document;
        :func:`gahp.backends.k8s.view.decode_pod` keeps of a pod only what podgahp reads). Transient failures
        (429, 5xx, timeouts, connection errors) are retried with exponential back-off honouring
        ``Retry-After``; everything else is translated at once.
        """
        core = self._connect()
        api = self._groups[group] if group else core
        # The pydantic client (kubernetes 31+) validates every call's arguments into its models and
        # serialises them back: about 0.4 ms of CPU per request, a fifth of a submit's. podgahp
        # passes plain values and dicts (as it must for 30.1, whose methods take them as they are),
        # so it calls the method under the validation; the API server validates the objects.
        unchecked = getattr(getattr(type(api), method), "raw_function", None)
        fn: Callable[..., Any] = (functools.partial(unchecked, api) if unchecked is not None
                                  else getattr(api, method))
        timeout = (self.settings.connect_timeout_s, read_timeout or self.settings.request_timeout_s)

        def attempt() -> Any:
            try:
                response = fn(*args, _preload_content=False, _request_timeout=timeout, **kwargs)
                self._note_date(response)
                if stream:
                    return response
                try:
                    data = response.data
                finally:
                    response.release_conn()
            except Exception as e:  # noqa: BLE001 - the choke point: every client failure is read here
                failure = failure_of(e)
                if failure is None:
                    raise translate(e, what) from e
                raise Failed(failure) from e
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
        try:
            when = email.utils.parsedate_to_datetime(text) if isinstance(text, str) else None
        except (TypeError, ValueError):
            when = None
        if when is not None and when.tzinfo is not None:
            self.server_time = when

    def close(self) -> None:
        with self._lock:
            core, self._core = self._core, None
        if core is not None:
            try:
                core.api_client.close()
            except Exception:  # noqa: BLE001 - closing a pool must never fail a shutdown
                log.debug("closing the API client failed", exc_info=True)
