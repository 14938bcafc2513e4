"""The preflight: nccl-tests' bandwidth arithmetic, its parsers, its verdict, and real runs.

If this fails, a job could start on a node with a slow link (or NCCL on TCP sockets) without
anyone noticing, or the preflight would stop a healthy job, or its figures would not be the
ones nccl-tests prints (so nobody could compare them with a cluster's nccl-tests runs).

Formulas: NVIDIA/nccl-tests doc/PERFORMANCE.md ("Summary": all-reduce busbw = algbw x
2(n-1)/n, all-gather and reduce-scatter algbw x (n-1)/n, S the full array). The multi-node
run is real: two torchrun agents (static rendezvous, --node_rank 0 and 1, so GROUP_RANK tells
the "nodes" apart) of two gloo processes each on this machine. Nothing is mocked; the NCCL,
nvidia-smi and kernel-log parsers read text in the formats those tools print (no GPU here).
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.training.helpers import PYTHON, REPO, TINY, child_env, free_port, merge, run, run_dirs
from training.config import ConfigError, parse_args
from training.preflight import (
    Expect,
    bus_factor,
    busbw_gbps,
    detect_transport,
    failures,
    gpus_from_smi_csv,
    links,
    ofi_provider_from_nccl_log,
    parse_expect,
    parse_size,
    summary,
    transport_from_nccl_log,
    xids_from_kernel_log,
)


def test_bus_bandwidth_is_nccl_tests_correction_of_the_algorithm_bandwidth() -> None:
    # 1 GiB all-reduce in 5 ms on 8 ranks: algbw 214.7 GB/s, busbw x 2*7/8 = 375.8 GB/s.
    assert busbw_gbps("all_reduce", 8, 2**30, 5e-3) == pytest.approx(2**30 / 5e-3 / 1e9 * 1.75)
    assert busbw_gbps("all_gather", 16, 2**30, 5e-3) == pytest.approx(2**30 / 5e-3 / 1e9 * 15 / 16)
    assert bus_factor("reduce_scatter", 2) == 0.5
    assert bus_factor("all_reduce", 1) == 0.0  # one rank moves nothing
    with pytest.raises(ValueError, match="op 'broadcast'"):
        bus_factor("broadcast", 4)


def test_expectations_round_trip_and_bad_input_names_the_key() -> None:
    e = parse_expect("gpus=8,intra_busbw=216,inter_busbw=180.5,net=OFI,tflops=445,mem_gbps=1407")
    assert e == Expect(
        gpus=8, intra_busbw=216.0, inter_busbw=180.5, net="OFI", tflops=445.0, mem_gbps=1407.0
    )
    assert parse_expect(e.to_arg()) == e
    assert parse_expect("") == Expect()
    for text, culprit in (
        ("intra_bw=3", "'intra_bw=3'"),
        ("tflops=fast", "tflops='fast'"),
        ("tflops=-1", "tflops='-1'"),
        ("gpus=8,gpus=4", "gpus: given twice"),
        ("net=O F I", "net='O F I'"),
    ):
        with pytest.raises(ValueError, match=culprit):
            parse_expect(text)
    assert parse_size("64K") == 65536 and parse_size("16M") == 16 * 2**20
    with pytest.raises(ValueError, match="size '16 MB/s'"):
        parse_size("16 MB/s")


def test_finetune_flags_validate_the_thresholds_in_one_line() -> None:
    cfg = parse_args(["--preflight", "--preflight_expect=tflops=445,net=OFI"])
    assert cfg.preflight and cfg.preflight_expect == "tflops=445,net=OFI"
    with pytest.raises(ConfigError) as err:
        parse_args(["--preflight", "--preflight_expect=tflops=x"])
    assert str(err.value) == "--preflight_expect: tflops='x': not a number"
    with pytest.raises(ConfigError, match="--preflight_expect: only used with --preflight"):
        parse_args(["--preflight_expect=tflops=1"])


def test_transport_is_read_from_nccl_info_lines() -> None:
    # Line formats of NCCL 2.2x INFO output and of aws-ofi-nccl (NET/OFI ...).
    efa = (
        "ip-10-1-2-3:41:41 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.13.2-aws\n"
        "ip-10-1-2-3:41:41 [0] NCCL INFO NET/OFI Selected Provider is efa (found 4 nics)\n"
        "ip-10-1-2-3:41:41 [0] NCCL INFO Using network AWS Libfabric\n"
    )
    sockets = (
        "ip-10-1-2-3:41:41 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so\n"
        "ip-10-1-2-3:41:41 [0] NCCL INFO NET/Socket : Using [0]eth0:10.1.2.3<0>\n"
        "ip-10-1-2-3:41:41 [0] NCCL INFO Using network Socket\n"
    )
    assert transport_from_nccl_log(efa) == "OFI"
    assert transport_from_nccl_log(sockets) == "Socket"
    assert transport_from_nccl_log("NCCL INFO Using network IB\n") == "IB"
    assert transport_from_nccl_log("NCCL INFO cudaDriverVersion 12080\n") is None
    assert ofi_provider_from_nccl_log(efa) == "efa"
    # aws-ofi-nccl after 1.11 calls itself "Libfabric", or "OFI" when NCCL_NET=OFI asks for it
    # (src/nccl_ofi_interface_nvidia.c, nvidia_plugin_name_fixup)
    assert transport_from_nccl_log("h:1:1 [0] NCCL INFO Using network Libfabric\n") == "OFI"
    assert transport_from_nccl_log("h:1:1 [0] NCCL INFO Using network OFI\n") == "OFI"
    # The plugin loads but finds no provider, NCCL falls back to sockets (NVIDIA/nccl#229):
    # its NET/OFI lines must not count as OFI.
    fallback = (
        "h:1:1 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.13.2-aws\n"
        "h:1:1 [0] get_ofi_provider:312 NCCL WARN NET/OFI Could not find any optimal provider\n"
        "h:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.1.2.3<0>\n"
        "h:1:1 [0] NCCL INFO Using network Socket\n"
    )
    assert transport_from_nccl_log(fallback) == "Socket"
    # two communicators in one log, one on sockets: Socket wins whatever the order
    assert transport_from_nccl_log(efa + sockets) == "Socket"
    assert transport_from_nccl_log(sockets + efa) == "Socket"
    # without a "Using network" line, the connection lines tell
    via = "h:1:1 [0] NCCL INFO Channel 00/0 : 7[7] -> 8[0] [send] via NET/AWS Libfabric/0\n"
    assert transport_from_nccl_log(via) == "OFI"
    assert transport_from_nccl_log(via.replace("AWS Libfabric", "Socket")) == "Socket"
    tcp = efa.replace("Provider is efa", "Provider is tcp;ofi_rxm")
    assert ofi_provider_from_nccl_log(tcp) == "tcp;ofi_rxm"


def test_transport_from_nccl_net_or_the_hosts_debug_file(tmp_path: Path) -> None:
    """NCCL_NET takes the names NCCL_NET accepts (case-insensitive; aws-ofi-nccl answers to
    "OFI" and "AWS Libfabric"); NCCL_DEBUG_FILE's %h and %p are this host and process."""
    import os
    import socket

    assert detect_transport("gloo", {})["transport"] == "gloo/tcp"
    for net in ("OFI", "ofi", "AWS Libfabric", "Libfabric"):
        assert detect_transport("nccl", {"NCCL_NET": net}) == {
            "transport": "OFI",
            "source": "NCCL_NET",
            "provider": None,
        }
    assert detect_transport("nccl", {"NCCL_NET": "socket"})["transport"] == "Socket"
    assert detect_transport("nccl", {})["transport"] is None
    # NCCL's debug.cc: %h is the host name up to its first dot, %% a percent sign
    from training.preflight import nccl_debug_file

    assert nccl_debug_file("/l/%h.%p.%%.%x", "ip-10-1-2-3.ec2.internal", 41) == (
        "/l/ip-10-1-2-3.41.%.%x"
    )
    log = tmp_path / f"nccl.{socket.gethostname().split('.')[0]}.{os.getpid()}.log"
    log.write_text(
        "h:1:1 [0] NCCL INFO NET/OFI Selected Provider is tcp (found 1 nics)\n"
        "h:1:1 [0] NCCL INFO Using network AWS Libfabric\n"
    )
    env = {"NCCL_DEBUG_FILE": str(tmp_path / "nccl.%h.%p.log"), "NCCL_NET": "OFI"}
    assert detect_transport("cpu:gloo,cuda:nccl", env) == {
        "transport": "OFI",
        "source": str(log),
        "provider": "tcp",
    }


