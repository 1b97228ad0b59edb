"""The rules every backend obeys, which the agent (:mod:`gahp.agent`) runs around every backend's verbs:
a pilot's provenance, the black-hole guard, cancels kept until done, the final answers, the job records,
the holds, who a remote object belongs to, the hops of a pilot's way and the health figures. Backends use
only the values of some of them (records, holds, identity, hops, the guard's settings)."""
