"""``make demo``: a local CE on a simulated Kubernetes cluster, pilots flowing through it."""
