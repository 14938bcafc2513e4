"""``eks-fsdp doctor --stack STACK`` end to end, and its checks on this machine.

If this fails, ``doctor`` no longer stops a user before ``pulumi up`` on the shipped
placeholder reservation (or stops one whose account is right), the table loses the fix beside
a failure, the exit status stops being 1 on a failure, a missing secret (checked without
decrypting) or a missing ``docker buildx`` goes unnoticed, or a gated model without a token
is reported reachable.

What answers: moto's EC2 API on 127.0.0.1 (``ThreadedMotoServer``) for regions, zones,
addresses and VPCs; a botocore ``Stubber`` for ``describe_capacity_reservations`` and the
quota values (moto 5.2.5 implements neither for EC2); a loopback HTTP server speaking the
Hugging Face Hub's ``/api/models`` and ``/auth-check`` routes for the model (huggingface_hub
``HfApi.model_info`` / ``auth_check``, ``X-Error-Code: GatedRepo``); a fake ``docker`` script on PATH (no Docker here).
"""

from __future__ import annotations

import json
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from doctor.aws import EIP_QUOTA, VPC_QUOTA, Clients
from doctor.cli import main
from doctor.local import check_docker, check_model, check_secrets
from infra.config import load_stack_file
from infra.config.sources import REPO_ROOT
from tests.doctor.conftest import quota, reservation, stubbed

PLACEHOLDER = "cr-0fedcba9876543210"
GATED = "meta-llama/Llama-2-7b-chat-hf"
SHA = "01c7f73d771dfac7d292323805ebc428287df4f9"
TOKEN = "hf_loopback"


@pytest.fixture
def stack_root(tmp_path: Path) -> Path:
    """A copy of the project's stack files and p5-16 example job (the test edits secrets)."""
    for name in ("Pulumi.yaml", "Pulumi.p5-16.yaml"):
        shutil.copy(REPO_ROOT / name, tmp_path / name)
    (tmp_path / "jobs" / "examples").mkdir(parents=True)
    shutil.copy(REPO_ROOT / "jobs/examples/p5-16.yaml", tmp_path / "jobs/examples/p5-16.yaml")
    return tmp_path


def _set_secret(root: Path, key: str) -> None:
    """As `pulumi config set --secret KEY ...` leaves it: a `secure:` ciphertext."""
    path = root / "Pulumi.p5-16.yaml"
    path.write_text(path.read_text() + f"  eks-fsdp:{key}:\n    secure: v1:bG9vcGJhY2s=\n")


def _set_api_cidrs(root: Path) -> None:
    """As `pulumi config set --path 'apiPublicAccessCidrs[0]' 203.0.113.7/32` leaves it."""
    path = root / "Pulumi.p5-16.yaml"
    path.write_text(path.read_text() + "  eks-fsdp:apiPublicAccessCidrs:\n    - 203.0.113.7/32\n")