def test_gpu_health_parsers() -> None:
    # --query-gpu=index,pci.bus_id,ecc.errors.uncorrected.volatile.total, and the row remapper's
    # own query (--query-remapped-rows=gpu_bus_id,remapped_rows.pending,remapped_rows.failure)
    smi = "0, 00000000:53:00.0, 0\n1, 00000000:64:00.0, 3\n2, 00000000:75:00.0, [N/A]\n"
    remap = "00000000:53:00.0, 1, 0\n00000000:64:00.0, 0, 1\n"
    gpus = gpus_from_smi_csv(smi, remap)
    assert [
        (g["index"], g["ecc_uncorrected"], g["row_remap_pending"], g["row_remap_failure"])
        for g in gpus
    ] == [(0, 0, True, False), (1, 3, False, True), (2, None, None, None)]
    assert [g["row_remap_failure"] for g in gpus_from_smi_csv(smi)] == [None, None, None]
    kernel = (
        "[1234.5] NVRM: Xid (PCI:0000:53:00): 79, pid=1234, GPU has fallen off the bus.\n"
        "[1240.0] NVRM: Xid (PCI:0000:64:00): 48, pid=99, An uncorrectable double bit error\n"
    )
    assert xids_from_kernel_log(kernel) == [
        {"pci": "0000:53:00", "xid": 79},
        {"pci": "0000:64:00", "xid": 48},
    ]


