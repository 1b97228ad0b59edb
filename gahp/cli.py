"""Command-line entry points: ``k8s_gahp``, ``lancium_gahp`` and the ``podgahp`` tool for people.

Each command parses its options, calls one library function and turns errors into click errors.
"""

from __future__ import annotations

import os
import sys

import click

from gahp import __version__
from gahp.backends import BACKENDS


def _exit(status: int) -> None:
    # Worker threads may still sit in network calls; the protocol is finished, so do not wait.
    sys.stderr.flush()
    os._exit(status)


def k8s_gahp() -> None:
    """The GAHP for ``GridResource = "batch k8s"`` (set ``K8S_GAHP`` to this program)."""
    from gahp.main import run_gahp

    _exit(run_gahp("k8s"))


def lancium_gahp() -> None:
    """The GAHP for ``GridResource = "batch lancium"`` (set ``LANCIUM_GAHP`` to this program)."""
    from gahp.main import run_gahp

    _exit(run_gahp("lancium"))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="podgahp")
def main() -> None:
    """podgahp: run HTCondor-CE pilot jobs as Kubernetes pods or Lancium jobs."""


@main.command()
@click.option("--backend", "backend", type=click.Choice(sorted(BACKENDS)), required=True,
              help="Which backend serves the requests.")
def gahp(backend: str) -> None:
    """Run the GAHP server on stdin/stdout by hand (as the gridmanager would)."""
    from gahp.main import run_gahp

    _exit(run_gahp(backend))
