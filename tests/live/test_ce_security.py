"""podgahp installed on a CE whose security is HTCondor-CE's never stops the CE: a route to another
batch system and a route to a local pool still route, condor_q and condor_status still answer users
and the admin, and podgahp's own pilots run, with IPv6 on (the daemons on ::1, which the host's name
does not resolve to) and off, and when the host's name resolves to another address than the one the
daemons connect from. Every daemon stays on loopback.

The pool is ce-config/standalone (HTCondor-CE's authentication and authorization, its audit log)
with podgahp's condor_config.d, as every live test's."""

from __future__ import annotations

import ipaddress
from typing import Any, Callable, Dict, List

import pytest

from e2e import NAMESPACE, iwd, kube_sim, pilot_submit, routed_jobs, start_k8s_ce, wait_done
from harness import Installation, Pool
from harness.rootfs import MISNAMED_HOST
from podgahp_sim.k8s import KubeSim

pytestmark = pytest.mark.live

__all__ = ["kube_sim"]  # the fixture, imported for pytest

#: Each network the CE is tried on: configuration read after the pool's own.
NETWORKS = {
    "ipv4": "",
    # Only IPv6, on its loopback address: the CE's host-bound authorizations name FULL_HOSTNAME, which
    # resolves to 127.0.0.1 alone, so no daemon connection matches them (as on a host whose IPv6
    # address has no name).
    "ipv6": "ENABLE_IPV4 = False\nENABLE_IPV6 = True\nNETWORK_INTERFACE = ::1\nCONDOR_HOST = [::1]\n",
    # The host calls itself by a name that resolves to another loopback address.
    "misnamed": f"NETWORK_HOSTNAME = {MISNAMED_HOST[0]}\n",
}

#: Routes of the site's other batch systems, tried before podgahp's: Slurm through the blahp (no
#: blahp here: its routed jobs may stay idle or be held, but they are routed) and the local pool.
OTHER_ROUTES = """\
JOB_ROUTER_ROUTE_NAMES = Slurm Local $(JOB_ROUTER_ROUTE_NAMES)
JOB_ROUTER_ROUTE_Slurm @=jrt
  UNIVERSE 9
  REQUIREMENTS queue =?= "slurm"
  SET GridResource "batch slurm"
@jrt
JOB_ROUTER_ROUTE_Local @=jrt
  UNIVERSE VANILLA
  REQUIREMENTS queue =?= "local"
@jrt
"""


@pytest.mark.parametrize("network", sorted(NETWORKS))
def test_podgahp_never_stops_the_ces_routing_or_tools(make_pool: Callable[..., Pool], installation: Installation,
                                                       kube_sim: KubeSim, network: str) -> None:
    pool = start_k8s_ce(make_pool, installation, kube_sim, extra_config=OTHER_ROUTES + NETWORKS[network])
    addresses = pool.advertised_addresses()
    assert addresses and all(ipaddress.ip_address(a).is_loopback for a in addresses), addresses
    if network == "ipv6":
        assert all(ipaddress.ip_address(a).version == 6 for a in addresses), addresses

    home = iwd(pool)
    slurm = pool.submit(pilot_submit(home, "slurm", extra=['+queue = "slurm"']), cwd=home)
    local = pool.submit(pilot_submit(home, "local", extra=['+queue = "local"']), cwd=home)
    pilot = pool.submit(pilot_submit(home, "k8s", run_seconds=1), cwd=home)

    def routed(cluster: int) -> Callable[[], List[Dict[str, Any]]]:
        return lambda: routed_jobs(pool, cluster)
    to_slurm = pool.wait_for(routed(slurm), timeout=90, what="the Slurm route to route its job")[0]
    assert to_slurm["GridResource"] == "batch slurm" and to_slurm["RouteName"] == "Slurm", to_slurm
    to_local = pool.wait_for(routed(local), timeout=90, what="the local pool's route to route its job")[0]
    assert to_local["RouteName"] == "Local" and pool.jobs(
        f"ClusterId == {to_local['ClusterId']}", ["JobUniverse"])[0]["JobUniverse"] == 5, to_local
    done = wait_done(pool, pilot, 1)
    assert done[0]["ExitCode"] == 0, done[0]
    assert not kube_sim.pods(NAMESPACE) or all(p["status"]["phase"] == "Succeeded" for p in kube_sim.pods(NAMESPACE))

    # Users and the admin (root) still read the queue and the collector.
    clusters = {str(c) for c in (slurm, local, pilot)}
    for user in ("pilot", None):  # None: root
        out = pool.run(["condor_q", "-allusers", "-af", "ClusterId"], user=user).stdout.split()
        assert clusters <= set(out), (user, out)
        schedds = pool.run(["condor_status", "-schedd", "-af", "Name"], user=user).stdout.split()
        assert len(schedds) == 1, (user, schedds)
