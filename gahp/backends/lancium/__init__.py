"""The Lancium backend: pilots as Lancium Compute jobs.

``backend`` (the :class:`~gahp.backends.base.Backend`: submit, status, cancel in one place) over
``settings`` (knobs), ``identity`` (job ids), ``state`` (the Lancium-state table and hold codes),
``spec`` (the job body from a pilot), ``submit`` (a submit as a convergence), ``api`` (the REST API's
client calls, through the kit's HTTP door), ``credentials`` (the API key file, token expiry),
``jobs`` (the shared, rate-limited job list) and ``census`` (the backend's CE-wide view: this CE's
jobs in the account, for ``podgahp reap``, ``q`` and ``health``). Nothing here is imported until the backend is chosen.
"""
