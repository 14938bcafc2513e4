"""The local runner: a PyTorchJob run on this machine, for real (``eks-fsdp local``).

The job is the one the cluster gets (``workloads.specs``); only what cannot exist here is
swapped. A real etcd 3.5 on loopback, one ``torchrun`` agent per worker "pod" with the
environment the training operator injects, faults that rehearse the cluster's, a summary, and
optionally a real Prometheus with the cluster's rules. Imports no Pulumi.

API: ``localrun.runner.Runner(LocalOptions(...)).run()`` runs a stack's job, ``.run_job(job,
device)`` any ``JobSettings``; both return a ``localrun.result.RunResult``
(``localrun.summary.summary`` prints it). Modules: ``cli`` (the command line), ``options``
(``LocalOptions``, ``Fault``), ``job`` (stack -> local settings), ``runner`` (the run and its
monitor loop), ``pods`` (the agents, kubelet and operator behaviour), ``procs`` (process trees),
``faults`` (injection and its figures), ``result``, ``summary``, ``etcd_server``,
``operator_env``, ``prometheus`` (the ``--prometheus`` hook).
"""
