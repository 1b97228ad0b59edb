"""``podgahp sim``: run a simulated Kubernetes cluster or Lancium service until ^C or SIGTERM.

Added to the ``podgahp`` command through the ``podgahp.commands`` entry point where this package is
installed; the product itself never imports a simulator.
"""

from __future__ import annotations

import dataclasses
import signal
import threading

import click


@click.group()
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
@click.option("--runtime", type=click.Choice(["model", "runc"]), default="model", show_default=True,
              help="model: containers are simulated; runc: each container really runs (root and runc needed).")
@click.option("--image", "images", multiple=True, metavar="NAME=ROOTFS_DIR",
              help="With --runtime runc: an image the nodes can run (NAME as in a pod's image:, ROOTFS_DIR a "
                   "root filesystem or image directory); repeatable.")
@click.option("--runtime-dir", default=None,
              help="With --runtime runc: where containers, volumes and logs live [default: /var/lib/podgahp-sim].")
@click.option("--control-plane", "control_plane", type=click.Path(file_okay=False, exists=True), default=None,
              help="Run the real Kubernetes control plane from the binaries in this directory (etcd, kube-apiserver, "
                   "kube-controller-manager, kube-scheduler, as envtest's KUBEBUILDER_ASSETS; make k8s-control-plane "
                   "builds them) with simulated nodes, instead of the simulated API server.")
def sim_k8s(port: int, kubeconfig: str, namespace: str, namespaces: "tuple[str, ...]", nodes: int,
            node_cpu: str, node_memory: str, node_gpus: int, run_seconds: "float | None",
            plain_http: bool, runtime: str, images: "tuple[str, ...]", runtime_dir: "str | None",
            control_plane: "str | None") -> None:
    """A simulated Kubernetes API server with nodes, a scheduler and kubelets; runs until ^C.

    It serves HTTPS with a CA of its own; the kubeconfig it writes carries that CA and a token.
    With --runtime runc the containers of its pods really run, from the images given by --image.
    With --control-plane the API server, scheduler and controllers are Kubernetes' own, and the nodes
    the simulator's kubelets (podgahp sim node); the kubeconfig then carries an admin certificate."""
    from podgahp_sim.k8s import serve
    from podgahp_sim.k8s.runc import RuntimeUnavailable
    from podgahp_sim.k8s.registry import ImageError, parse_image_argument
    from podgahp_sim.k8s.tls import TlsUnavailable

    image_map = _images(images, runtime)
    if control_plane is not None:
        if plain_http or port:
            raise click.UsageError("--control-plane serves HTTPS on a free port: no --plain-http, no --port")
        _serve_control_plane(control_plane, kubeconfig, namespace, namespaces, [
            _node_spec("sim-node-%d" % (i + 1), node_cpu, node_memory, node_gpus, runtime, image_map, runtime_dir,
                       run_seconds) for i in range(nodes)])
        return

    def ready(cluster: object) -> None:
        click.echo(f"simulated Kubernetes API at {getattr(cluster, 'url', '?')}; kubeconfig {kubeconfig}")
        click.echo(f"watch the pods: KUBECONFIG={kubeconfig} kubectl get pods -o wide -w")

    try:
        serve(port, kubeconfig, namespace=namespace, nodes=nodes, node_cpu=node_cpu,
              node_memory=node_memory, node_gpus=node_gpus, run_seconds=run_seconds,
              namespaces=list(namespaces), ready=ready, tls=not plain_http, runtime=runtime, images=image_map,
              runtime_dir=runtime_dir)
    except (TlsUnavailable, RuntimeUnavailable, ImageError) as e:
        raise click.ClickException(str(e)) from None


def _images(images: "tuple[str, ...]", runtime: str) -> "dict[str, str]":
    from podgahp_sim.k8s.registry import ImageError, parse_image_argument

    try:
        image_map = dict(parse_image_argument(text) for text in images)
    except ImageError as e:
        raise click.BadParameter(str(e), param_hint="--image") from None
    if image_map and runtime != "runc":
        raise click.UsageError("--image needs --runtime runc (the modelled kubelet runs no image)")
    return image_map


def _node_spec(name: str, cpus: str, memory: str, gpus: int, runtime: str, images: "dict[str, str]",
               runtime_dir: "str | None", run_seconds: "float | None") -> "object":
    from podgahp_sim.kube.node import NodeSpec

    spec = NodeSpec(name, cpus=cpus, memory=memory, gpus=gpus, runtime=runtime, images=images)
    if runtime_dir is not None:
        spec = dataclasses.replace(spec, runtime_dir=runtime_dir)
    if run_seconds is not None:
        spec = dataclasses.replace(spec, run_seconds=run_seconds)
    return spec


