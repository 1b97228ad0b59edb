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


@main.group()
def routes() -> None:
    """Check and convert JobRouter routes (needs HTCondor's condor_job_router_info on PATH)."""


@routes.command("check")
@click.argument("config_file", type=click.Path(exists=True, dir_okay=False))
@click.option("--jobs", "jobs_file", type=click.Path(exists=True, dir_okay=False),
              help="Pilot job ads (long form, blank line between ads); default: built-in samples.")
@click.option("--ce/--no-ce", default=True, show_default=True,
              help="Apply HTCondor-CE's router transforms around the routes.")
def routes_check(config_file: str, jobs_file: str | None, ce: bool) -> None:
    """Show where sample pilots go under CONFIG_FILE's routes and what podgahp would receive."""
    from gahp import routes as routes_lib
    from gahp.errors import GahpError

    try:
        report = routes_lib.check_file(config_file, jobs_file=jobs_file, ce=ce)
    except GahpError as e:
        raise click.ClickException(str(e)) from e
    click.echo(report.text())
    if not report.ok:
        raise click.exceptions.Exit(1)


@routes.command("convert")
@click.argument("config_file", type=click.Path(dir_okay=False, allow_dash=True))
def routes_convert(config_file: str) -> None:
    """Print CONFIG_FILE's JOB_ROUTER_ENTRIES as JOB_ROUTER_ROUTE_* routes (HTCondor 24.10+ syntax)."""
    from gahp import routes as routes_lib
    from gahp.errors import GahpError
    from gahp.files import read_input

    try:
        if config_file == "-":
            data = sys.stdin.buffer.read(routes_lib.MAX_ROUTES_FILE_BYTES + 1)
        else:
            data = read_input(config_file, "routes file", routes_lib.MAX_ROUTES_FILE_BYTES, "a routes file")
        if b"\0" in data or len(data) > routes_lib.MAX_ROUTES_FILE_BYTES:
            raise click.ClickException(f"{config_file}: not a routes file (binary, or larger than "
                                       f"{routes_lib.MAX_ROUTES_FILE_BYTES} bytes)")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise click.ClickException(f"{config_file}: not UTF-8 text (byte {e.start})") from None
        click.echo(routes_lib.convert(text), nl=False)
    except GahpError as e:
        raise click.ClickException(str(e)) from None


@main.command()
@click.option("--dry-run", is_flag=True, help="Report the orphans, delete nothing.")
def reap(dry_run: bool) -> None:
    """Delete this CE's pods whose HTCondor job no longer exists (run by the CE as a schedd cron job).

    Prints ClassAd attributes for the schedd's ad; exits non-zero, deleting nothing, when the schedd
    or the cluster cannot be asked."""
    from gahp.errors import GahpError
    from gahp.reaper import classad_lines, reap as reap_once

    try:
        result = reap_once(dry_run=dry_run)
    except GahpError as e:
        raise click.ClickException(str(e)) from None
    for line in classad_lines(result):
        click.echo(line)
    if result.errors:
        click.echo(f"podgahp reap: {len(result.errors)} errors, first: {result.errors[0]}", err=True)
        sys.exit(1)


@main.group()
def sim() -> None:
    """Run a simulated service (for the demo, dry runs and tests)."""


@sim.command("k8s")
@click.option("--port", type=int, default=0, show_default=True, help="Port on 127.0.0.1; 0 picks one.")
@click.option("--kubeconfig", type=click.Path(dir_okay=False), required=True,
              help="Where to write a kubeconfig that points at the simulated cluster.")
@click.option("--namespace", default="default", show_default=True, help="Namespace of the kubeconfig context.")
@click.option("--extra-namespace", "namespaces", multiple=True, help="Another namespace that exists.")
@click.option("--nodes", type=int, default=2, show_default=True, help="Number of nodes.")
@click.option("--node-cpu", default="4", show_default=True, help="Allocatable CPU of each node.")
@click.option("--node-memory", default="16Gi", show_default=True, help="Allocatable memory of each node.")
@click.option("--node-gpus", type=int, default=0, show_default=True, help="nvidia.com/gpu of each node.")
@click.option("--run-seconds", type=float, default=None,
              help="How long a simulated pilot runs unless its PODGAHP_SIM_RUN_SECONDS says otherwise.")
@click.option("--plain-http", is_flag=True,
              help="Serve plain HTTP instead of HTTPS (clients then need PODGAHP_K8S_ALLOW_INSECURE_HTTP).")
def sim_k8s(port: int, kubeconfig: str, namespace: str, namespaces: "tuple[str, ...]", nodes: int,
            node_cpu: str, node_memory: str, node_gpus: int, run_seconds: "float | None",
            plain_http: bool) -> None:
    """A simulated Kubernetes API server with nodes, a scheduler and kubelets; runs until ^C.

    It serves HTTPS with a CA of its own; the kubeconfig it writes carries that CA and a token."""
    from gahp.sim.k8s import serve
    from gahp.sim.kube.tls import TlsUnavailable

    def ready(cluster: object) -> None:
        click.echo(f"simulated Kubernetes API at {getattr(cluster, 'url', '?')}; kubeconfig {kubeconfig}")
        click.echo(f"watch the pods: KUBECONFIG={kubeconfig} kubectl get pods -o wide -w")

    try:
        serve(port, kubeconfig, namespace=namespace, nodes=nodes, node_cpu=node_cpu,
              node_memory=node_memory, node_gpus=node_gpus, run_seconds=run_seconds,
              namespaces=list(namespaces), ready=ready, tls=not plain_http)
    except TlsUnavailable as e:
        raise click.ClickException(str(e)) from None


@sim.command("lancium")
@click.option("--port", type=int, default=0, show_default=True, help="Port on 127.0.0.1; 0 picks one.")
@click.option("--key-file", type=click.Path(dir_okay=False), required=True,
              help="Where to write the API key the simulated service accepts (mode 0600).")
@click.option("--url-file", type=click.Path(dir_okay=False), default=None,
              help="Also write the service's base URL here.")
def sim_lancium(port: int, key_file: str, url_file: "str | None") -> None:
    """A simulated Lancium Compute API; runs until ^C."""
    from gahp.sim.lancium import serve

    serve(port, key_file, url_file=url_file)
