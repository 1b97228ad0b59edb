"""The Kubernetes backend: pilots as pods.

The modules every backend has, for the same concerns: ``backend`` (the
:class:`~gahp.backends.base.Backend`: submit, status, cancel in one place), ``settings`` (knobs and
queues), ``api`` (the API's client calls, through the kit's HTTP door), ``spec`` (the pod and its input
Secret from a pilot), ``submit`` (the ``Submitter``: one pod per sandbox, whatever answers get lost,
by the no-twice table), ``cache`` (the watch-fed copy of the pods status reads), ``state`` (the
pod-to-job state table, rows of the kit's shape), ``output`` (Out/Err from the pod), ``identity``
(names, labels, whose pod is whose), ``retention`` (which pods the GAHP's own clean-up deletes) and
``census`` (the backend's CE-wide view: every pod of the CE in every
cluster, for ``podgahp reap``, ``q``, ``health`` and ``trace``).

Its own: ``view`` (typed reads of a raw pod), ``schema`` (the spec checked against the client's
models), ``limits`` and ``wholenode`` (sizes a cluster can place), ``secret`` (the input Secret, and the proxy in it refreshed),
``sharing`` (one copy of equal values across pods), ``ping`` (the set-up checks of ``BLAH_PING``),
``rights`` (the RBAC rules the GAHP needs), ``clusters`` (the cluster registry: which cluster and
namespace a queue uses, their clients and watch copies) and ``podtrace`` (the pod's hops of ``podgahp trace``).
Nothing here is imported until the backend is chosen.
"""
