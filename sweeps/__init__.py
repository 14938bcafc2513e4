"""Scaling study: measured tokens/s per node count next to the capacity planner's prediction.

The functions ``notebooks/scaling.ipynb`` calls (the tests call the modules directly). Both modes
read their figures from Prometheus only, the same way (:mod:`sweeps.prometheus`):
:func:`~sweeps.prometheus.steady_throughput` evaluates ``rate()`` of global rank 0's counters
over the steps after the warm-up.

- :func:`measure_local` (:mod:`sweeps.local`): the stack's PyTorchJob on this machine, one
  torchrun agent per "pod", a real Prometheus; its data directory reopened and queried.
- :func:`measure_cloud` (:mod:`sweeps.cloud`): the paid path, with Pulumi's Automation API:
  prerequisites (:mod:`sweeps.prerequisites`), ``up`` per node count in a worker thread and
  SIGINT to the ``pulumi`` child on an interrupt (:mod:`sweeps.pulumi_ops`), Ready nodes,
  nodegroup health and ECR (:mod:`sweeps.aws`), job, pod and port-forward watch
  (:mod:`sweeps.cluster`), the stack file restored byte for byte (:mod:`sweeps.stackfile`),
  then a scale-back (or a destroy, the ECR repository emptied first).
- :func:`planner_prediction` and :func:`planner_before_after` (:mod:`sweeps.prediction`): the
  capacity planner's prediction for the same node counts, before and after calibration.
- :func:`scaling_table` and :func:`plot_scaling` (:mod:`sweeps.report`): efficiency vs the
  smallest count, and the PNG chart.

Only the standard library is imported here; Pulumi, matplotlib and the project's packages are
imported by the functions that need them.
"""

from __future__ import annotations

from sweeps.cloud import measure_cloud
from sweeps.common import (
    STEPS_BY_MODE,
    Measurement,
    PrerequisiteError,
    SweepError,
    save_results,
    to_json,
)
from sweeps.local import measure_local
from sweeps.prediction import planner_before_after, planner_prediction, planner_step_times
from sweeps.report import plot_scaling, scaling_table

__all__ = [
    "STEPS_BY_MODE",
    "Measurement",
    "PrerequisiteError",
    "SweepError",
    "measure_cloud",
    "measure_local",
    "planner_before_after",
    "planner_prediction",
    "planner_step_times",
    "plot_scaling",
    "save_results",
    "scaling_table",
    "to_json",
]
