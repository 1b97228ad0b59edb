"""The simulated Lancium Compute service (API 1.5.0), reached only over HTTP. The public entry point is
:class:`LanciumSim` (:mod:`.sim`), re-exported here with what its callers configure it with.

Modules, one concern each, the same shape as the Kubernetes simulator's: ``sim`` (the simulator a test
or ``podgahp sim lancium`` starts, and its driver: tokens, faults, chaos, the request log), ``http``
(the REST routes, on the simulators' shared HTTP core :mod:`podgahp_sim.http`), ``model`` (jobs,
inputs and outputs and how they change), ``fields`` (the API's field rules and catalogues). Nothing
here imports the product (``gahp``).
"""

from .fields import API_VERSION as API_VERSION, QOS_LEVELS as QOS_LEVELS, STATUSES as STATUSES
from .fields import LanciumSimSettings as LanciumSimSettings
from .sim import BASE_PATH as BASE_PATH, ROUTES as ROUTES, LanciumSim as LanciumSim, LoggedRequest as LoggedRequest
from .sim import serve as serve