def test_a_failed_nvidia_smi_query_is_reported_not_skipped() -> None:
    """A driver that rejects a field makes nvidia-smi exit non-zero: the report must say the
    GPU state is unknown instead of showing a clean node (``false`` stands in for a rejecting
    nvidia-smi: a real program that exits 1)."""
    import shutil

    from training.preflight import table
    from training.preflight.health import _run_smi

    false = shutil.which("false")
    assert false is not None
    out, why = _run_smi(false, "--query-remapped-rows=gpu_bus_id")
    assert out is None and why == "--query-remapped-rows=gpu_bus_id: exit 1"
    report = _report(300.0, "OFI")
    report.update(world_size=16, devices=[], collectives=[])
    report["health"]["b"]["errors"] = [why]
    assert table(report).splitlines()[-1] == (
        "node b: nvidia-smi --query-remapped-rows=gpu_bus_id: exit 1 "
        "(ECC / row-remap state unknown)"
    )


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 16])
def test_links_cover_every_node_and_every_neighbouring_pair_in_disjoint_rounds(n: int) -> None:
    nodes = [(f"n{i}", [2 * i, 2 * i + 1]) for i in range(n)]
    rounds = links(nodes)
    for rnd in rounds:
        used = [r for link in rnd for r in link.ranks]
        assert len(used) == len(set(used)), "links of one round must not share ranks"
    intra = {link.name for rnd in rounds for link in rnd if link.scope == "intra"}
    assert intra == {f"n{i}" for i in range(n)}
    pairs = {link.name for rnd in rounds for link in rnd if link.scope == "inter"}
    expected = {f"n{i} <-> n{i + 1}" for i in range(n - 1)}
    if n > 2:
        expected.add(f"n{n - 1} <-> n0")
    assert pairs == expected
    world = [link for rnd in rounds for link in rnd if link.scope == "world"]
    assert len(world) == (1 if n > 2 else 0)


