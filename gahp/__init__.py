"""podgahp: a GAHP server that turns HTCondor grid-universe pilot jobs into Kubernetes pods or Lancium jobs."""

__version__ = "0.1.0"
