"""``podgahp sim``: run a simulated Kubernetes cluster or Lancium service until ^C or SIGTERM.

Added to the ``podgahp`` command through the ``podgahp.commands`` entry point where this package is
installed; the product itself never imports a simulator.
"""

from __future__ import annotations

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
def sim_k8s(port: int, kubeconfig: str, namespace: str, namespaces: "tuple[str, ...]", nodes: int,
            node_cpu: str, node_memory: str, node_gpus: int, run_seconds: "float | None",
            plain_http: bool, runtime: str, images: "tuple[str, ...]", runtime_dir: "str | None") -> None:
    """A simulated Kubernetes API server with nodes, a scheduler and kubelets; runs until ^C.

    It serves HTTPS with a CA of its own; the kubeconfig it writes carries that CA and a token.
    With --runtime runc the containers of its pods really run, from the images given by --image."""
    from podgahp_sim.k8s import serve
    from podgahp_sim.k8s.runc import RuntimeUnavailable
    from podgahp_sim.k8s.registry import ImageError, parse_image_argument
    from podgahp_sim.k8s.tls import TlsUnavailable

    try:
        image_map = dict(parse_image_argument(text) for text in images)
    except ImageError as e:
        raise click.BadParameter(str(e), param_hint="--image") from None
    if image_map and runtime != "runc":
        raise click.UsageError("--image needs --runtime runc (the modelled kubelet runs no image)")

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
