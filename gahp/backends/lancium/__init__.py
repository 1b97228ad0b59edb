"""The Lancium backend: pilots as Lancium Compute jobs.

The modules every backend has, for the same concerns: ``backend`` (the
:class:`~gahp.backends.base.Backend`: submit, status, cancel in one place), ``settings`` (knobs),
``api`` (the REST API's client calls, through the kit's HTTP door), ``spec`` (the job body from a
pilot), ``submit`` (the ``Submitter``: a submit as a convergence, once per sandbox, whatever answers
get lost), ``cache`` (the shared, rate-limited job list status reads), ``state`` (the Lancium-state
table, rows of the kit's shape), ``output``
(Out/Err from the job), ``identity`` (job ids and names, whose job is whose), ``retention`` (which
jobs the GAHP's own clean-up deletes) and ``census`` (the backend's CE-wide view: this CE's jobs in
the account, for ``podgahp reap``, ``q`` and ``health``).

Its own: ``credentials`` (the API key file, token expiry). Nothing here is imported until the backend
is chosen.
"""
