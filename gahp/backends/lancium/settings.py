"""Every ``PODGAHP_LANCIUM_*`` knob of the Lancium backend, read once into typed settings."""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass, field
from typing import Optional, Union

from gahp.rules.blackhole import GuardSettings
from gahp.core.config import Knobs
from gahp.core.errors import ConfigError

#: QOS values the API accepts (lancium-openapi.json ``job_fields.qos``).
QOS_LEVELS = ("high", "medium", "low", "best-effort")

#: ``max_run_time`` limits in seconds (``job_fields.max_run_time``: 600 .. 30 days).
MIN_RUN_TIME_S = 600
MAX_RUN_TIME_S = 2592000


@dataclass(frozen=True)
class ClientSettings:
    """How to reach the Lancium API; built by the backend from its knobs."""

    base_url: str
    """``PODGAHP_LANCIUM_BASE_URL``: API root, e.g. ``https://portal.lancium.com/api/v1``."""
    api_key_file: str
    """``PODGAHP_LANCIUM_API_KEY_FILE``: file holding the API key, mode 0600."""
    timeout_s: float = 30.0
    """``PODGAHP_LANCIUM_REQUEST_TIMEOUT_SECONDS``: connect and read timeout of one HTTP request."""
    retries: int = 3
    """``PODGAHP_LANCIUM_RETRIES``: extra attempts after a transport error, 429 or 5xx."""
    backoff_s: float = 1.0
    """``PODGAHP_LANCIUM_BACKOFF_SECONDS``: first retry delay, doubled per attempt."""
    backoff_max_s: float = 30.0
    """``PODGAHP_LANCIUM_BACKOFF_MAX_SECONDS``: longest retry delay (also caps ``Retry-After``)."""
    token_margin_s: float = 120.0
    """``PODGAHP_LANCIUM_TOKEN_REFRESH_MARGIN_SECONDS``: fetch a new token this long before ``exp``."""
    verify: Union[bool, str] = True
    """``PODGAHP_LANCIUM_CA_FILE``: CA bundle for TLS, or True for the system default."""


@dataclass(frozen=True)
class SpecDefaults:
    """Knob values the job fields fall back to when the route says nothing."""

    image: str
    """``PODGAHP_LANCIUM_IMAGE``."""
    qos: str
    """``PODGAHP_LANCIUM_QOS``."""
    max_run_time_s: int
    """``PODGAHP_LANCIUM_MAX_RUN_TIME_SECONDS``: used when the pilot has no ``BatchRuntime``."""
    gpu_type: Optional[str]
    """``PODGAHP_LANCIUM_GPU_TYPE``: GPU type id for pilots that request GPUs."""
    account: Optional[str]
    """``PODGAHP_LANCIUM_ACCOUNT``: passed to Lancium's invoice."""