def _serve_control_plane(binaries: str, kubeconfig: str, namespace: str, namespaces: "tuple[str, ...]",
                         nodes: "list[object]") -> None:
    from podgahp_sim.k8s.runc import RuntimeUnavailable
    from podgahp_sim.kube.cluster import KubeCluster, serve
    from podgahp_sim.kube.controlplane import ControlPlaneError
    from podgahp_sim.kube.node import NodeSpec

    def ready(cluster: KubeCluster) -> None:
        click.echo(f"Kubernetes API at {cluster.url} ({cluster.plane.release.text}, from {binaries}); "
                   f"kubeconfig {kubeconfig}")
        click.echo(f"watch the pods: KUBECONFIG={kubeconfig} kubectl get pods -o wide -w")

    try:
        serve(binaries, kubeconfig, namespace=namespace, namespaces=namespaces,
              nodes=[n for n in nodes if isinstance(n, NodeSpec)], ready=ready)
    except (ControlPlaneError, RuntimeUnavailable, TimeoutError) as e:
        raise click.ClickException(str(e)) from None


@sim.command("node")
@click.option("--kubeconfig", type=click.Path(dir_okay=False, exists=True), required=True,
              help="How to reach the API server, as this node (e.g. system:node:NAME in system:nodes).")
@click.option("--name", required=True, help="The Node's name.")
@click.option("--cpus", default="4", show_default=True, help="Allocatable CPU.")
@click.option("--memory", default="16Gi", show_default=True, help="Allocatable memory.")
@click.option("--gpus", type=int, default=0, show_default=True, help="Allocatable nvidia.com/gpu.")
@click.option("--runtime", type=click.Choice(["model", "runc"]), default="model", show_default=True,
              help="model: containers are simulated; runc: each container really runs (root and runc needed).")
@click.option("--image", "images", multiple=True, metavar="NAME=ROOTFS_DIR",
              help="With --runtime runc: an image this node can run; repeatable.")
@click.option("--runtime-dir", default=None,
              help="With --runtime runc: where containers, volumes and logs live [default: /var/lib/podgahp-sim].")
@click.option("--run-seconds", type=float, default=None,
              help="How long a modelled container runs unless its PODGAHP_SIM_RUN_SECONDS says otherwise.")
@click.option("--client-ca", type=click.Path(dir_okay=False, exists=True), default=None,
              help="Require the API server's client certificate (--kubelet-client-certificate) to be signed by this CA.")
def sim_node(kubeconfig: str, name: str, cpus: str, memory: str, gpus: int, runtime: str, images: "tuple[str, ...]",
             runtime_dir: "str | None", run_seconds: "float | None", client_ca: "str | None") -> None:
    """The simulator's kubelet as a node of any API server; runs until ^C.

    It registers the Node, heartbeats through its Lease, runs the pods the scheduler binds to it and
    writes their status, and serves the kubelet's log endpoint for `kubectl logs`."""
    from podgahp_sim.k8s.runc import RuntimeUnavailable
    from podgahp_sim.kube.client import ApiError, read_kubeconfig
    from podgahp_sim.kube.node import NodeAgent, NodeSpec

    spec = _node_spec(name, cpus, memory, gpus, runtime, _images(images, runtime), runtime_dir, run_seconds)
    assert isinstance(spec, NodeSpec)
    ca = open(client_ca, "rb").read() if client_ca else None
    done = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: done.set())
    try:
        agent = NodeAgent(read_kubeconfig(kubeconfig), spec, client_ca_pem=ca).start()
    except (ApiError, OSError, RuntimeUnavailable) as e:
        raise click.ClickException(f"node {name}: {e}") from None
    click.echo(f"node {name} registered; kubelet endpoint https://127.0.0.1:{agent.kubelet_api.port}")
    try:
        while not done.wait(0.5):
            pass
    finally:
        agent.stop()


@sim.command("lancium")
@click.option("--port", type=int, default=0, show_default=True, help="Port on 127.0.0.1; 0 picks one.")
@click.option("--key-file", type=click.Path(dir_okay=False), required=True,
              help="Where to write the API key the simulated service accepts (mode 0600).")
@click.option("--url-file", type=click.Path(dir_okay=False), default=None,
              help="Also write the service's base URL here.")
def sim_lancium(port: int, key_file: str, url_file: "str | None") -> None:
    """A simulated Lancium Compute API; runs until ^C."""
    from podgahp_sim.lancium import serve

    serve(port, key_file, url_file=url_file)
