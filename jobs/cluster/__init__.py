"""Jobs on a cluster: a PyTorchJob (``backend``) or a Trainer v2 TrainJob (``trainjob``) through
the Kubernetes API (``kube``), as the training operator (``operator``), Kueue (``jobs.queue``)
and the pods (``logs``, ``metrics``) report them."""
