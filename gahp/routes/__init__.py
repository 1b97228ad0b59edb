"""JobRouter routes for podgahp: check them offline with HTCondor's tools, convert the old syntax.

* :mod:`.samples` — the sample pilots a check routes;
* :mod:`.submit_ad` — the submit ad the gridmanager would build from a routed job, and podgahp's view of it;
* :mod:`.check` — ``podgahp routes check``: HTCondor's ``condor_job_router_info`` on an admin's file;
* :mod:`.convert` — ``podgahp routes convert``: ``JOB_ROUTER_ENTRIES`` to ``JOB_ROUTER_ROUTE_*``.

Must not know any backend or client library: what a backend does with the ad is its own business.
ClassAds are parsed and unparsed only through ``classad2``.
"""

from __future__ import annotations

from gahp.errors import RoutesError
from gahp.routes.check import (CE_ROUTER_DEFAULTS, CE_ROUTER_EMULATION, MAX_ROUTES_FILE_BYTES, Report, Route,
                               SampleResult, check_file, route_jobs)
from gahp.routes.convert import ROUTE_MACROS, convert
from gahp.routes.samples import SAMPLES, Sample, samples_text
from gahp.routes.submit_ad import COPIED_ATTRIBUTES, gahp_view, grid_type, predict_submit_ad

__all__ = ["CE_ROUTER_DEFAULTS", "CE_ROUTER_EMULATION", "COPIED_ATTRIBUTES", "MAX_ROUTES_FILE_BYTES",
           "ROUTE_MACROS", "Report", "Route", "RoutesError", "SAMPLES", "Sample", "SampleResult", "check_file",
           "convert", "gahp_view", "grid_type", "predict_submit_ad", "route_jobs", "samples_text"]
