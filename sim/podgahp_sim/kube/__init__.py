"""The simulator's parts with a real Kubernetes control plane: Kubernetes' own etcd, kube-apiserver,
kube-controller-manager and kube-scheduler (``controlplane``, its certificates in ``pki``), the
simulated kubelet as a node of any API server (``node``, its HTTPS endpoint ``kubeletapi``, the few
REST calls it makes ``client``), and the two together (``cluster``: ``podgahp sim k8s --control-plane``).

Nothing here imports the product (``gahp``); the control plane's binaries come from a directory given
(``make k8s-control-plane`` builds one from Debian's sources).
"""
