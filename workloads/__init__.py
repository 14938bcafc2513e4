"""Workloads of the project: etcd, the Kubeflow training operator, the PyTorchJob, debug tools.

``workloads.specs`` holds pure functions from typed settings to Kubernetes objects (plain dicts,
never a pulumi import); the modules beside it are Pulumi components that only wrap those specs,
plus two command lines over the specs: ``workloads.render`` (YAML for kubectl/GitOps) and
``workloads.scan`` (checkov over every stack's objects). The same PyTorchJob run on one machine
is the ``localrun`` package's.
"""
