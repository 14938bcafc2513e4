"""Workloads of the project: etcd, the Kubeflow training operator, the PyTorchJob, debug tools.

``workloads.specs`` holds pure functions from typed settings to Kubernetes objects (plain dicts,
never a pulumi import); the modules beside it are Pulumi components that only wrap those specs,
plus ``workloads.render`` (YAML for kubectl/GitOps) and ``workloads.local`` (the same PyTorchJob run
on one machine against a real etcd).
"""
