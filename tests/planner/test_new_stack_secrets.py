"""``new-stack NAME --force`` over a stack file that holds secrets keeps them.

If this fails, regenerating a stack throws away what ``pulumi config set --secret`` wrote
(``hfToken``, ``grafanaAdminPassword``: ``secure:`` ciphertexts that cannot be made again
without the plaintext) or the ``encryptionsalt`` they decrypt with, so the next ``pulumi up``
stops on missing secrets or cannot decrypt them; or a file that is not a stack file is
overwritten without a word.

Nothing is mocked: ``planner.newstack.main`` writes into a temporary folder and the result is
loaded with the project's stack loader; the ciphertexts are opaque strings, never decrypted.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from infra.config import load_stack_file
from planner.newstack import main

ROOT = Path(__file__).resolve().parents[2]
SALT = "v1:c2FsdA==:v1:Zm9vYmFyYmF6cXV4:cXV1eHF1dXhxdXV4"
TOKEN = "v1:bG9vcGJhY2s=:aGZfdG9rZW4="


def _new_stack(root: Path, *extra: str) -> int:
    argv = ["p5-try", "--instance", "p5.48xlarge", "--nodes", "16", "--region", "us-east-2"]
    return main([*argv, "--dir", str(root), *extra])


def test_force_keeps_the_secrets_and_their_salt(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.yaml").write_text((ROOT / "Pulumi.yaml").read_text())
    assert _new_stack(tmp_path) == 0
    path = tmp_path / "Pulumi.p5-try.yaml"
    fresh = yaml.safe_load(path.read_text())
    generated_nat = fresh["config"]["eks-fsdp:natGateways"]
    # as `pulumi stack init` (passphrase) and `pulumi config set --secret` leave the file
    data = {"encryptionsalt": SALT, **fresh}
    data["config"]["eks-fsdp:hfToken"] = {"secure": TOKEN}
    data["config"]["eks-fsdp:grafanaAdminPassword"] = {"secure": TOKEN[::-1]}
    data["config"]["eks-fsdp:natGateways"] = "perAz"  # a plain value: regenerated
    path.write_text(yaml.safe_dump(data, sort_keys=False))

    assert _new_stack(tmp_path, "--force", "--nodes", "8") == 0
    again = yaml.safe_load(path.read_text())
    assert again["encryptionsalt"] == SALT
    assert again["config"]["eks-fsdp:hfToken"] == {"secure": TOKEN}
    assert again["config"]["eks-fsdp:grafanaAdminPassword"] == {"secure": TOKEN[::-1]}
    assert again["config"]["eks-fsdp:natGateways"] == generated_nat != "perAz"
    assert again["config"]["eks-fsdp:gpuNodeGroups"][0]["maxSize"] == 8
    load_stack_file("p5-try", tmp_path)  # still a stack file the program loads


def test_force_over_a_file_that_is_no_stack_file_stops(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "Pulumi.p5-try.yaml"
    path.write_text("- not\n- a stack\n")
    assert _new_stack(tmp_path, "--force") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--force: not a Pulumi stack file" in err, err
    assert path.read_text() == "- not\n- a stack\n"


def test_a_regenerated_file_that_fails_its_check_gives_back_the_old_bytes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The kept secrets exist nowhere else: when the regenerated stack does not load (here a
    secure value kept for a key the program reads as a list), the file is what it was."""
    (tmp_path / "Pulumi.yaml").write_text((ROOT / "Pulumi.yaml").read_text())
    assert _new_stack(tmp_path) == 0
    path = tmp_path / "Pulumi.p5-try.yaml"
    data = {"encryptionsalt": SALT, **yaml.safe_load(path.read_text())}
    data["config"]["eks-fsdp:hfToken"] = {"secure": TOKEN}
    data["config"]["eks-fsdp:availabilityZones"] = {"secure": TOKEN}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    before, job_before = path.read_bytes(), (tmp_path / "jobs" / "p5-try.yaml").read_bytes()
    capsys.readouterr()
    assert _new_stack(tmp_path, "--force", "--nodes", "8") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "availabilityZones" in err, err
    assert path.read_bytes() == before
    assert (tmp_path / "jobs" / "p5-try.yaml").read_bytes() == job_before
