"""The simulated Kubernetes cluster: an API server with nodes, a scheduler and kubelets, reached only
over HTTP. The public entry point is :class:`KubeSim` (:mod:`.sim`), re-exported here with what its
callers configure it with.

Modules, one concern each, the same shape as the Lancium simulator's: ``sim`` (the simulator a test
or ``podgahp sim k8s`` starts, and its driver), ``http`` (the REST routes, on the simulators' shared
HTTP core :mod:`podgahp_sim.http`), ``config`` (settings), ``errors`` (``Status`` bodies),
``quantity`` (resource quantities), ``selectors`` (label and field selectors), ``patch`` (merge,
strategic merge and JSON patches), ``images`` (image references), ``admission`` (pod defaults,
validation, priority, quota), ``store`` (objects, resource versions, event log, watches), ``cluster``
(scheduler, kubelet, garbage collector, test-driver actions) and the rest of the cluster's parts.
Nothing here imports the product (``gahp``).
"""

from .config import PodLimitRange as PodLimitRange, PodQuota as PodQuota, RbacRule as RbacRule, SimConfig as SimConfig, SimNode as SimNode, Taint as Taint
from .http import Fault as Fault, RequestRecord as RequestRecord
from .sim import KubeSim as KubeSim, serve as serve