def test_only_hardware_xids_fail_a_node() -> None:
    report = _report(300.0, "OFI")
    report["health"]["b"]["xids"] = [{"pci": "0000:53:00", "xid": 13}]
    assert failures(report, Expect()) == []  # an application's illegal address: not the node
    # a row remapped successfully: pending until the next reset, the GPU stays usable
    report["health"]["b"]["xids"].append({"pci": "0000:53:00", "xid": 63})
    assert failures(report, Expect()) == []
    report["health"]["b"]["xids"].append({"pci": "0000:64:00", "xid": 79})
    report["health"]["a"]["gpus"] = [
        {"index": 3, "pci": "x", "ecc_uncorrected": 2, "row_remap_failure": False},
        # pending until the next reset; "won't affect future work on the GPU" (NVML docs)
        {"index": 4, "pci": "y", "ecc_uncorrected": 0, "row_remap_pending": True},
    ]
    assert failures(report, Expect()) == [
        "node a GPU 3: 2 uncorrected ECC errors",
        "node b: XID 79 on GPU 0000:64:00 (needs a GPU reset)",
    ]


def _report(inter_busbw: float, transport: str | None) -> dict[str, Any]:
    def row(scope: str, link: str, op: str, nbytes: int, busbw: float) -> dict[str, Any]:
        return {
            "scope": scope,
            "link": link,
            "ranks": 16,
            "op": op,
            "bytes": nbytes,
            "time_us": 1.0,
            "algbw_gbps": busbw,
            "busbw_gbps": busbw,
        }

    return {
        "backend": "cpu:gloo,cuda:nccl",
        "nodes": [
            {"name": "a", "ranks": list(range(8))},
            {"name": "b", "ranks": list(range(8, 16))},
        ],
        "transport": {"transport": transport, "source": "NCCL_NET"},
        "collectives": [
            row("intra", "a", "all_reduce", 2**28, 300.0),
            row("inter", "a <-> b", "all_reduce", 2**20, 1.0),  # small sizes are latency-bound
            row("inter", "a <-> b", "all_reduce", 2**28, inter_busbw),
        ],
        "devices": [
            {
                "rank": r,
                "node": "a" if r < 8 else "b",
                "matmul_tflops": 600.0,
                "memory_gbps": 2600.0,
            }
            for r in range(16)
        ],
        "health": {"a": {"gpus": [], "xids": None}, "b": {"gpus": [], "xids": []}},
    }


def test_verdict_names_the_link_and_judges_the_largest_size_only() -> None:
    expect = parse_expect("gpus=8,intra_busbw=216,inter_busbw=180,net=OFI,tflops=445")
    assert failures(_report(300.0, "OFI"), expect) == []
    slow = failures(_report(12.5, "OFI"), expect)
    assert slow == [
        "inter-node a <-> b: all_reduce busbw 12.5 GB/s < 180.0 GB/s expected (256 MiB, 16 ranks)"
    ]
    tcp = failures(_report(300.0, "Socket"), expect)
    assert tcp == [
        "inter-node transport on every node: NCCL uses Socket (source NCCL_NET), expected OFI"
    ]
    # one node fell back (each rank's NCCL picks its own network): that node is named
    one_node = _report(300.0, "OFI")
    one_node["transport_by_node"] = {
        "a": {"transport": "OFI", "source": "NCCL_NET", "provider": None},
        "b": {"transport": "Socket", "source": "/tmp/nccl.b.log", "provider": None},
    }
    assert failures(one_node, expect) == [
        "inter-node transport on b: NCCL uses Socket (source /tmp/nccl.b.log), expected OFI"
    ]
    # OFI on libfabric's tcp provider is TCP under another name
    one_node["transport_by_node"]["b"] = {"transport": "OFI", "source": "l", "provider": "tcp"}
    assert failures(one_node, expect) == [
        "inter-node transport on b: NCCL's OFI plugin uses the libfabric provider tcp "
        "(source l), expected efa"
    ]
    summ = summary(_report(150.0, "OFI"))
    assert summ == {
        "intra_busbw_gbps": 300.0,
        "inter_busbw_gbps": 150.0,
        "matmul_tflops": 600.0,
        "memory_gbps": 2600.0,
    }


