"""The Kubernetes backend: pilots as pods.

``backend`` (the :class:`~gahp.backends.base.Backend`: submit, status, cancel in one place) over
``settings`` (knobs and queues), ``identity`` (names, labels, whose pod is whose), ``pod`` (the pod
spec), ``schema`` (the spec checked against the client's models), ``api`` (the API calls and their
errors), ``watch`` (the pod cache), ``view`` (typed reads of a raw pod), ``state`` (the pod-to-job
state table), ``output`` (Out/Err from the pod), ``cancel`` (cancels retried in the background),
``ping`` (the set-up checks of ``BLAH_PING``), ``secret`` (the input Secret), ``retention`` (which
pods the GAHP's own clean-up deletes), ``census`` (the backend's CE-wide view: every pod of the CE
in every cluster, for ``podgahp reap``, ``q``, ``health`` and ``trace``), ``podtrace`` (the pod's
hops of ``podgahp trace``), ``resubmit`` (what a repeated submit does) and ``rights`` (the RBAC rules
the GAHP needs).
Nothing here is imported until the backend is chosen.
"""