@dataclass(frozen=True)
class LanciumSettings:
    """Every ``PODGAHP_LANCIUM_*`` knob, read once by :meth:`LanciumBackend.from_knobs`."""

    client: ClientSettings
    """HTTP: base URL, key file, timeouts, retries, back-off, token refresh margin, CA file."""
    spec: SpecDefaults
    """Job defaults: image, QOS, run time, GPU type, account."""
    ce_name: str
    """``PODGAHP_LANCIUM_CE_NAME``: this CE in its jobs' names and records; default ``$(FULL_HOSTNAME)``."""
    list_max_age_s: float = 30.0
    """``PODGAHP_LANCIUM_LIST_MAX_AGE_SECONDS``: a ``GET /jobs`` result is reused this long."""
    list_stale_s: float = 600.0
    """``PODGAHP_LANCIUM_LIST_STALE_SECONDS``: after failed refreshes, last good list served this long."""
    output_wait_s: float = 600.0
    """``PODGAHP_LANCIUM_OUTPUT_WAIT_SECONDS``: how long a finished job's outputs are awaited."""
    max_input_bytes: int = 100 * 1024 * 1024
    """``PODGAHP_LANCIUM_MAX_INPUT_BYTES``: total size of the files uploaded with one pilot."""
    upload_chunk_bytes: int = 32 * 1024 * 1024
    """``PODGAHP_LANCIUM_UPLOAD_CHUNK_BYTES``: size of one upload ``PATCH`` (32 MB advised)."""
    cleanup_after_s: float = 86400.0
    """``PODGAHP_LANCIUM_CLEANUP_AFTER_SECONDS``: delete our finished/error/created jobs after this; 0 = never."""
    cleanup_per_cycle: int = 20
    """``PODGAHP_LANCIUM_CLEANUP_MAX_PER_CYCLE``: deletions per list refresh at most."""
    cancel_retry_max_s: float = 3600.0
    """``PODGAHP_LANCIUM_CANCEL_RETRY_MAX_SECONDS``: how long a cancel Lancium did not answer is retried
    in the background by one GAHP (the next GAHP of the user takes it up again)."""
    blackhole: GuardSettings = field(default_factory=lambda: GuardSettings.from_knobs(Knobs({})))
    """``PODGAHP_BLACKHOLE_*``: when Lancium is closed as a black hole (gahp.rules.blackhole); one queue, ``lancium``."""

    @classmethod
    def from_knobs(cls, knobs: Knobs) -> LanciumSettings:
        """All Lancium knobs with their defaults; :class:`ConfigError` names a bad knob and value."""
        ca_file = knobs.optional("PODGAHP_LANCIUM_CA_FILE")
        verify: Union[bool, str] = True
        if ca_file:
            if not os.path.isfile(ca_file):
                raise ConfigError(f"PODGAHP_LANCIUM_CA_FILE = {ca_file!r} is not a readable file "
                                  f"(expected a PEM CA bundle, or leave it unset for the system CAs)")
            verify = ca_file
        margin = knobs.number("PODGAHP_LANCIUM_TOKEN_REFRESH_MARGIN_SECONDS", 120.0, minimum=0, maximum=3000)
        backoff = knobs.number("PODGAHP_LANCIUM_BACKOFF_SECONDS", 1.0, minimum=0, maximum=600)
        client = ClientSettings(
            base_url=_url(knobs, "PODGAHP_LANCIUM_BASE_URL", "https://portal.lancium.com/api/v1"),
            api_key_file=os.path.expanduser(knobs.string("PODGAHP_LANCIUM_API_KEY_FILE", "~/.lancium/api_key")),
            timeout_s=knobs.number("PODGAHP_LANCIUM_REQUEST_TIMEOUT_SECONDS", 30.0, minimum=0.1, maximum=600),
            retries=knobs.integer("PODGAHP_LANCIUM_RETRIES", 3, minimum=0, maximum=20),
            backoff_s=backoff,
            backoff_max_s=knobs.number("PODGAHP_LANCIUM_BACKOFF_MAX_SECONDS", 30.0, minimum=backoff, maximum=3600),
            token_margin_s=margin,
            verify=verify,
        )
        qos = knobs.string("PODGAHP_LANCIUM_QOS", "high")
        if qos not in QOS_LEVELS:
            raise ConfigError(f"PODGAHP_LANCIUM_QOS = {qos!r} is not one of {', '.join(QOS_LEVELS)}")
        image = knobs.string("PODGAHP_LANCIUM_IMAGE", "lancium/ubuntu")
        if any(c.isspace() for c in image):
            raise ConfigError(f"PODGAHP_LANCIUM_IMAGE = {image!r} is not an image path (no blanks allowed)")
        spec = SpecDefaults(
            image=image,
            qos=qos,
            max_run_time_s=knobs.integer("PODGAHP_LANCIUM_MAX_RUN_TIME_SECONDS", 259200,
                                         minimum=MIN_RUN_TIME_S, maximum=MAX_RUN_TIME_S),
            gpu_type=knobs.optional("PODGAHP_LANCIUM_GPU_TYPE"),
            account=knobs.optional("PODGAHP_LANCIUM_ACCOUNT"),
        )
        max_age = knobs.number("PODGAHP_LANCIUM_LIST_MAX_AGE_SECONDS", 30.0, minimum=0, maximum=3600)
        ce_name = knobs.string("PODGAHP_LANCIUM_CE_NAME", knobs.raw("FULL_HOSTNAME") or socket.getfqdn())
        if not ce_name.strip() or not ce_name.isprintable() or len(ce_name) > 253:
            raise ConfigError(f"PODGAHP_LANCIUM_CE_NAME = {ce_name[:100]!r} is not a CE name (expected e.g. the "
                              f"CE's host name)")
        return cls(
            client=client,
            spec=spec,
            ce_name=ce_name.strip(),
            list_max_age_s=max_age,
            list_stale_s=knobs.number("PODGAHP_LANCIUM_LIST_STALE_SECONDS", 600.0, minimum=max_age),
            output_wait_s=knobs.number("PODGAHP_LANCIUM_OUTPUT_WAIT_SECONDS", 600.0, minimum=0),
            max_input_bytes=knobs.integer("PODGAHP_LANCIUM_MAX_INPUT_BYTES", 100 * 1024 * 1024, minimum=1),
            upload_chunk_bytes=knobs.integer("PODGAHP_LANCIUM_UPLOAD_CHUNK_BYTES", 32 * 1024 * 1024,
                                             minimum=1024, maximum=1024 * 1024 * 1024),
            cleanup_after_s=knobs.number("PODGAHP_LANCIUM_CLEANUP_AFTER_SECONDS", 86400.0, minimum=0),
            cleanup_per_cycle=knobs.integer("PODGAHP_LANCIUM_CLEANUP_MAX_PER_CYCLE", 20, minimum=0),
            cancel_retry_max_s=knobs.number("PODGAHP_LANCIUM_CANCEL_RETRY_MAX_SECONDS", 3600.0, minimum=0),
            blackhole=GuardSettings.from_knobs(knobs),
        )


def _url(knobs: Knobs, name: str, default: str) -> str:
    value = knobs.string(name, default)
    if not re.match(r"^https?://[^/\s]+(/\S*)?$", value):
        raise ConfigError(f"{name} = {value!r} is not an http:// or https:// URL "
                          f"(expected e.g. https://portal.lancium.com/api/v1)")
    return value.rstrip("/")