@pytest.fixture
def docker_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A `docker` script answering `docker buildx version` as buildx 0.x does (no Docker here)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "docker"
    script.write_text(
        '#!/bin/sh\n[ "$1 $2" = "buildx version" ] && '
        'echo "github.com/docker/buildx v0.20.0 a1b2c3d" && exit 0\nexit 1\n'
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return bin_dir


def _fake_pulumi(bin_dir: Path, body: str) -> None:
    """A ``pulumi`` script (no Pulumi CLI here) whose ``pulumi version`` runs ``body``."""
    script = bin_dir / "pulumi"
    script.write_text(f'#!/bin/sh\n[ "$1" = version ] || exit 2\n{body}\n')
    script.chmod(0o755)


@pytest.fixture
def pulumi_on_path(docker_on_path: Path) -> Path:
    """A ``pulumi`` that answers ``pulumi version`` as the CLI does (``v3.x.y``)."""
    from infra.versions import PULUMI_CLI_MIN

    _fake_pulumi(docker_on_path, f"echo v{PULUMI_CLI_MIN}")
    return docker_on_path


class Hub(BaseHTTPRequestHandler):
    """Stands in for the Hugging Face Hub (huggingface_hub 2.4.0's routes, ``hf_api.py``):
    ``GET /api/models/{repo}[/revision/{rev}]`` answers 200 with ``gated: "manual"`` whatever
    the token, as the real Hub answers a gated repository's info; ``GET
    /api/models/{repo}/auth-check`` (``HfApi.auth_check``) answers 401 ``X-Error-Code:
    GatedRepo`` without a token, 403 ``GatedRepo`` with a token lacking access, 200 with
    ``TOKEN`` (``utils/_http.py`` ``hf_raise_for_status`` reads ``X-Error-Code``)."""

    def do_GET(self) -> None:
        prefix = f"/api/models/{GATED}"
        path = self.path.split("?", 1)[0]
        auth = self.headers.get("Authorization")
        if not path.startswith(prefix):
            self._send(404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
        elif path == f"{prefix}/auth-check" and auth != f"Bearer {TOKEN}":
            code = 401 if auth is None else 403
            self._send(
                code,
                {"error": "Access to model is restricted"},
                {"X-Error-Code": "GatedRepo", "X-Error-Message": "Access restricted"},
            )
        elif path == f"{prefix}/auth-check":
            self._send(200, {})
        else:
            self._send(
                200,
                {"id": GATED, "modelId": GATED, "sha": SHA, "gated": "manual", "private": False},
            )

    def _send(self, code: int, body: dict, headers: dict | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def hub():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def online(monkeypatch: pytest.MonkeyPatch) -> None:
    """huggingface_hub reads ``HF_HUB_OFFLINE`` once, at import (``constants.py``; the test
    suite sets it): its copy is cleared for a test that talks to the loopback Hub."""
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)


def _clients(aws, found: dict | None) -> Clients:
    """moto for EC2 reads; Stubber for the reservation and the two quota values."""
    reservations, stub = stubbed("ec2")
    if found is None:
        stub.add_client_error(
            "describe_capacity_reservations",
            service_error_code="InvalidCapacityReservationId.NotFound",
            service_message=f"The capacity reservation ID '{PLACEHOLDER}' does not exist",
        )
    else:
        stub.add_response("describe_capacity_reservations", {"CapacityReservations": [found]})
    quotas, qstub = stubbed("service-quotas")
    qstub.add_response("get_service_quota", quota("ec2", EIP_QUOTA[1], 5.0))
    qstub.add_response("get_service_quota", quota("vpc", VPC_QUOTA[1], 5.0))
    return Clients(ec2=aws.client("ec2"), reservations=reservations, quotas=quotas)


def test_p5_16_placeholder_fails_then_a_matching_account_passes(
    aws, hub, online, stack_root, pulumi_on_path, monkeypatch, capsys
) -> None:
    """The issue's "done when": p5-16 with the shipped placeholder reservation exits 1 with a
    line naming the reservation and its fix; with a matching block, quotas, the secrets set,
    buildx present and the gated model reachable with the token, it exits 0."""
    monkeypatch.setenv("HF_ENDPOINT", hub)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    argv = ["--stack", "p5-16"]
    rc = main(argv, clients=_clients(aws, None), root=stack_root)
    out = capsys.readouterr().out
    assert rc == 1
    line = next(x for x in out.splitlines() if x.startswith("reservation p5-block"))
    assert "FAIL" in line and f"{PLACEHOLDER} does not exist" in line
    assert "fix: set gpuNodeGroups[p5-block].capacityReservationId" in line
    assert any(
        x.startswith("secret grafanaAdminPassword") and "FAIL" in x for x in out.splitlines()
    )
    model = next(x for x in out.splitlines() if x.startswith(f"model {GATED}"))
    assert "gated: no HF_TOKEN" in model and f"accept the licence at {hub}/{GATED}" in model
    cidrs = next(x for x in out.splitlines() if x.startswith("apiPublicAccessCidrs"))
    assert "FAIL" in cidrs and "pulumi config set --path 'apiPublicAccessCidrs[0]'" in cidrs

    _set_api_cidrs(stack_root)
    _set_secret(stack_root, "grafanaAdminPassword")
    _set_secret(stack_root, "hfToken")
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    rc = main([*argv, "--json"], clients=_clients(aws, reservation(PLACEHOLDER)), root=stack_root)
    report = json.loads(capsys.readouterr().out)
    statuses = {c["check"]: c["status"] for c in report["checks"]}
    assert rc == 0 and report["ok"] is True, report
    assert report["checks"][0]["check"] == "pulumi CLI"
    assert statuses == {
        "pulumi CLI": "ok",
        "apiPublicAccessCidrs": "ok",
        "region": "ok",
        "zones": "ok",
        "reservation p5-block": "ok",
        "quota P vCPUs": "skip",
        "quota Elastic IPs": "ok",
        "quota VPCs": "ok",
        "job p5-16.yaml": "ok",
        f"model {GATED}": "ok",
        "secret grafanaAdminPassword": "ok",
        "secret hfToken": "ok",
        "docker buildx": "ok",
    }
    model = next(c for c in report["checks"] if c["check"] == f"model {GATED}")
    assert SHA in model["detail"]


def test_unknown_stack_is_a_usage_error(capsys) -> None:
    """No AWS call: a stack without a file stops with one line listing the stacks, exit 2."""
    assert main(["--stack", "nope"], clients=Clients(None, None, None)) == 2
    err = capsys.readouterr().err.strip()
    stacks = sorted(p.name.split(".")[1] for p in REPO_ROOT.glob("Pulumi.*.yaml"))
    assert "p5-16" in stacks
    assert err == (
        f"eks-fsdp doctor: error: --stack nope: no stack file Pulumi.nope.yaml (stacks: {', '.join(stacks)})"
    )


def test_secrets_are_read_without_decrypting(stack_root) -> None:
    """A plaintext value is not a set secret; a `secure:` one is (nothing decrypts it)."""
    cfg = load_stack_file("p5-16", stack_root)
    (missing,) = [r for r in check_secrets(cfg, [], stack_root) if "grafana" in r.check]
    assert missing.status == "fail"
    assert missing.fix == "pulumi config set --secret grafanaAdminPassword ... --stack p5-16"
    _set_secret(stack_root, "grafanaAdminPassword")
    results = {r.check: r.status for r in check_secrets(cfg, [GATED], stack_root)}
    assert results == {"secret grafanaAdminPassword": "ok", "secret hfToken": "fail"}


def test_docker_without_buildx_fails(tmp_path, monkeypatch) -> None:
    """A `docker` whose `buildx` subcommand is missing (exit 1) fails with the install hint;
    no `docker` at all fails too; a stack without GPU groups needs none."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(
        "#!/bin/sh\necho \"docker: 'buildx' is not a docker command.\" >&2\nexit 1\n"
    )
    (bin_dir / "docker").chmod(0o755)
    cfg = load_stack_file("p5-16")
    result = check_docker(cfg, env={"PATH": str(bin_dir)})
    assert (
        result.status == "fail"
        and "exit 1: docker: 'buildx' is not a docker command." in result.detail
    )
    assert check_docker(cfg, env={"PATH": str(tmp_path / "empty")}).detail == "no docker on PATH"
    import dataclasses

    assert check_docker(dataclasses.replace(cfg, gpu_node_groups=()), env={}).status == "skip"


def test_model_offline_and_unknown(hub, online) -> None:
    """Unreachable Hub (a closed loopback port) or HF_HUB_OFFLINE: skipped (offline); a repo the
    Hub does not have: fail; the gated one with the token: ok and gated."""
    closed = check_model(GATED, env={"HF_ENDPOINT": "http://127.0.0.1:9"})[0]
    assert closed.status == "skip" and closed.detail.startswith("skipped (offline")
    assert check_model(GATED, env={"HF_HUB_OFFLINE": "1"})[0].detail == (
        "skipped (offline: HF_HUB_OFFLINE)"
    )
    assert check_model(GATED, env={"TRANSFORMERS_OFFLINE": "1"})[0].detail == (
        "skipped (offline: TRANSFORMERS_OFFLINE)"
    )
    missing = check_model("nobody/nothing", env={"HF_ENDPOINT": hub})[0]
    assert missing.status == "fail" and missing.detail.startswith("not found on")
    result, gated = check_model(GATED, env={"HF_ENDPOINT": hub, "HF_TOKEN": TOKEN})
    assert result.status == "ok" and gated is True


def test_gated_model_needs_an_accepted_token(hub, online) -> None:
    """The Hub shows a gated model's info to anyone: without a token, or with a token of an
    account that has not accepted the licence, the check fails on ``auth_check`` with the
    licence page and ``hfToken`` as the fix; the right token passes. A trailing ``/`` on
    ``HF_ENDPOINT`` is dropped as huggingface_hub's ``constants.ENDPOINT`` drops it."""
    fix = f"accept the licence at {hub}/{GATED} and set hfToken"
    none, gated = check_model(GATED, env={"HF_ENDPOINT": hub + "/"})
    assert (none.status, none.detail, gated) == ("fail", "gated: no HF_TOKEN", True)
    assert none.fix is not None and none.fix.startswith(fix)
    other, _ = check_model(GATED, env={"HF_ENDPOINT": hub, "HF_TOKEN": "hf_not_accepted"})
    assert (other.status, other.detail) == ("fail", "gated: the token is refused")
    assert other.fix == none.fix
    ok, _ = check_model(GATED, env={"HF_ENDPOINT": hub, "HF_TOKEN": TOKEN})
    assert ok.status == "ok" and SHA in ok.detail


def test_a_secret_alert_receiver_needs_alerts_secret(stack_root) -> None:
    """Receiver slack/pagerduty/webhook reads its URL or key from `alertsSecret`: doctor asks
    for it before `pulumi up` (where the program would stop on it); receiver sns needs none."""
    import dataclasses

    cfg = load_stack_file("p5-16", stack_root)
    _set_secret(stack_root, "grafanaAdminPassword")
    for receiver, expected in (("slack", {"fail"}), ("sns", set()), ("none", set())):
        alerts = dataclasses.replace(cfg.observability.alerts, receiver=receiver)
        obs = dataclasses.replace(cfg.observability, alerts=alerts)
        results = check_secrets(dataclasses.replace(cfg, observability=obs), [], stack_root)
        got = {r.status for r in results if r.check == "secret alertsSecret"}
        assert got == expected, receiver
    _set_secret(stack_root, "alertsSecret")
    alerts = dataclasses.replace(cfg.observability.alerts, receiver="pagerduty")
    obs = dataclasses.replace(cfg.observability, alerts=alerts)
    (ok,) = [
        r
        for r in check_secrets(dataclasses.replace(cfg, observability=obs), [], stack_root)
        if r.check == "secret alertsSecret"
    ]
    assert (
        ok.status == "ok"
        and ok.detail == "set (secure), observability.alerts.receiver is pagerduty"
    )


def test_doctor_reads_the_job_file_new_stack_writes(tmp_path: Path) -> None:
    """``new-stack NAME`` writes ``jobs/NAME.yaml``; ``doctor --stack NAME`` (as the README and
    docs/deploy.md run it, without ``--job``) must check that job's model, or a gated model
    whose licence nobody accepted passes doctor and fails on the paid GPUs."""
    from doctor.cli import _stack_jobs

    (tmp_path / "jobs" / "examples").mkdir(parents=True)
    mine = tmp_path / "jobs" / "my-p5.yaml"
    mine.write_text("name: a\nstack: my-p5\n")
    (tmp_path / "jobs" / "other.yaml").write_text("name: b\nstack: p5-16\n")
    (tmp_path / "jobs" / "broken.yaml").write_text("name: [\n")
    example = tmp_path / "jobs" / "examples" / "p5-16.yaml"
    example.write_text("name: c\nstack: p5-16\n")
    assert _stack_jobs("my-p5", tmp_path) == [mine]
    assert _stack_jobs("p5-16", tmp_path) == [tmp_path / "jobs" / "other.yaml", example]


def test_pulumi_cli_is_checked_present_and_recent(tmp_path: Path) -> None:
    """No ``pulumi`` on PATH (``make setup`` installs only the SDKs), one older than
    ``PULUMI_CLI_MIN``, or one whose ``pulumi version`` is not a version: each fails with the
    install line; the pinned version, a newer one and a pre-release of a newer one pass."""
    from doctor.local import check_pulumi_cli
    from infra.versions import PULUMI_CLI_MIN

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    missing = check_pulumi_cli(env={"PATH": str(bin_dir)})
    assert (missing.check, missing.status, missing.detail) == (
        "pulumi CLI",
        "fail",
        "no pulumi on PATH",
    )
    assert f"install the Pulumi CLI {PULUMI_CLI_MIN} or newer" in missing.fix
    cases = {
        "echo v3.100.0": "fail",
        "echo v2.999.999": "fail",
        f"echo v{PULUMI_CLI_MIN}": "ok",
        "echo v3.999.0": "ok",
        "echo v4.0.0-alpha.1+dirty": "ok",
        "echo 'warning: something' >&2; exit 1": "fail",
        "echo hello": "fail",
    }
    for body, expected in cases.items():
        _fake_pulumi(bin_dir, body)
        result = check_pulumi_cli(env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
        assert result.status == expected, (body, result)
        assert (result.fix == "") == (expected == "ok"), (body, result)
    _fake_pulumi(bin_dir, "echo v3.100.0")
    old = check_pulumi_cli(env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    assert old.detail == f"v3.100.0 at {bin_dir / 'pulumi'} is older than {PULUMI_CLI_MIN}"


def test_pulumi_cli_minimum_is_the_sdk_pin() -> None:
    """``PULUMI_CLI_MIN`` is the pulumi SDK requirements.txt pins, and the README's deploy
    block and docs/deploy.md's prerequisites state it before their first command."""
    import re

    from infra.versions import PULUMI_CLI_MIN

    pins = (REPO_ROOT / "requirements.txt").read_text()
    assert re.search(rf"^pulumi=={re.escape(PULUMI_CLI_MIN)}$", pins, re.M), PULUMI_CLI_MIN
    readme = (REPO_ROOT / "README.md").read_text().split("## Deploy a cluster", 1)[1]
    before = readme.split("```bash", 1)[0]
    assert "Pulumi CLI" in before and PULUMI_CLI_MIN in before, before
    deploy = (REPO_ROOT / "docs" / "deploy.md").read_text().split("## Prerequisites", 1)[1]
    prereq = deploy.split("\n## ", 1)[0]
    assert f"Pulumi CLI]({'https://www.pulumi.com/docs/install/'}) {PULUMI_CLI_MIN}" in prereq


def test_a_missing_job_file_is_a_usage_error(tmp_path: Path, capsys) -> None:
    """``--job missing.yaml`` is bad input, as an unknown stack is: one line with the closest
    job file, exit 2, before any AWS call (``Clients(None, ...)`` would raise if one ran)."""
    rc = main(
        ["--stack", "p5-16", "--job", str(tmp_path / "p5-61.yaml")],
        clients=Clients(None, None, None),
    )
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert err == (
        f"eks-fsdp doctor: error: --job {tmp_path / 'p5-61.yaml'}: no such file "
        "(did you mean p5-16.yaml?)"
    )


def test_a_known_gated_model_needs_hf_token_offline(stack_root: Path) -> None:
    """p5-16's model is Llama 2, gated like every meta-llama repository: offline (or with the
    Hub unreachable) doctor no longer says "hfToken OK ... no gated model known to need it"
    nor merely warns; it asks for the secret. An ungated model offline stays a warning."""
    from doctor.cli import job_checks

    cfg = load_stack_file("p5-16", stack_root)
    example = stack_root / "jobs" / "examples" / "p5-16.yaml"
    results, gated, unknown = job_checks(cfg, [example], stack_root, offline=True)
    assert gated == [GATED] and unknown == []
    model = next(r for r in results if r.check == f"model {GATED}")
    assert model.status == "skip" and model.detail.endswith("gated (meta-llama models are)")
    (token,) = [r for r in check_secrets(cfg, gated, stack_root, unknown) if "hfToken" in r.check]
    assert (token.status, token.detail) == ("fail", f"not set; needed: gated model {GATED}")
    (other,) = [
        r for r in check_secrets(cfg, [], stack_root, ["Qwen/Qwen2.5-0.5B"]) if "hfToken" in r.check
    ]
    assert other.status == "warn"


def test_api_public_access_cidrs_unset_is_reported(stack_root: Path) -> None:
    """``new-stack`` does not write apiPublicAccessCidrs (required, no default): before, only
    ``pulumi preview`` said so. [] (private endpoint) and a CIDR pass."""
    import dataclasses

    from doctor.stack import check_api_access

    cfg = load_stack_file("p5-16", stack_root)
    unset = check_api_access(cfg)
    assert (unset.status, unset.detail) == (
        "fail",
        "not set (required: pulumi preview stops on it)",
    )
    assert unset.fix.startswith("pulumi config set --path 'apiPublicAccessCidrs[0]'")
    private = check_api_access(dataclasses.replace(cfg, api_public_access_cidrs=()))
    assert (private.status, private.detail) == ("ok", "[]: private endpoint only")
    _set_api_cidrs(stack_root)
    assert check_api_access(load_stack_file("p5-16", stack_root)).detail == "203.0.113.7/32"


def test_a_capacity_block_without_its_window_is_warned_with_the_blocks_times() -> None:
    """A capacity-block group without ``capacityBlock`` (what new-stack wrote before): a
    warning from the stack file alone, and the reservation row (Stubber: the block's
    ``StartDate``/``EndDate``) gives the times to write."""
    import dataclasses

    from doctor.aws import check_reservation
    from doctor.stack import check_block_windows

    cfg = load_stack_file("p5-16")
    (group,) = cfg.gpu_node_groups
    bare = dataclasses.replace(group, capacity_block=None)
    cfg = dataclasses.replace(cfg, gpu_node_groups=(bare,))
    (row,) = check_block_windows(cfg)
    assert (row.check, row.status) == (f"capacityBlock {group.name}", "warn")
    assert check_block_windows(load_stack_file("p5-16")) == []
    client, stub = stubbed("ec2")
    stub.add_response(
        "describe_capacity_reservations", {"CapacityReservations": [reservation(PLACEHOLDER)]}
    )
    result = check_reservation(cfg, bare, Clients(None, client, None))
    assert result.status == "warn" and "no capacityBlock window" in result.detail
    assert result.fix == (
        f"set gpuNodeGroups[{group.name}].capacityBlock to start 2026-12-10T11:30:00Z, "
        "end 2026-12-17T11:30:00Z"
    )
