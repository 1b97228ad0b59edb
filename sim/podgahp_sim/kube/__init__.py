"""Building blocks of the simulated Kubernetes API server; the public entry point is :mod:`podgahp_sim.k8s`.

Modules, one concern each: ``config`` (settings), ``errors`` (``Status`` bodies), ``quantity``
(resource quantities), ``selectors`` (label and field selectors), ``patch`` (merge, strategic merge
and JSON patches), ``images`` (image references), ``admission`` (pod defaults, validation, priority,
quota), ``store`` (objects, resource versions, event log, watches), ``cluster`` (scheduler, kubelet,
garbage collector, test-driver actions), ``http`` (REST routes).  Nothing here imports the
``kubernetes`` client or ``gahp.backends``: the simulator is reached only over HTTP.
"""
