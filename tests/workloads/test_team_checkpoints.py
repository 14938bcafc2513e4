"""Two teams' jobs of the same name keep their checkpoints and output apart.

Every team's checkpoint claim mounts the root of the same FSx file system
(``workloads.specs.teams.checkpoint_volume``), and an ``s3://`` root given with ``--from`` is
as shared; training keeps a job's checkpoints in ``ROOT/<--dist_checkpoint_folder>/step-N``
(``training.checkpoint.root_of``). If this fails, team A's ``llama-ft`` and team B's
``llama-ft`` would write the same step folders: a resume would load the other team's weights
and the pruning of old checkpoints would delete them. A job in the jobs namespace (no team)
keeps the folder it always had (its name), so existing jobs still resume; the local runner
keeps ``shared/<name>`` (one machine's jobs are apart by name).

Job files are loaded as ``eks-fsdp jobs submit`` loads them, over a copy of the repository's
p4de-odcr stack (FSx checkpoints) that declares two teams; the flags are read back by
training's own parser and path rule.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.config import sources
from jobs import resume_from
from jobs.build import build
from jobs.local.backend import local_settings
from jobs.schema import load
from training.checkpoint import root_of
from training.config import parse_args
from workloads.specs import kueue, pytorchjob, stack

REPO = Path(__file__).resolve().parents[2]
P4DE = REPO / "jobs" / "examples" / "p4de-odcr.yaml"
TEAMS = [
    {"name": "nlp", "principalArns": ["arn:aws:iam::123456789012:role/nlp"]},
    {"name": "vision", "principalArns": ["arn:aws:iam::123456789012:role/vision"]},
]
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/eks-fsdp-p4de-odcr-training:sha-1"


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository root whose p4de-odcr stack declares the two teams."""
    out = tmp_path / "root"
    out.mkdir()
    shutil.copy(REPO / "Pulumi.yaml", out / "Pulumi.yaml")
    data = yaml.safe_load((REPO / "Pulumi.p4de-odcr.yaml").read_text())
    data["config"]["eks-fsdp:teams"] = TEAMS
    (out / "Pulumi.p4de-odcr.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.setattr(sources, "REPO_ROOT", out)
    return out


def _job(root: Path, team: str | None, generation: int = 1) -> Any:
    text = P4DE.read_text() + (f"team: {team}\n" if team else "")
    path = root / f"job-{team or 'none'}.yaml"
    path.write_text(text)
    return build(load(str(path)), image=IMAGE, generation=generation).job


def _flags(job: Any) -> dict[str, str]:
    command = pytorchjob.train_command(job)
    return dict(a.split("=", 1) for a in pytorchjob.finetune_flags(command) if "=" in a)


def _where(job: Any) -> tuple[str, str]:
    """(checkpoint folder, output dir) as training resolves the job's flags."""
    cfg = parse_args(pytorchjob.finetune_flags(pytorchjob.train_command(job)))
    return str(root_of(cfg)), cfg.output_dir


def test_the_jobs_namespace_is_the_same_everywhere() -> None:
    assert pytorchjob.JOBS_NAMESPACE == stack.JOBS_NAMESPACE == kueue.JOBS_NAMESPACE


def test_two_teams_same_named_jobs_write_to_disjoint_folders(root: Path) -> None:
    nlp, vision, plain = _job(root, "nlp"), _job(root, "vision"), _job(root, None)
    assert nlp.name == vision.name == plain.name
    assert (nlp.namespace, vision.namespace, plain.namespace) == ("nlp", "vision", "default")
    mount = nlp.checkpoint_mount
    where = {job.namespace: _where(job) for job in (nlp, vision, plain)}
    assert where == {
        "nlp": (f"{mount}/nlp/{nlp.name}", f"{mount}/nlp/{nlp.name}/output"),
        "vision": (f"{mount}/vision/{nlp.name}", f"{mount}/vision/{nlp.name}/output"),
        # no team: the folder jobs always had
        "default": (f"{mount}/{nlp.name}", f"{mount}/{nlp.name}/output"),
    }
    # no folder of one is inside another's: prune and resume of one never see the other's
    folders = [Path(c) for c, _ in where.values()]
    for a in folders:
        for b in folders:
            assert a == b or not (a.is_relative_to(b) or b.is_relative_to(a))


def test_a_resumed_generation_reads_the_folder_the_first_wrote(root: Path) -> None:
    first, second = _job(root, "nlp"), _job(root, "nlp", generation=2).replace(resume=True)
    assert _where(first) == _where(second)
    assert "--resume" in pytorchjob.finetune_flags(pytorchjob.train_command(second))


def test_an_s3_root_keeps_teams_apart_under_root_namespace_name(root: Path) -> None:
    uri = resume_from.parse("s3://ckpt-bucket/runs/", local=False)
    got = {
        team: _where(resume_from.with_root(_job(root, team), uri))[0]
        for team in ("nlp", "vision", None)
    }
    name = _job(root, None).name
    assert got == {
        "nlp": f"s3://ckpt-bucket/runs/nlp/{name}",
        "vision": f"s3://ckpt-bucket/runs/vision/{name}",
        None: f"s3://ckpt-bucket/runs/{name}",
    }
    flags = _flags(resume_from.with_root(_job(root, "nlp"), uri))
    assert flags[resume_from.ROOT_FLAG] == "s3://ckpt-bucket/runs"


def test_resume_without_a_record_names_the_teams_folder() -> None:
    err = resume_from.no_record(
        "llama-ft", "on this cluster (namespace nlp)", folder="nlp/llama-ft"
    )
    assert "(ROOT holds nlp/llama-ft/step-N/)" in str(err)
    assert "(ROOT holds llama-ft/step-N/)" in str(resume_from.no_record("llama-ft", "here"))


def test_a_local_team_job_keeps_its_folder_on_this_machine(root: Path) -> None:
    path = root / "local.yaml"
    path.write_text(P4DE.read_text() + "team: nlp\n")
    job, _ = local_settings(load(str(path)), generation=1, rdzv_id="r")
    assert _flags(job)["--dist_checkpoint_folder"] == job.name
