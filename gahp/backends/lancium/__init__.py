"""The Lancium backend: pilots as Lancium Compute jobs.

``backend`` (the :class:`~gahp.backends.base.Backend`: submit, status, cancel in one place) over
``settings`` (knobs), ``spec`` (the job body from a pilot), ``client`` (the REST API, its auth and errors)
and ``jobs`` (the shared, rate-limited job list). Nothing here is imported until the backend is chosen.
"""
