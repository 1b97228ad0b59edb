"""podgahp: a GAHP server that turns HTCondor grid-universe pilot jobs into Kubernetes pods or Lancium jobs."""

__version__ = "0.1.0"

#: Shown in the GAHP banner next to the version.
RELEASE_DATE = "Nov 21 2026"
