"""The network NCCL picked, read from what NCCL says: its INFO log (``NCCL_DEBUG_FILE``) or
``NCCL_NET``. Parsers are pure and tested on captured text."""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

_USING_NETWORK = re.compile(r"NCCL INFO Using network (.+?)\s*$", re.M)
"""NCCL's choice of network module (src/init.cc: ``INFO(NCCL_INIT, "Using network %s",
...)``): ``Socket``, ``IB`` or a plugin's own name. aws-ofi-nccl calls itself ``AWS Libfabric``
(1.11.0 and before), ``Libfabric`` (later), or ``OFI`` / ``AWS Libfabric`` when NCCL_NET asks for
that name (src/nccl_ofi_interface_nvidia.c, ``nvidia_plugin_name_fixup``)."""
_VIA_NET = re.compile(r"via NET/([A-Za-z][A-Za-z ]*?)/\d")
"""Connection lines: ``Channel 00/0 : 0[0] -> 8[0] [send] via NET/AWS Libfabric/0``,
``... via NET/Socket/0``, ``... via NET/IB/0``."""
_OFI_PROVIDER = re.compile(r"NET/OFI Selected [Pp]rovider is ([A-Za-z0-9_;+-]+)")
"""aws-ofi-nccl's ``NET/OFI Selected Provider is efa (found 4 nics)``: the libfabric provider
under the plugin. ``efa`` on EFA instances; ``tcp`` / ``sockets`` would carry NCCL over TCP
behind an ``OFI`` network name."""


def net_name(raw: str) -> str:
    """A network module's name as this module reports it: ``OFI``, ``IB``, ``Socket`` or raw."""
    low = raw.strip().lower()
    if low in ("ofi", "libfabric", "aws libfabric"):
        return "OFI"
    if low == "ib":
        return "IB"
    if low == "socket":
        return "Socket"
    return raw.strip()


def transport_from_nccl_log(text: str) -> str | None:
    """The network transport an NCCL INFO log shows (``OFI``, ``IB``, ``Socket``), or None.

    ``Using network ...`` lines (the module NCCL selected) decide; without one, the
    connection lines (``via NET/...``). Socket anywhere wins: a log with one communicator on
    Socket is a job with one slow link. aws-ofi-nccl's other ``NET/OFI`` lines do not count:
    the plugin prints them also when it fails to initialise and NCCL falls back to Socket
    (NVIDIA/nccl#229: "NET/OFI Could not find any optimal provider" ... "Using network Socket").
    """
    names = {net_name(m) for m in _USING_NETWORK.findall(text)}
    if not names:
        names = {net_name(m) for m in _VIA_NET.findall(text)}
    for name in ("Socket", "IB", "OFI"):
        if name in names:
            return name
    return sorted(names)[0] if names else None


def ofi_provider_from_nccl_log(text: str) -> str | None:
    """The libfabric provider aws-ofi-nccl selected (``efa``), or None when the log has none."""
    found = _OFI_PROVIDER.findall(text)
    return found[-1] if found else None


def nccl_debug_file(template: str, hostname: str, pid: int) -> str:
    """``NCCL_DEBUG_FILE`` expanded as NCCL's src/debug.cc does: ``%h`` the host name up to its
    first dot (``getHostName(hostname, 1024, '.')``), ``%p`` the process id, ``%%`` a percent
    sign; any other ``%x`` stays as it is."""
    host = hostname.split(".", 1)[0]
    out, i = [], 0
    while i < len(template):
        ch = template[i]
        if ch != "%" or i + 1 >= len(template):
            out.append(ch)
            i += 1
            continue
        nxt = template[i + 1]
        out.append({"%": "%", "h": host, "p": str(pid)}.get(nxt, "%" + nxt))
        i += 2
    return "".join(out)


def detect_transport(backend: str, env: dict[str, str] | os._Environ[str]) -> dict[str, str | None]:
    """What carries inter-node traffic, and how we know.

    gloo: TCP. NCCL: the INFO log in ``NCCL_DEBUG_FILE`` when present (``nccl_debug_file``:
    this host and process), else ``NCCL_NET``: NCCL
    fails to initialise when the named network cannot be used (NCCL env docs, NCCL_NET: "make
    sure NCCL uses an external plugin and doesn't automatically fall back on the internal IB or
    Socket implementation"), so a collective that completed under NCCL_NET=OFI ran on the OFI
    plugin. ``provider``: the libfabric provider under OFI, when the log names it.
    """
    if "nccl" not in backend:
        return {"transport": "gloo/tcp", "source": "backend", "provider": None}
    log = env.get("NCCL_DEBUG_FILE", "")
    if log:
        path = Path(nccl_debug_file(log, socket.gethostname(), os.getpid()))
        if path.is_file():
            text = path.read_text(errors="replace")
            found = transport_from_nccl_log(text)
            if found:
                return {
                    "transport": found,
                    "source": str(path),
                    "provider": ofi_provider_from_nccl_log(text) if found == "OFI" else None,
                }
    net = env.get("NCCL_NET", "")
    if net:
        return {"transport": net_name(net), "source": "NCCL_NET", "provider": None}
    return {"transport": None, "source": None, "provider": None}
