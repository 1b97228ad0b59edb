"""Backends: one adapter per kind of remote service, all behind :class:`gahp.backends.base.Backend`."""
