"""A real Kubernetes control plane on this machine, built from Go modules (docs/adr/0009).

``eks-fsdp controlplane build`` builds the binaries into a cache outside the checkout;
``eks-fsdp controlplane up`` starts etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kwok with fake GPU nodes shaped like the stacks' node groups, the Kubeflow
training operator and Kueue, all on 127.0.0.1, and prints the kubeconfig path; Ctrl-C stops
everything. The tests use the same ``ControlPlane`` as a session fixture
(``tests/controlplane/conftest.py``).

Standard library, PyYAML and the ``openssl`` command only: no Pulumi, no torch, no Kubernetes
client library.
"""
