"""GPU health a preflight judges: uncorrected ECC errors and row-remap state from
``nvidia-smi``, XIDs from the kernel log, where readable. Parsers are pure and tested on the
text those tools print."""

from __future__ import annotations

import re
import shutil
import subprocess
from typing import Any

FATAL_XIDS = frozenset({48, 64, 74, 79, 92, 94, 95, 119, 120})
"""XIDs whose resolution in NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors,
"Analyzing Xid Errors with the Xid Catalog") is a GPU reset or node service, not an application
restart: double-bit ECC (48), a page or row that could not be retired / remapped (64), NVLink
(74), fallen off the bus (79), excessive SBE (92), contained / uncontained ECC (94, 95), GSP
(119, 120). Others (13, 31, 43: an application's own faults) are reported but do not fail the
node. Nor does 63, a page retired or a row remapped successfully ("Dynamic Page Retirement",
docs.nvidia.com/deploy/dynamic-page-retirement): the remap is pending until the next GPU reset,
and "unaffected applications can continue running without affecting accuracy and performance,
and new workloads can be launched" (A100 GPU memory error management, "Error Recovery and
Response Flags"). The kernel log keeps it until reboot, so failing on it would keep a healthy
node out of every restart."""

_XID = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F:.]+)\): (\d+)")


def xids_from_kernel_log(text: str) -> list[dict[str, Any]]:
    """``NVRM: Xid (PCI:0000:10:1c): 79, pid=...`` lines -> [{"pci": ..., "xid": 79}, ...]."""
    return [{"pci": m.group(1), "xid": int(m.group(2))} for m in _XID.finditer(text)]


SMI_QUERY = "index,pci.bus_id,ecc.errors.uncorrected.volatile.total"
"""``nvidia-smi --query-gpu`` fields (``nvidia-smi --help-query-gpu``)."""
REMAP_QUERY = "gpu_bus_id,remapped_rows.pending,remapped_rows.failure"
"""``nvidia-smi --query-remapped-rows`` fields: the row remapper has its own query, as NVIDIA's
A100 GPU memory error management guide runs it (``nvidia-smi --query-remapped-rows=gpu_bus_id,
...,remapped_rows.pending,remapped_rows.failure --format=csv``); Ampere and newer only."""


def _smi_int(raw: str) -> int | None:
    return int(raw) if raw.isdigit() else None


def _smi_flag(raw: str) -> bool | None:
    low = raw.strip().lower()
    if low in ("yes", "1"):
        return True
    if low in ("no", "0"):
        return False
    return None  # [N/A], [Not Supported], empty


def gpus_from_smi_csv(text: str, remap: str = "") -> list[dict[str, Any]]:
    """``nvidia-smi --query-gpu=SMI_QUERY --format=csv,noheader,nounits`` (and the
    ``--query-remapped-rows=REMAP_QUERY`` output, matched by PCI bus id) -> one dict per GPU.

    ``[N/A]`` / ``[Not Supported]`` become None. A pending remap is reported, not judged (it
    takes effect at the next GPU reset and the GPU stays usable); a failed remap fails the node.
    """
    rows: dict[str, list[str]] = {}
    for line in remap.strip().splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) == 3:
            rows[cols[0].lower()] = cols
    out = []
    for line in text.strip().splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) != 3:
            continue
        r = rows.get(cols[1].lower())
        out.append(
            {
                "index": _smi_int(cols[0]),
                "pci": cols[1],
                "ecc_uncorrected": _smi_int(cols[2]),
                "row_remap_pending": _smi_flag(r[1]) if r else None,
                "row_remap_failure": _smi_flag(r[2]) if r else None,
            }
        )
    return out


def _run_smi(smi: str, query: str) -> tuple[str | None, str | None]:
    """(stdout, None) or (None, why): a failed query is reported, never silently skipped."""
    try:
        res = subprocess.run(
            [smi, query, "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"{query}: {e}"
    if res.returncode != 0:
        first = (res.stderr or res.stdout).strip().splitlines()
        return None, f"{query}: exit {res.returncode}{': ' + first[0] if first else ''}"
    return res.stdout, None


def gpu_health() -> dict[str, Any]:
    """ECC / row-remap state from nvidia-smi and XIDs from the kernel log, where readable."""
    health: dict[str, Any] = {"nvidia_smi": False, "gpus": [], "xids": None, "errors": []}
    smi = shutil.which("nvidia-smi")
    if smi:
        ecc, err = _run_smi(smi, f"--query-gpu={SMI_QUERY}")
        remap, err_remap = _run_smi(smi, f"--query-remapped-rows={REMAP_QUERY}")
        health["errors"] = [e for e in (err, err_remap) if e]
        if ecc is not None:
            health["nvidia_smi"] = True
            health["gpus"] = gpus_from_smi_csv(ecc, remap or "")
    dmesg = shutil.which("dmesg")
    if dmesg:  # containers usually cannot read the kernel log: then XIDs stay unknown (None)
        try:
            res = subprocess.run([dmesg], capture_output=True, text=True, timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired):
            res = None
        if res is not None and res.returncode == 0:
            health["xids"] = xids_from_kernel_log(res.stdout)
    return health


EFA_DEVICE_GLOB = "/dev/infiniband/uverbs*"
"""The verbs devices a container was given: one per EFA device. The EKS user guide ("Manage
EFA devices on Amazon EKS", device-management-efa) has the EFA device plugin manage "EFA device
allocation at ``/dev/infiniband``" (its MOFED note: a second plugin mounting every
``/dev/infiniband/uverbs*`` would oversubscribe them), and the EFA DRA driver (DRANET,
kubernetes-sigs/dranet ``pkg/driver`` NRI ``CreateContainer``) injects each allocated RDMA
device's ``/dev/infiniband/uverbsN`` character device into the container."""


EFA_DEVICE_GLOB_ENV = "EKS_FSDP_EFA_DEVICE_GLOB"
"""Overrides ``EFA_DEVICE_GLOB`` (a test gives each local "node" its own folder of devices)."""


def efa_devices(pattern: str | None = None) -> int:
    """How many EFA (verbs) devices this container sees; 0 without any.

    ``pattern``: a glob; None: ``$EKS_FSDP_EFA_DEVICE_GLOB`` or ``EFA_DEVICE_GLOB``.
    """
    import glob
    import os

    return len(glob.glob(pattern or os.environ.get(EFA_DEVICE_GLOB_ENV) or EFA_DEVICE_GLOB))
