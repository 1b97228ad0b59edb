"""Backends: one adapter per kind of remote service, all behind :class:`gahp.backends.base.Backend`.

:data:`BACKENDS` maps each backend's name to a function returning its class, so that starting
one GAHP imports only the client library its backend needs.
"""

from __future__ import annotations

from typing import Callable, Dict, Type

from gahp.backends.base import Backend


def _k8s() -> Type[Backend]:
    from gahp.backends.k8s.backend import KubernetesBackend

    return KubernetesBackend


def _lancium() -> Type[Backend]:
    from gahp.backends.lancium.backend import LanciumBackend

    return LanciumBackend


def _memory() -> Type[Backend]:
    from gahp.backends.memory import MemoryBackend

    return MemoryBackend


BACKENDS: Dict[str, Callable[[], Type[Backend]]] = {
    "k8s": _k8s,
    "lancium": _lancium,
    "memory": _memory,
}
