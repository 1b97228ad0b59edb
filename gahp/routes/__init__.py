"""JobRouter routes for podgahp: read them as HTCondor does, check them offline with HTCondor's
tools, convert the old syntax.

* :mod:`.config_text` — where the statements of a configuration file begin and end (never what
  they mean: HTCondor reads the values);
* :mod:`.sources` — the configuration a check reads, copied with nothing in it run (an admin's file,
  or an HTCondor-CE's whole configuration);
* :mod:`.tools` — HTCondor's ``condor_config_val``, ``condor_job_router_info``, ``condor_transform_ads``;
* :mod:`.samples` and :mod:`.pilots` — the built-in sample pilots, and pilots built to reach a route;
* :mod:`.submit_ad` — the submit ad the gridmanager would build from a routed job, and podgahp's view of it;
* :mod:`.check` and :mod:`.report` — ``podgahp routes check``;
* :mod:`.convert` and :mod:`.proof` — ``podgahp routes convert``: ``JOB_ROUTER_ENTRIES`` to
  ``JOB_ROUTER_ROUTE_*``, proven by routing the same pilots through both; :mod:`.macros` keeps the
  macros a file does not define, :mod:`.ce_meaning` adds what HTCondor-CE 23.0's own route defaults
  did for a route.

Must not know any backend or client library: what a backend does with the ad is its own business.
ClassAds are parsed and unparsed only through ``classad2``.
"""

from __future__ import annotations

from gahp.core.errors import RoutesError
from gahp.routes.check import MODES, check_file, resolve_mode
from gahp.routes.convert import ROUTE_MACROS, Conversion, convert_routes
from gahp.routes.proof import RouteProof, convert_and_prove, proof_text
from gahp.routes.report import Report, Route, SampleResult
from gahp.routes.samples import SAMPLES, Sample, samples_text
from gahp.routes.sources import CE_CONDOR_CONFIG, CE_ROUTER_EMULATION, CE_ROUTER_ENV, MAX_FILE_BYTES
from gahp.routes.submit_ad import COPIED_ATTRIBUTES, gahp_view, grid_type, predict_submit_ad

__all__ = ["CE_CONDOR_CONFIG", "CE_ROUTER_EMULATION", "CE_ROUTER_ENV", "COPIED_ATTRIBUTES", "MAX_FILE_BYTES",
           "MODES", "ROUTE_MACROS", "Report", "Route", "RoutesError", "SAMPLES", "Sample", "SampleResult",
           "check_file", "Conversion", "RouteProof", "convert_and_prove", "convert_routes", "proof_text", "gahp_view", "grid_type", "predict_submit_ad", "resolve_mode", "samples_text"]
