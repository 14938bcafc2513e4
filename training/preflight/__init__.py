"""Preflight: check the nodes a job actually got, before step 1, and stop on a bad one.

    torchrun ... -m training.preflight --expect intra_busbw=288,inter_busbw=225,tflops=445 --json out.json
    torchrun ... -m training.finetune --preflight --preflight_expect intra_busbw=288,... <flags>

What it measures (every rank, NCCL on CUDA, gloo on CPU):

- all-gather, reduce-scatter and all-reduce over a range of sizes, **within each node** (the
  ranks of one torchrun agent, ``GROUP_RANK``) and **across nodes**, node pairs in two rounds
  ((0,1), (2,3), ... then (1,2), (3,4), ..., (N-1,0)) so a slow link is named by its two ends,
  plus the whole world when there are more than two nodes. Reported as nccl-tests does
  (NVIDIA/nccl-tests doc/PERFORMANCE.md): ``algbw = S / t`` with S the full tensor (for
  all-gather and reduce-scatter ``count per rank x n``), ``busbw = algbw x 2(n-1)/n`` for
  all-reduce and ``algbw x (n-1)/n`` for all-gather and reduce-scatter. t is the slowest rank's
  mean over the timed iterations;
- dense matmul TFLOP/s (2 n^3 per product; bf16 on CUDA, fp32 on CPU) and memory bandwidth
  (a device-to-device copy moves 2 x its bytes) of each rank's device, every rank at once
  after a barrier, the median of rounds of ``--iters`` calls over at least ``DEVICE_MIN_S``;
- the network NCCL picked on every rank (``Using network OFI`` / ``Libfabric`` / ``AWS
  Libfabric`` vs ``Socket``) and, under OFI, the libfabric provider (``efa``), read from NCCL's
  INFO log when the job writes one (``NCCL_DEBUG_FILE``) or from ``NCCL_NET``, which NCCL
  honours strictly (it fails to initialise rather than fall back); GPUs per node; ECC,
  row-remapping and XID state where ``nvidia-smi`` and the kernel log are readable.

Expectations (``--expect``) come from the instance catalog when the job is rendered
(``planner.expect``); below any of them the check exits 3 after printing ONE line naming the
node(s) and the link, e.g.::

    preflight: FAILED inter-node ip-10-1-2-3 <-> ip-10-1-7-9: all_reduce busbw 4.1 GB/s < 225.0 GB/s expected

As the gate of ``finetune --preflight`` (every start of a job's workers, before the
trainer is built) the node-local checks (``gpus``, ``efa``) run first, exchanged over gloo
(``measurement.census``), so a node without EFA devices is named before any NCCL communicator
exists; the line is ``preflight failed on node ip-10-1-2-3: EFA devices 0/32``, also
written as the container's termination message (``cli.termination_log``). ``efa=N`` in the
expectations checks the EFA (verbs) devices each node's container got (``health.efa_devices``).

The report (JSON and a table) goes to stdout / ``--json``; ``training.prometheus`` exports it.
Imports torch only inside functions, so ``training.config`` can validate ``--preflight_expect``.

Modules: ``collectives`` (nccl-tests' arithmetic, the calls, the links), ``device`` (matmul,
memory bandwidth, the timer), ``transport`` (the network NCCL picked), ``health`` (ECC,
row remaps, XIDs), ``measurement`` (one run on every rank -> the report), ``verdict``
(expectations, failure lines, table, summary), ``cli`` (``check``, ``gate``, the command line).
"""

from __future__ import annotations

from training.preflight.cli import (
    FAILED_EXIT,
    GATE_LINK_TIMEOUT_S,
    TERMINATION_LOG_ENV,
    check,
    gate,
    gate_line,
    main,
    termination_log,
)
from training.preflight.collectives import (
    OPS,
    SCOPES,
    Link,
    algbw_gbps,
    bus_factor,
    busbw_gbps,
    links,
)
from training.preflight.device import DEVICE_MIN_S, matmul_tflops, memory_gbps
from training.preflight.health import (
    EFA_DEVICE_GLOB,
    EFA_DEVICE_GLOB_ENV,
    FATAL_XIDS,
    REMAP_QUERY,
    SMI_QUERY,
    efa_devices,
    gpu_health,
    gpus_from_smi_csv,
    xids_from_kernel_log,
)
from training.preflight.measurement import (
    Census,
    Options,
    census,
    default_sizes,
    measure,
    node_report,
    parse_size,
)
from training.preflight.transport import (
    detect_transport,
    nccl_debug_file,
    net_name,
    ofi_provider_from_nccl_log,
    transport_from_nccl_log,
)
from training.preflight.verdict import (
    Expect,
    Problem,
    failures,
    merge_expect,
    parse_expect,
    problems,
    summary,
    table,
)

__all__ = [
    "DEVICE_MIN_S",
    "EFA_DEVICE_GLOB",
    "EFA_DEVICE_GLOB_ENV",
    "FAILED_EXIT",
    "FATAL_XIDS",
    "GATE_LINK_TIMEOUT_S",
    "OPS",
    "REMAP_QUERY",
    "SCOPES",
    "SMI_QUERY",
    "TERMINATION_LOG_ENV",
    "Census",
    "Expect",
    "Link",
    "Options",
    "Problem",
    "algbw_gbps",
    "bus_factor",
    "busbw_gbps",
    "census",
    "check",
    "default_sizes",
    "detect_transport",
    "efa_devices",
    "failures",
    "gate",
    "gate_line",
    "gpu_health",
    "gpus_from_smi_csv",
    "links",
    "main",
    "matmul_tflops",
    "measure",
    "memory_gbps",
    "merge_expect",
    "nccl_debug_file",
    "net_name",
    "node_report",
    "ofi_provider_from_nccl_log",
    "parse_expect",
    "parse_size",
    "problems",
    "summary",
    "table",
    "termination_log",
    "transport_from_nccl_log",
    "xids_from_kernel_log",
]
