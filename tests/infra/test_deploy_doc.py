"""docs/deploy.md says what the stacks cost idle and how sizes are changed, consistently with its
own price table and with the program, and its deploy path runs as written.

Nothing is mocked: the document and the modules are read as they are, and the guide's commands
that need no AWS (the planner's ``new-stack`` and ``--job``) run as subprocesses in a copy of
the checkout, exactly as the page spells them. If this fails, the deploy guide promises an idle
``dev`` stack costs nothing (it bills the control plane, a NAT gateway, the system node and a
KMS key), states an idle total its Costs table does not add up to, tells the reader to change
``desiredSize`` in the stack file although the program ignores it after creation, lists its
steps out of order (a preview before the policy pack's environment exists, an ``up`` without
the pack, no secrets, no ``--create``), holds a command that no longer runs, or states a
training cost the planner no longer gives.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from infra import gpu_nodegroup

DOC = (Path(__file__).resolve().parents[2] / "docs" / "deploy.md").read_text()
IDLE_ROWS = ("EKS control plane", "NAT gateway", "System nodegroup", "KMS keys")
"""What a dev stack at zero GPU nodes still bills (rows of the Costs table)."""
HOURS_PER_MONTH = 730


def _costs_row(label: str) -> list[str]:
    (line,) = [ln for ln in DOC.splitlines() if ln.startswith(f"| {label}")]
    return [cell.strip() for cell in line.strip("|").split("|")]


def _dollars(text: str) -> float:
    """The first dollar figure of ``text``."""
    return float(re.findall(r"\$([\d,.]+)", text)[0].replace(",", ""))


def test_idle_dev_total_adds_up_from_the_costs_table() -> None:
    monthly = {}
    for label in IDLE_ROWS:
        _, price, dev, *_ = _costs_row(label)
        if label == "KMS keys":
            monthly[label] = _dollars(price) * int(dev)
            continue
        count = int(m.group(1)) if (m := re.match(r"(\d+):", dev)) else 1
        assert abs(_dollars(dev) - count * _dollars(price.split("+")[0]) * HOURS_PER_MONTH) < 1
        monthly[label] = _dollars(dev)
    total = round(sum(monthly.values()) / 5) * 5  # the docs round to $5
    stated = re.findall(r"bills? ~\$(\d+)/month", DOC)
    assert len(stated) >= 2 and {int(x) for x in stated} == {total}, (stated, monthly)
    assert "costs nothing" not in DOC


def test_node_counts_are_changed_the_way_the_program_allows() -> None:
    section = DOC.split("## Change node counts", 1)[1].split("\n## ", 1)[0]
    assert gpu_nodegroup.DESIRED_SIZE_PATH == "scalingConfig.desiredSize"
    assert "aws eks update-nodegroup-config" in section
    assert "desiredSize" not in "".join(
        ln for ln in section.splitlines() if ln.startswith("pulumi config set")
    )


def test_the_policy_pack_environment_is_made_before_preview() -> None:
    deploy = DOC.split("## Deploy", 1)[1]
    assert deploy.index("(cd policy && pulumi install)") < deploy.index(
        "pulumi preview --policy-pack policy"
    )
    assert "CLI builds" not in DOC


ROOT = Path(__file__).resolve().parents[2]
DEPLOY = DOC.split("## Deploy\n", 1)[1].split("\n## ", 1)[0]
NEEDS_AWS = (
    "make setup",  # installs; the suite runs in what it made
    "source .venv/bin/activate",  # puts make setup's eks-fsdp on PATH: run here as python -m
    "(cd policy && pulumi install)",
    "pulumi ",
    "eks-fsdp doctor",  # the account: run against moto's EC2 on loopback (below)
    "eks-fsdp jobs ",  # a cluster: tests/controlplane runs submit/list/logs against one
)
"""Command prefixes of the Deploy section that need AWS, a Pulumi backend or a cluster (or
only set up the shell)."""


def _argv(command: str) -> list[str]:
    """A guide line as this interpreter runs it: ``eks-fsdp X`` is the console script
    ``make setup`` installs (``eks_fsdp_cli.main:entry``), here ``python -m eks_fsdp_cli X``,
    which runs the same ``main`` (tests/test_cli_commands.py checks the script itself)."""
    argv = shlex.split(command)
    assert argv[0] == "eks-fsdp", f"unclassified command in docs/deploy.md: {command}"
    return [sys.executable, "-m", "eks_fsdp_cli", *argv[1:]]


COPIED = ("infra", "jobs", "planner", "training", "workloads", "doctor", "policy", "eks_fsdp_cli")


def _commands(section: str) -> list[str]:
    """The command lines of the ```bash blocks (continuations joined, comments dropped)."""
    out: list[str] = []
    for block in re.findall(r"```bash\n(.*?)```", section, flags=re.S):
        text = block.replace("\\\n", " ")
        for line in text.splitlines():
            line = line.split("  #", 1)[0].strip()
            if line and not line.startswith("#"):
                out.append(line)
    return out


def test_the_deploy_path_is_in_order() -> None:
    commands = _commands(DEPLOY)
    order = [
        "pulumi login",
        "pulumi stack select --create",
        "pulumi config set --path 'apiPublicAccessCidrs[0]'",
        "pulumi config set --secret hfToken",
        "pulumi config set --secret grafanaAdminPassword",
        "eks-fsdp doctor --stack",
        "pulumi preview --policy-pack policy",
        "pulumi up --policy-pack policy",
        "eks-fsdp jobs submit",
        "eks-fsdp jobs logs",
    ]
    at = [next(i for i, c in enumerate(commands) if c.startswith(o)) for o in order]
    assert at == sorted(at), list(zip(order, at, strict=True))
    assert (
        commands.index("(cd policy && pulumi install)")
        < at[order.index("pulumi preview --policy-pack policy")]
    )
    assert not [c for c in commands if c.startswith("pulumi up") and "--policy-pack" not in c]
    assert "pulumi destroy --exclude-protected" in DEPLOY
    assert "huggingface.co/meta-llama" in DEPLOY  # accept the licence before the token is used
    assert (ROOT / "docs" / "teardown.md").is_file() and "(teardown.md)" in DEPLOY


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the checkout's Python packages and stack files: ``new-stack`` writes there."""
    root = tmp_path_factory.mktemp("checkout")
    ignore = shutil.ignore_patterns("__pycache__", "venv", "*.pyc")
    for name in (n for n in COPIED if (ROOT / n).is_dir()):
        shutil.copytree(ROOT / name, root / name, ignore=ignore)
    for path in ROOT.glob("Pulumi*.yaml"):
        shutil.copy(path, root / path.name)
    return root


def test_every_command_that_needs_no_aws_runs(checkout: Path) -> None:
    commands = _commands(DEPLOY)
    ours = [c for c in commands if not c.startswith(NEEDS_AWS)]
    assert ours, "the Deploy section has no command that runs without AWS"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(checkout)}
    assert any(c.startswith("eks-fsdp new-stack ") for c in ours)  # the spelling
    for command in ours:
        done = subprocess.run(
            _argv(command),
            cwd=checkout,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, f"{command}\n{done.stdout}{done.stderr}"
    assert (checkout / "Pulumi.my-p5.yaml").is_file()
    assert (checkout / "jobs" / "my-p5.yaml").is_file()
    # The stack's job file is where new-stack wrote it, for every command given only --stack.
    out = str(checkout / "rendered")
    for command in (
        "eks-fsdp plan --stack my-p5",
        f"eks-fsdp render --stack my-p5 --out {out} --image 123456789012.dkr.ecr.us-east-2"
        ".amazonaws.com/eks-fsdp-my-p5-training:sha-1",
    ):
        done = subprocess.run(
            _argv(command), cwd=checkout, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, f"{command}\n{done.stdout}{done.stderr}"
    (pytorchjob,) = yaml.safe_load_all((checkout / "rendered" / "pytorchjob.yaml").read_text())
    job = yaml.safe_load((checkout / "jobs" / "my-p5.yaml").read_text())
    assert pytorchjob["metadata"]["name"] == job["name"]
    _run_doctor_lines(checkout, env)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_doctor_lines(checkout: Path, env: dict[str, str]) -> None:
    """The guide's ``eks-fsdp doctor`` lines, as spelt, against moto's server on 127.0.0.1.

    AWS is played by moto's ``ThreadedMotoServer`` (a real HTTP API on loopback), reached the
    way a user points boto3 elsewhere: ``AWS_ENDPOINT_URL`` (boto3 guide, "Configuration",
    service-specific endpoints), with throwaway credentials and no config files. moto 5.2.5
    answers regions and zones; the placeholder reservation cannot pass (moto 5.2.5 does not
    implement ``DescribeCapacityReservations``, a moto that does has no such reservation), so
    the line must stop with exit 1 on the reservation check, naming it, instead of a traceback
    (the test does not depend on which error the endpoint gives). The Hub is off (``HF_HUB_OFFLINE``).
    """
    from moto.server import ThreadedMotoServer

    doctor = [c for c in _commands(DEPLOY) if c.startswith("eks-fsdp doctor")]
    assert doctor, "the Deploy section no longer runs the doctor"
    port = _free_port()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    none = str(checkout / "no-aws-config")
    aws_env = {
        **{k: v for k, v in env.items() if not k.startswith(("AWS_", "HF_"))},
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_CONFIG_FILE": none,
        "AWS_SHARED_CREDENTIALS_FILE": none,
        "AWS_MAX_ATTEMPTS": "1",
        "HF_HUB_OFFLINE": "1",
    }
    try:
        for command in doctor:
            done = subprocess.run(
                _argv(command),
                cwd=checkout,
                env=aws_env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            out = done.stdout + done.stderr
            assert done.returncode == 1 and "Traceback" not in out, f"{command}\n{out}"
            lines = {ln.split()[0]: ln for ln in done.stdout.splitlines() if ln.strip()}
            assert " OK " in lines["region"], out  # moto answered the region and zones
            (reservation,) = [ln for ln in done.stdout.splitlines() if "cr-0123456789abcdef0" in ln]
            # the reservation is checked and reported: whatever the endpoint makes of the call
            # (moto 5.2.5: unimplemented; a later one: not found), it fails on that line
            assert reservation.startswith("reservation ") and " FAIL " in reservation, out
    finally:
        server.stop()


def test_the_training_costs_are_the_planners() -> None:
    from jobs.schema import load
    from planner.estimate import estimate

    for stack in ("p4de-odcr", "p5-16"):
        (row,) = [ln for ln in DOC.splitlines() if ln.startswith(f"| `{stack}` | ")]
        est = estimate(load(ROOT / "jobs" / "examples" / f"{stack}.yaml"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[3].startswith(f"{est.steps}, {est.checkpoints} (every {est.checkpoint_every})")
        assert (
            cells[5] == f"~${est.cost_usd:,.0f}" and cells[6] == f"~${est.cost_per_epoch_usd:,.0f}"
        )
        assert f"{est.tokens_per_s_per_gpu:,.0f} tok/s/GPU" in cells[2]


def test_the_data_how_to_job_keys_load() -> None:
    """The "Data onto the cluster" section's job-file keys, merged into the p5-16 example job,
    load with ``jobs.schema`` as written: the dataset is ``custom`` and training gets the path
    the pods see (not checked on this machine's disk). Fails if the snippet puts ``dataset``
    under ``args`` (refused: ``args.dataset: set by the key dataset``) or stops loading."""
    import yaml

    from jobs.schema import parse

    section = DOC.split("## Data onto the cluster", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```yaml\n(.*?)```", section, flags=re.S)
    keys = yaml.safe_load(block)
    example = ROOT / "jobs" / "examples" / "p5-16.yaml"
    values = {**yaml.safe_load(example.read_text()), **keys}
    job = parse(values, source=str(example))
    assert job.dataset == "custom"
    assert "--data_path=/checkpoints/data/train.jsonl" in job.extra_args
