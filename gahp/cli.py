"""Command-line entry points: the GAHP programs ``<backend>_gahp`` (one for each backend the registry
holds, :mod:`gahp.core.plugins`) and the ``podgahp`` tool for people.

Each command parses its options, calls one library function and turns errors into click errors.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, List, Optional, Set, Tuple

import click

from gahp import __version__
from gahp.core import plugins
from gahp.core.config import ConfigSource, find_config, use_config


def _exit(status: int) -> None:
    # Worker threads may still sit in network calls; the protocol is finished, so do not wait.
    sys.stderr.flush()
    os._exit(status)


_GAHP_HELP = """\
usage: {prog} [--help | --version]

The GAHP server for GridResource = "batch {backend}": HTCondor's condor_gridmanager starts it (set
{knob} = {prog} in the CE's configuration) and speaks the BLAHP protocol on its stdin and stdout.
It takes no arguments: everything comes from the HTCondor configuration it inherits
(CONDOR_CONFIG; on an HTCondor-CE /etc/condor-ce/condor_config), PODGAHP_* knobs.

Log: PODGAHP_LOG, default $(USER_LOG)/PodgahpLog.{backend}.<user> where USER_LOG is set (an
HTCondor-CE's $(LOG)/user), else $(LOG)/PodgahpLog.{backend}.<user>; ~/.podgahp/ when that cannot
be written.

By hand (the protocol is typed, one command per line; see docs/gahp-by-hand.md):
  CONDOR_CONFIG=/etc/condor-ce/condor_config {prog}
  COMMANDS
  BLAH_PING 1 {backend}
  RESULTS
  QUIT
"""


def gahp_help(prog: str, backend: str, knob: str) -> str:
    """What ``k8s_gahp --help`` (``lancium_gahp --help``) prints; its man page says the same."""
    return _GAHP_HELP.format(prog=prog, backend=backend, knob=knob)


def _gahp_program(backend: str, knob: str) -> None:
    """A GAHP server program: answers ``--help`` and ``--version``, refuses to start without an HTCondor
    configuration (creating nothing), else serves the protocol until EOF."""
    from gahp.core.config import gahp_config

    prog = os.path.basename(sys.argv[0]) or f"{backend}_gahp"
    args = sys.argv[1:]
    if args and args[0] in ("-h", "--help"):
        sys.stdout.write(gahp_help(prog, backend, knob))
        sys.exit(0)
    if args == ["--version"]:
        sys.stdout.write(f"{prog} (podgahp) {__version__}\n")
        sys.exit(0)
    if args:
        sys.stderr.write(f"{prog}: takes no arguments (got {' '.join(args)!r}); see {prog} --help\n")
        sys.exit(2)
    problem = gahp_config()
    if problem:
        sys.stderr.write(f"{prog}: {problem}\n")
        sys.exit(2)
    from gahp.program.main import run_gahp

    _exit(run_gahp(backend))


def __getattr__(name: str) -> Callable[[], None]:
    """``<backend>_gahp``: the GAHP program for ``GridResource = "batch <backend>"`` (set
    ``<BACKEND>_GAHP`` to it), for every backend of the registry; its console script in ``setup.cfg``
    names it ``gahp.cli:<backend>_gahp``."""
    backend = name[:-len("_gahp")] if name.endswith("_gahp") else ""
    if backend not in plugins.entries(plugins.BACKENDS):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

    def program() -> None:
        _gahp_program(backend, f"{backend.upper()}_GAHP")

    program.__name__ = program.__qualname__ = name
    return program


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="podgahp")
@click.option("--condor-config", metavar="PATH",
              help="HTCondor configuration read by q, reap, health, provision and trace. Default, as the "
              "condor_ce_* tools find theirs: $CONDOR_CONFIG, else the HTCondor-CE's "
              "(/etc/condor-ce/condor_config) where it exists, else HTCondor's own.")
def main(condor_config: Optional[str]) -> None:
    """podgahp: run HTCondor-CE pilot jobs as Kubernetes pods or Lancium jobs.

    On a CE, the commands find the CE's configuration themselves (no CONDOR_CONFIG needed); each
    error says which configuration was read."""


def _ce_config() -> ConfigSource:
    """The configuration of a CE-side command, made the one this process reads."""
    explicit = click.get_current_context().find_root().params.get("condor_config")
    source = find_config(explicit)
    if source.path is None:
        raise click.ClickException(source.describe())
    use_config(source)
    return source


def _failed(error: Exception, source: ConfigSource) -> click.ClickException:
    """A command's error, with the configuration it read (a wrong one is the first thing to rule out)."""
    from gahp.core.logs import printable

    return click.ClickException(f"{printable(str(error))}\n  (read {source.describe()})")


@main.command()
@click.option("--backend", "backend", type=click.Choice(plugins.backend_names()), required=True,
              help="Which backend serves the requests.")
def gahp(backend: str) -> None:
    """Run the GAHP server on stdin/stdout by hand (as the gridmanager would), with the HTCondor
    configuration of CONDOR_CONFIG; type COMMANDS, BLAH_PING 1 k8s, RESULTS, QUIT (docs/gahp-by-hand.md)."""
    from gahp.core.config import gahp_config
    from gahp.program.main import run_gahp

    problem = gahp_config()
    if problem:
        raise click.ClickException(problem)
    _exit(run_gahp(backend))


@main.group()
def routes() -> None:
    """Check and convert JobRouter routes (needs HTCondor's condor_job_router_info on PATH)."""


@routes.command("check")
@click.argument("config_file", required=False, type=click.Path(exists=True, dir_okay=False))
@click.option("--jobs", "jobs_file", type=click.Path(exists=True, dir_okay=False),
              help="Pilot job ads (long form, blank line between ads); default: built-in samples and a pilot "
                   "built for each route they miss.")
@click.option("--auto", "mode", flag_value="auto", default=True, hidden=True)
@click.option("--ce", "mode", flag_value="ce",
              help="The HTCondor-CE installed here, whole (the default where there is one): its configuration, "
                   "CONFIG_FILE read as one of its config.d files.")
@click.option("--emulated-ce", "mode", flag_value="emulated",
              help="CONFIG_FILE alone behind podgahp's re-statement of HTCondor-CE's router transforms (the "
                   "default where no CE is installed).")
@click.option("--no-ce", "mode", flag_value="plain", help="CONFIG_FILE alone, as in a plain HTCondor pool.")
@click.option("--ce-config", default="/etc/condor-ce/condor_config", show_default=True,
              type=click.Path(dir_okay=False), help="The HTCondor-CE's condor_config.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the report as JSON (routes, samples with what podgahp receives, problems).")
def routes_check(config_file: str | None, jobs_file: str | None, mode: str, ce_config: str, as_json: bool) -> None:
    """Show where pilots go under the routes and what podgahp would receive. HTCondor reads the
    configuration; nothing it names is run.

    Exits 1 when a route has a problem, with the report printed either way."""
    from gahp import routes as routes_lib
    from gahp.core.errors import GahpError

    try:
        report = routes_lib.check_file(config_file, jobs_file=jobs_file, mode=mode, ce_config=ce_config,
                                       whole_node=_whole_node, queue_problem=_queue_problem)
    except GahpError as e:
        raise click.ClickException(str(e)) from e
    click.echo(report.to_json() if as_json else report.text())
    if not report.ok:
        raise click.exceptions.Exit(1)


def _queue_problem(backend: str, queue: Optional[str], knob: Callable[[str], Optional[str]]) -> Optional[str]:
    """Why the backend ``backend`` would hold a pilot of ``queue`` (routes check's warning), or None."""
    from gahp.backends import backend_class
    from gahp.core.errors import ConfigError

    try:
        return backend_class(backend).queue_problem(queue, knob)
    except (ImportError, ConfigError):
        return None


def _whole_node(backend: str) -> str:
    """How the backend ``backend`` gives a pilot a whole node, in its words (routes check's note)."""
    from gahp.backends import backend_class
    from gahp.core.errors import ConfigError

    try:
        return backend_class(backend).whole_node
    except (ImportError, ConfigError) as e:
        return f"the {backend} backend cannot be loaded here to say how ({e})"


@routes.command("convert")
@click.argument("config_file", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--emulated-ce/--no-ce", "ce", default=True, show_default=True,
              help="Convert for an HTCondor-CE (each route keeps its meaning behind the CE's router transforms) "
                   "and prove it there (the old routes behind HTCondor-CE 23.0's defaults), or for a plain pool.")
@click.option("--no-proof", is_flag=True, help="Convert only; do not route pilots through both forms.")
def routes_convert(config_file: str, ce: bool, no_proof: bool) -> None:
    """Print CONFIG_FILE with its JOB_ROUTER_ENTRIES as JOB_ROUTER_ROUTE_* routes (the syntax of
    HTCondor 24.10 and later); on standard error, what to know and the proof: the same pilots
    routed through the old and the converted routes by HTCondor's own tools.

    Exits 1 when a route cannot be converted faithfully or the proof finds a difference: such a route
    is still converted as closely as it can be, after a '# podgahp: CHECK' comment saying what
    differs, and every other route is converted as well."""
    import tempfile

    from gahp import routes as routes_lib
    from gahp.core.errors import GahpError
    from gahp.core.files import read_input

    try:
        with tempfile.TemporaryDirectory(prefix="podgahp-convert-input-") as tmp:
            path = config_file
            if config_file == "-":
                data = sys.stdin.buffer.read(routes_lib.MAX_FILE_BYTES + 1)
                if len(data) > routes_lib.MAX_FILE_BYTES:
                    raise click.ClickException(f"standard input: more than {routes_lib.MAX_FILE_BYTES} bytes")
                path = os.path.join(tmp, "stdin.conf")
                with open(path, "wb") as f:
                    f.write(data)
            else:
                data = read_input(config_file, "routes file", routes_lib.MAX_FILE_BYTES, "a routes file")
            if b"\0" in data:
                raise click.ClickException(f"{config_file}: not a routes file (binary)")
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as e:
                raise click.ClickException(f"{config_file}: not UTF-8 text (byte {e.start})") from None
            conversion, proofs = routes_lib.convert_and_prove(path, mode="emulated" if ce else "plain",
                                                             proof=not no_proof)
    except GahpError as e:
        raise click.ClickException(str(e)) from None
    click.echo(conversion.text, nl=False)
    for note in conversion.notes:
        click.echo(f"note: {note}", err=True)
    if proofs:
        click.echo(routes_lib.proof_text(proofs, "emulated" if ce else "plain"), err=True, nl=False)
    if conversion.checks:
        click.echo("CHECK: what the converted file does not do as the old one did (each is marked '# podgahp: CHECK' "
                   "in it; the routes are converted as closely as they can be, every other route as it was):",
                   err=True)
        for check in conversion.checks:
            click.echo(f"  {check}", err=True)
    if conversion.checks or any(p.differences for p in proofs):
        raise click.exceptions.Exit(1)


@main.command()
@click.option("--dry-run", is_flag=True, help="Report the orphans, delete nothing.")
def reap(dry_run: bool) -> None:
    """Delete this CE's remote jobs (pods in every cluster its queues name, Lancium jobs) whose HTCondor
    job no longer exists (run by the CE as a schedd cron job).

    Each pass also writes each routed pilot's pod, node, phase and why it waits into its job ad
    (PodgahpPod, PodgahpNode, PodgahpPhase, PodgahpReason, PodgahpCluster): condor_ce_q -allusers -pr
    /usr/share/podgahp/podgahp.cpf shows them (PODGAHP_REAP_JOB_ATTRIBUTES).

    Prints ClassAd attributes for the schedd's ad; exits non-zero, deleting nothing, when the schedd
    or a service cannot be asked."""
    from gahp.rules import figures as health
    from gahp.core.config import Knobs
    from gahp.core.errors import GahpError
    from gahp.core.logs import printable
    from gahp.ce.health import census_health, publish_prometheus
    from gahp.ce.reap import classad_lines, reap as reap_once

    source = _ce_config()
    knobs = Knobs()
    try:
        result = reap_once(knobs, dry_run=dry_run)
        figures = census_health(knobs, result.censuses, result.ce_names)
    except GahpError as e:
        raise _failed(e, source) from None
    for line in classad_lines(result) + health.classad_lines(figures):
        click.echo(line)
    publish_prometheus(knobs, figures, result, next(iter(result.ce_names.values()), ""))
    if result.errors:
        click.echo(f"podgahp reap: {len(result.errors)} errors, first: {printable(result.errors[0])}\n"
                   f"  (read {source.describe()})", err=True)
        sys.exit(1)


@main.command()
@click.option("--once", is_flag=True, help="One cycle, then exit (for cron); default: a cycle every "
              "PODGAHP_PROVISION_INTERVAL_SECONDS until stopped.")
def provision(once: bool) -> None:
    """Submit pilots to the CE for the idle jobs of a pool, grouped by shape (PODGAHP_PROVISION_* knobs).

    Logs each decision to PODGAHP_PROVISION_LOG: default $(USER_LOG)/PodgahpProvisionLog.<user> where
    USER_LOG is set (an HTCondor-CE's $(LOG)/user, writable by every account), else
    $(LOG)/PodgahpProvisionLog.<user>; ~/.podgahp/ when that cannot be written. With --once, also prints
    one line per group, and on stderr why the cycle could not decide or what the CE refused."""
    import dataclasses
    import signal
    import threading

    from gahp.core import logs
    from gahp.core.config import Knobs, ServerSettings
    from gahp.core.errors import GahpError
    from gahp.provision.service import Provisioner, describe
    from gahp.provision.settings import ProvisionSettings

    source = _ce_config()
    knobs = Knobs()
    try:
        settings = ProvisionSettings.from_knobs(knobs)
        server = ServerSettings.from_knobs(knobs, "provision")
    except GahpError as e:
        raise _failed(e, source) from None
    where = logs.setup(dataclasses.replace(server, log_file=settings.log_file))
    provisioner = Provisioner(settings)
    if once:
        decision = provisioner.cycle()
        for error in provisioner.errors:
            click.echo(f"podgahp provision: {error}", err=True)
        if decision is None:
            raise click.ClickException(f"the cycle could not decide (log: {where})\n  (read {source.describe()})")
        for row in decision.rows:
            click.echo(describe(row))
        if decision.failures:
            raise click.ClickException(f"the CE refused {decision.failures} request(s) (log: {where})")
        return
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    click.echo(f"podgahp provision: a cycle every {settings.interval_s} s; log {where}; {source.describe()}",
               err=True)
    provisioner.serve(stop)


@main.command("health")
@click.option("--prometheus", is_flag=True, help="Prometheus text exposition format (0.0.4, as textfile "
              "collectors read it) instead of ClassAd attributes.")
@click.option("--openmetrics", is_flag=True, help="OpenMetrics text format instead of ClassAd attributes.")
@click.option("--listen", metavar="[ADDRESS:]PORT",
              help="Serve /metrics for a Prometheus scrape until stopped (fresh figures at each scrape, in the "
              "format the scraper asks for), instead of printing once; default address 127.0.0.1.")
def health_cmd(prometheus: bool, openmetrics: bool, listen: Optional[str]) -> None:
    """This CE's health figures: the GAHPs' counters, remote jobs (pods, Lancium jobs) per queue and
    state, black-hole queues, for every backend the CE uses.

    What the schedd cron job (podgahp reap) publishes, without its clean-up; one LIST per cluster and
    namespace (per scrape with --listen). Every configured queue has its series, 0 while it has no jobs."""
    from gahp.rules import figures as health
    from gahp.core.config import Knobs
    from gahp.core.errors import GahpError
    from gahp.core.logs import printable
    from gahp.ce.health import ce_health

    source = _ce_config()
    knobs = Knobs()

    def figures() -> "Tuple[health.CeHealth, List[str], str]":
        return ce_health(knobs)

    if listen:
        address, _, port_text = listen.rpartition(":")
        if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
            raise click.BadParameter(f"{listen!r}: not [ADDRESS:]PORT", param_hint="--listen")

        def families() -> "List[health.Family]":
            try:
                found, errors, ce_name = figures()
            except GahpError as e:
                click.echo(f"podgahp health: {printable(str(e))}", err=True)
                return []
            for error in errors:
                click.echo(f"podgahp health: {printable(error)}", err=True)
            return health.metric_families(found, ce_name)

        _serve_until_stopped(lambda: health.serve_metrics(families, address or "127.0.0.1", int(port_text)),
                             source)
        return
    try:
        found, errors, ce_name = figures()
    except GahpError as e:
        raise _failed(e, source) from None
    if prometheus or openmetrics:
        click.echo(health.prometheus_text(found, ce_name, openmetrics=openmetrics), nl=False)
    else:
        click.echo("\n".join(health.classad_lines(found)))
    for error in errors:
        click.echo(f"podgahp health: {printable(error)}", err=True)
    if errors:
        click.echo(f"  (read {source.describe()})", err=True)
        sys.exit(1)


def _serve_until_stopped(start: "Callable[[], Any]", source: ConfigSource) -> None:
    import signal
    import threading

    try:
        server = start()
    except OSError as e:
        raise click.ClickException(f"cannot listen: {e}") from None
    host, port = server.server_address[:2]
    click.echo(f"podgahp health: serving http://{host}:{port}/metrics ({source.describe()})", err=True)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    while not stop.wait(1):
        pass
    server.shutdown()


@main.command("q")
@click.option("-l", "--long", "long_form", is_flag=True, help="Every field of each pilot, name = value.")
@click.option("--json", "as_json", is_flag=True, help="The pilots as a JSON list.")
@click.option("--queue", help="Only pilots of this queue (PODGAHP_K8S_QUEUES; lancium for Lancium's).")
@click.option("--node", help="Only pilots whose remote job is on this node.")
@click.option("--phase", help="Only pilots whose remote job is in this state (Pending, Running, Succeeded, Failed; "
              "Lancium's queued, running, finished, error...).")
@click.option("--backend", type=click.Choice(plugins.backend_names()), help="Only pilots of this backend.")
def q(long_form: bool, as_json: bool, queue: Optional[str], node: Optional[str], phase: Optional[str],
      backend: Optional[str]) -> None:
    """The CE's routed pilots with their remote jobs (pods in every cluster, Lancium jobs): node, state,
    age and why a pilot waits.

    Reads the schedd holding the routed jobs (as podgahp reap does) and lists this CE's remote jobs once
    per cluster and namespace (Kubernetes) or account (Lancium), whatever the number of pilots.

    condor_ce_q -allusers -pr /usr/share/podgahp/podgahp.cpf shows the same in condor_ce_q, as the last
    pass of podgahp reap saw it."""
    import json

    from gahp.core.errors import GahpError
    from gahp.ce.q import long_form as long_text, matches, table
    from gahp.core.logs import printable
    from gahp.ce.q import pilots

    source = _ce_config()
    try:
        rows, errors = pilots()
    except GahpError as e:
        raise _failed(e, source) from None
    rows = [r for r in rows if matches(r, queue, node, phase, backend)]
    if as_json:
        click.echo(json.dumps([r.as_dict() for r in rows], indent=2))
    elif long_form:
        click.echo(long_text(rows))
    else:
        click.echo(table(rows))
    for error in errors:
        click.echo(f"podgahp q: {printable(error)}", err=True)
    if errors:
        click.echo(f"  (read {source.describe()})", err=True)
        sys.exit(1)


@main.command("trace")
@click.argument("job_id", required=False)
@click.option("--queue", help="The test pilot's +queue (which route takes it); default: none, as most pilots.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(1, 86400), default=300, show_default=True,
              help="Seconds without reaching the end after which the pilot counts as stalled.")
@click.option("--interval", "interval_s", type=click.FloatRange(0.2, 600), default=2, show_default=True,
              help="Seconds between looks.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document at the end instead of lines.")
def trace_cmd(job_id: Optional[str], queue: Optional[str], timeout_s: float, interval_s: float, as_json: bool) -> None:
    """Follow a pilot hop by hop, as condor_ce_trace does: submitted, routed (which route), grid job,
    GAHP request, then its remote job's hops as its backend names them (a pod: pod created, scheduled
    on which node, running, completed), output back.

    Without JOB_ID, submits a small test pilot to the CE (as the user running it, who may not be root)
    and follows it; with
    JOB_ID (a job a factory submitted, e.g. 1234.0), follows that one. On a stall, says where and why:
    the hold reason, the state table's reason, what the service says (a pod's Events), what the GAHP's
    ping finds wrong.
    Exits 0 when the pilot went through, 1 when it failed or stalled."""
    import re

    from gahp.ce import trace as tracing
    from gahp.core.config import Knobs, user_name
    from gahp.core.errors import GahpError
    from gahp.ce.views import ReapSettings

    if job_id is not None and not re.fullmatch(r"[0-9]{1,9}(\.[0-9]{1,9})?", job_id):
        raise click.UsageError(f"{job_id!r} is not a job id (CLUSTER or CLUSTER.PROC)")
    if job_id is None and os.geteuid() == 0:
        raise click.ClickException(
            "a test pilot cannot be submitted as root (HTCondor runs no job as root; the CE's schedd refuses "
            "it): run podgahp trace as a user who may submit to the CE, e.g. runuser -u USER -- podgahp trace, "
            "or follow a pilot already there by its id: podgahp trace 1234.0")
    source = _ce_config()
    knobs = Knobs()
    try:
        settings = ReapSettings.from_knobs(knobs)
        ce = tracing.Ce(knobs, settings.schedd_name, settings.schedd_pool)
        try:
            if job_id is None:
                description, directory = tracing.test_pilot(queue)
                job_id = ce.submit(description)
                if not as_json:
                    click.echo(f"submitted test pilot {job_id} (directory {directory})")
            elif "." not in job_id:
                job_id += ".0"
            printed: Set[Tuple[str, str, str]] = set()

            def shown(look: tracing.Trace, elapsed: float) -> None:
                if not as_json:
                    for line in tracing.text_lines(look, elapsed, printed):
                        click.echo(line)

            last, outcome, elapsed = tracing.follow(ce, job_id, user_name(), timeout_s, interval_s, shown)
        finally:
            ce.close()
    except GahpError as e:
        raise _failed(e, source) from None
    if as_json:
        click.echo(tracing.json_text(last, outcome, elapsed))
    else:
        click.echo(tracing.verdict(last, outcome, elapsed))
        click.echo(f"  every pilot of the CE, where it runs and why it waits: {tracing.CE_Q}")
    if outcome != "completed":
        if not as_json:
            click.echo(f"  (read {source.describe()})", err=True)
        sys.exit(1)


def _add_plugins() -> None:
    """Commands other installed packages add under ``podgahp`` (entry point group ``podgahp.commands``):
    ``podgahp sim`` comes from the simulators' package where it is installed, never from the product."""
    for entry in plugins.entries(plugins.COMMANDS).values():
        if entry.name not in main.commands:
            main.add_command(entry.load(), entry.name)


_add_plugins()
