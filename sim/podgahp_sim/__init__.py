"""Simulated services (a Kubernetes API server, the Lancium Compute API) reached only over HTTP."""

__version__ = "0.1.0"
