"""The CE-wide tools, over every backend the CE uses: ``podgahp reap`` (reap, with the rules of orphans and
the job-ad attributes of jobads), ``podgahp q`` (q), ``podgahp health`` (health) and ``podgahp trace``
(trace), each backend's census gathered once (views)."""
