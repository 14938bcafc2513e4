"""Pieces of the local runner (``python -m workloads.local``): a real etcd on loopback, the
environment the training operator injects into a worker pod, and the worker "pods" themselves
(one torchrun agent each, in its own process group)."""