def test_prometheus_serves_the_last_preflight_next_to_the_step_metrics() -> None:
    from training import prometheus

    report = _report(12.5, "OFI")
    report["passed"] = False
    prometheus.set_preflight(report)
    sink = prometheus.PrometheusSink(0, addr="127.0.0.1", env={})
    try:
        text = urllib.request.urlopen(sink.url, timeout=10).read().decode()
    finally:
        sink.close()
        prometheus.set_preflight(None)  # type: ignore[arg-type]
    assert (
        'eksfsdp_preflight_busbw_gbytes_per_second{bytes="268435456",link="a <-> b",'
        'op="all_reduce",scope="inter"} 12.5' in text
    )
    assert 'eksfsdp_preflight_matmul_tflops{node="b",rank="15"} 600.0' in text
    assert "eksfsdp_preflight_passed 0.0" in text


@pytest.mark.slow
def test_two_nodes_of_two_ranks_measure_intra_and_inter_and_fail_on_the_named_link(
    tmp_path: Path,
) -> None:
    port = free_port()
    out = tmp_path / "preflight.json"
    args = ["--sizes=64K,1M", "--iters=3", "--matmul_n=256", "--expect=inter_busbw=1e6,gpus=2"]
    procs = [
        subprocess.Popen(
            [
                PYTHON,
                "-m",
                "torch.distributed.run",
                "--nnodes=2",
                f"--node_rank={node}",
                "--nproc_per_node=2",
                "--master_addr=127.0.0.1",
                f"--master_port={port}",
                "-m",
                "training.preflight",
                *args,
                *([f"--json={out}"] if node == 0 else []),
            ],
            cwd=REPO,
            env=child_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for node in (0, 1)
    ]
    results = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] != [0, 0]
    report = json.loads(out.read_text())
    assert [n["ranks"] for n in report["nodes"]] == [[0, 1], [2, 3]]
    rows = report["collectives"]
    assert {(r["scope"], r["ranks"]) for r in rows} == {("intra", 2), ("inter", 4)}
    assert len(rows) == (2 + 1) * 3 * 2  # (2 nodes + 1 pair) x 3 ops x 2 sizes
    for r in rows:
        factor = (
            2 * (r["ranks"] - 1) / r["ranks"]
            if r["op"] == "all_reduce"
            else 0.5
            if r["ranks"] == 2
            else 0.75
        )
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * factor)
        assert r["algbw_gbps"] == pytest.approx(r["bytes"] / (r["time_us"] * 1e-6) / 1e9)
    assert len(report["devices"]) == 4 and all(d["matmul_tflops"] > 0 for d in report["devices"])
    assert report["passed"] is False
    line = [ln for ln in results[0][1].splitlines() if ln.startswith("preflight: FAILED")]
    assert len(line) == 1
    assert "inter-node " in line[0] and "/node0 <-> " in line[0] and "/node1:" in line[0]
    assert "< 1000000.0 GB/s expected" in line[0]


@pytest.mark.slow
def test_finetune_preflight_runs_before_step_one_and_stops_the_job(tmp_path: Path) -> None:
    base = merge(TINY, ["--max_train_step=1", "--batch_size_training=2"])
    ok = run(
        [PYTHON, "-m", "training.finetune", *merge(base, run_dirs(tmp_path, "ok")), "--preflight"]
    )
    assert ok.returncode == 0, ok.stderr[-3000:]
    out_ok = Path(run_dirs(tmp_path, "ok")[0].split("=", 1)[1])
    assert json.loads((out_ok / "preflight.json").read_text())["passed"] is True
    assert (out_ok / "metrics.jsonl").is_file()

    bad = run(
        [
            PYTHON,
            "-m",
            "training.finetune",
            *merge(base, run_dirs(tmp_path, "bad")),
            "--preflight",
            "--preflight_expect=tflops=1e9",
        ]
    )
    assert bad.returncode == 3
    out_bad = Path(run_dirs(tmp_path, "bad")[0].split("=", 1)[1])
    assert not (out_bad / "metrics.jsonl").exists(), "no step may run after a failed preflight"
    failed = [ln for ln in bad.stderr.splitlines() if ln.startswith("preflight failed on node ")]
    assert len(failed) == 1 and "matmul" in failed[0] and "< 1000000000.0 TFLOP/s" in failed[0]
