"""``jobs submit`` pins the model's and the dataset's Hugging Face revision to a commit (issue 34,
item 7): the job's record and its pods carry the commit, so a resume loads the same weights and
rows even after the branch moved.

If this fails, a job records a branch name instead of the commit it resolved (a resume after
the branch moved trains on other weights or rows than the run it continues), a commit named in
the job file is looked up again, a preset or a local path is sent to the Hub, a revision the Hub
does not know starts pods that fail on it, or ``requireRevisions: true`` lets an unpinned job
through.

The Hub is ``FakeHub``, a loopback HTTP server standing in for huggingface.co
(``HF_ENDPOINT=http://127.0.0.1:PORT``). It answers the two endpoints huggingface_hub 2.4.0
calls, ``GET /api/models/{repo_id}`` and ``GET /api/datasets/{repo_id}``, each with
``/revision/{quote(revision, safe='')}`` when a revision is given
(``src/huggingface_hub/hf_api.py``, ``HfApi.model_info`` / ``dataset_info``), with the JSON
fields ``ModelInfo`` / ``DatasetInfo`` read (``id``, ``sha``, ``gated``; ``hf_api.py``, their
``__init__``), and errors in the headers ``hf_raise_for_status`` maps (``X-Error-Code:
RevisionNotFound`` / ``RepoNotFound``; ``src/huggingface_hub/utils/_http.py``). As the real Hub,
it shows a gated repository's info to anyone (200, ``gated: "manual"``; only its files need the
token) and answers a private one without the token 401 ``RepoNotFound``.
The Kubernetes API is ``FakeKube`` (``tests/jobs/fake_kube.py``); nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
import yaml

from jobs import schema as jobfile
from jobs.manifest import record_name
from jobs.revisions import SAMSUM_HUB_ID, hub_inputs, pin
from tests.jobs.fake_kube import FakeKube, run_cli, served

EXAMPLES = Path(__file__).resolve().parents[2] / "jobs" / "examples"
P4DE = str(EXAMPLES / "p4de-odcr.yaml")
NAME = "llama2-13b-samsum"
MODEL = "meta-llama/Llama-2-13b-chat-hf"
DATASET = "HuggingFaceH4/ultrachat_200k"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/eks-fsdp-p4de-odcr-training:sha-1"
TOKEN = "hf_test_token"


def sha(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


class FakeHub:
    """The Hub's repository-info API on loopback: ``refs`` maps (kind, repo) to {revision:
    commit}; "main" is the default branch; ``gated`` repos answer 200 with ``gated: "manual"``
    whatever the token; ``private`` ones 401 RepoNotFound without the token. ``requests`` logs
    (path, Authorization header) of every request."""

    def __init__(self) -> None:
        self.refs: dict[tuple[str, str], dict[str, str]] = {}
        self.gated: set[str] = set()
        self.private: set[str] = set()
        self.requests: list[tuple[str, str | None]] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                hub.requests.append((self.path, self.headers.get("Authorization")))
                status, body, headers = hub.answer(self.path, self.headers.get("Authorization"))
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def answer(self, path: str, auth: str | None) -> tuple[int, dict[str, Any], dict[str, str]]:
        path = path.split("?", 1)[0]
        prefix, _, rest = path.removeprefix("/api/").partition("/")
        kind = {"models": "model", "datasets": "dataset"}.get(prefix)
        repo, _, revision = rest.partition("/revision/")
        refs = self.refs.get((kind or "", repo))
        if refs is None or (repo in self.private and auth != f"Bearer {TOKEN}"):
            return 401, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"}
        revision = unquote(revision) or "main"
        commit = refs.get(revision) or (revision if revision in refs.values() else None)
        if commit is None:
            error = {"error": f"Invalid rev id: {revision}"}
            return 404, error, {"X-Error-Code": "RevisionNotFound"}
        gated = "manual" if repo in self.gated else False
        body = {"id": repo, "sha": commit, "private": repo in self.private, "gated": gated}
        return 200, {**body, "tags": []}, {}

    def __enter__(self) -> FakeHub:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    """The fake Hub as this process's Hub (huggingface_hub reads ``HF_HUB_OFFLINE`` once, at
    import: its copy is cleared as the variable is)."""
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    with FakeHub() as fake:
        fake.refs[("model", MODEL)] = {"main": sha("model-1"), "v1": sha("model-v1")}
        fake.refs[("dataset", DATASET)] = {"main": sha("data-1")}
        fake.gated.add(MODEL)
        monkeypatch.setenv("HF_ENDPOINT", fake.url)
        monkeypatch.setenv("HF_TOKEN", TOKEN)
        yield fake


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[tuple[FakeKube, str]]:
    with served(tmp_path) as served_kube:
        yield served_kube


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    return run_cli(capsys, *argv)


def _flags(fake: FakeKube) -> list[str]:
    """The worker container's command (``training.finetune``'s flags at its end)."""
    job = fake.get("pytorchjobs", NAME)
    assert job is not None
    (container,) = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    return list(container["command"])


def _record(fake: FakeKube) -> dict[str, Any]:
    """The job file the record keeps (what ``resume`` reloads)."""
    found = fake.get("configmaps", record_name(NAME))
    assert found is not None
    return yaml.safe_load(found["data"]["job.yaml"])  # type: ignore[no-any-return]


def test_submit_records_the_commits_and_a_resume_loads_them_after_the_branch_moved(
    hub: FakeHub, kube: tuple[FakeKube, str], capsys: pytest.CaptureFixture[str]
) -> None:
    fake, kube_ = kube
    code, out, err = _cli(capsys, "submit", P4DE, "--kubeconfig", kube_, "--image", IMAGE)
    assert code == 0, err
    model_1, data_1 = sha("model-1"), sha("data-1")
    flags = _flags(fake)
    assert f"--model_revision={model_1}" in flags and f"--dataset_revision={data_1}" in flags
    assert (_record(fake)["modelRevision"], _record(fake)["datasetRevision"]) == (model_1, data_1)
    assert f"pinned: model {MODEL} its default branch -> commit {model_1}" in err.splitlines()
    assert f"pinned: dataset {DATASET} its default branch -> commit {data_1}" in err.splitlines()
    # One request per input, each with the token (HF_TOKEN), none on resume.
    assert sorted(hub.requests) == sorted(
        [
            (f"/api/models/{MODEL}", f"Bearer {TOKEN}"),
            (f"/api/datasets/{DATASET}", f"Bearer {TOKEN}"),
        ]
    )
    hub.refs[("model", MODEL)]["main"] = sha("model-2")  # the branches move on
    hub.refs[("dataset", DATASET)]["main"] = sha("data-2")
    assert _cli(capsys, "cancel", NAME, "--kubeconfig", kube_)[0] == 0
    code, out, err = _cli(capsys, "resume", NAME, "--kubeconfig", kube_)
    assert code == 0 and "generation 2" in out, err
    flags = _flags(fake)
    assert "--resume" in flags
    assert f"--model_revision={model_1}" in flags and f"--dataset_revision={data_1}" in flags
    assert len(hub.requests) == 2
    # A new submit of the file resolves again: the commit the branch names now.
    assert _cli(capsys, "cancel", NAME, "--kubeconfig", kube_, "--purge")[0] == 0
    code, _, err = _cli(capsys, "submit", P4DE, "--kubeconfig", kube_, "--image", IMAGE)
    assert code == 0, err
    assert f"--model_revision={sha('model-2')}" in _flags(fake)


def test_a_tag_resolves_to_its_commit_and_a_commit_is_used_as_is(hub: FakeHub) -> None:
    """A job file's ``modelRevision: v1`` asks the Hub for v1; 40 hex digits ask nothing."""
    values: dict[str, Any] = {"modelRevision": "v1", "datasetRevision": sha("data-0")}
    args = (f"--hf_dataset={DATASET}",)
    got = pin(MODEL, "hf_dataset", args, values, source="job.yaml")
    assert got.sets == [f'modelRevision="{sha("model-v1")}"']
    assert hub.requests == [(f"/api/models/{MODEL}/revision/v1", f"Bearer {TOKEN}")]
    assert got.notes == [
        f"pinned: model {MODEL} v1 -> commit {sha('model-v1')}",
        f"pinned: dataset {DATASET} at commit {sha('data-0')}",
    ]


def test_a_revision_the_hub_does_not_know_stops_the_submit(
    hub: FakeHub, kube: tuple[FakeKube, str], capsys: pytest.CaptureFixture[str]
) -> None:
    fake, kubeconfig = kube
    argv = ["submit", P4DE, "--kubeconfig", kubeconfig, "--image", IMAGE]
    argv += ["--set", "modelRevision=nope"]
    code, _, err = _cli(capsys, *argv)
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(
        f"eks-fsdp jobs: error: modelRevision: 'nope': no such revision of model {MODEL}"
    )
    assert fake.get("pytorchjobs", NAME) is None
    assert fake.get("configmaps", record_name(NAME)) is None


@pytest.mark.parametrize("how", ["offline", "transformers offline", "unreachable", "private"])
def test_an_unresolved_revision_warns_or_stops_under_require_revisions(
    hub: FakeHub,
    kube: tuple[FakeKube, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    how: str,
) -> None:
    """Offline (either variable huggingface_hub reads), a closed port, or a private model
    without a token: a warning and the revision as given (the pods load the default branch),
    or one error line with requireRevisions."""
    fake, kubeconfig = kube
    if how == "offline":
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    elif how == "transformers offline":
        monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    elif how == "unreachable":
        with socket.socket() as s:  # a port nothing listens on once closed
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    else:
        hub.private.add(MODEL)
        monkeypatch.delenv("HF_TOKEN")
        monkeypatch.setenv("HF_HOME", str(Path(kubeconfig).parent / "hf-home"))  # no saved token
    argv = ["submit", P4DE, "--kubeconfig", kubeconfig, "--image", IMAGE]
    code, _, err = _cli(capsys, *argv, "--set", "requireRevisions=true")
    assert code == 2 and err.count("\n") == 1, err
    assert f"requireRevisions: model {MODEL} at its default branch: not resolved" in err
    assert fake.get("configmaps", record_name(NAME)) is None
    code, _, err = _cli(capsys, *argv)
    assert code == 0, err
    warned = [ln for ln in err.splitlines() if ln.startswith(f"warning: model {MODEL} not pinned")]
    assert len(warned) == 1
    assert "modelRevision" not in _record(fake)
    assert not [f for f in _flags(fake) if f.startswith("--model_revision")]
    if how == "private":  # the dataset is public: still pinned
        assert f"--dataset_revision={sha('data-1')}" in _flags(fake)
        assert "(private, or not found: set HF_TOKEN for a private one)" in warned[0]


def test_a_gated_model_resolves_without_a_token(
    hub: FakeHub, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The Hub shows a gated model's info to anyone, so its commit is pinned with no token
    (the pods need one for the files; ``doctor`` checks that); a trailing ``/`` on
    ``HF_ENDPOINT`` is dropped as huggingface_hub drops it."""
    monkeypatch.delenv("HF_TOKEN")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no saved token
    monkeypatch.setenv("HF_ENDPOINT", hub.url + "/")
    got = pin(MODEL, "samsum_sample", (), {"requireRevisions": True}, source="job.yaml")
    assert got.sets == [f'modelRevision="{sha("model-1")}"']
    assert hub.requests == [(f"/api/models/{MODEL}", None)]


def test_inputs_off_the_hub_are_not_looked_up() -> None:
    """Presets, paths, URIs, local data files and bundled datasets: nothing to pin."""
    assert hub_inputs("tiny-llama", "samsum_sample", (), {}) == []
    assert hub_inputs("s3://bucket/models/llama", "custom", (), {}) == []
    assert hub_inputs("/fsx/models/llama", "hf_dataset", ("--hf_dataset=/fsx/data",), {}) == []
    assert hub_inputs("./llama", "hf_dataset", ("--hf_dataset=data/train.jsonl",), {}) == []
    (found,) = hub_inputs("tiny-llama", "samsum_dataset", (), {"datasetRevision": "v2"})
    assert (found.kind, found.repo, found.revision) == ("dataset", SAMSUM_HUB_ID, "v2")
    dev = jobfile.load(EXAMPLES / "dev.yaml")
    assert hub_inputs(dev.model, dev.dataset, dev.extra_args, dev.values) == []


def test_revision_keys_are_checked_in_the_job_file(tmp_path: Path) -> None:
    """One line naming the key: a revision that is no ref name, a flag a key sets, a
    requireRevisions that is not a boolean; a commit reaches training as its flag."""
    base = yaml.safe_load((EXAMPLES / "dev.yaml").read_text())
    cases = [
        ({"modelRevision": 1234}, "modelRevision: 1234 is not a branch, tag or commit"),
        ({"args": {"model_revision": "main"}}, "args.model_revision: set by the key modelRevision"),
        ({"requireRevisions": "yes please"}, "requireRevisions: expected true or false"),
        (
            {"modelRevision": "main"},
            "modelRevision: model tiny-llama is not on the Hugging Face Hub .*; remove "
            "modelRevision$",
        ),
        (
            {"datasetRevision": "v2"},
            "datasetRevision: dataset samsum_sample is not on the Hugging Face Hub .*; remove "
            "datasetRevision$",
        ),
        (
            {"model": "llama2-7b"},
            "model: llama2-7b is the planner's name; use meta-llama/Llama-2-7b-hf$",
        ),
    ]
    for i, (change, message) in enumerate(cases):
        path = tmp_path / f"job{i}.yaml"
        path.write_text(yaml.safe_dump({**base, **change}, sort_keys=False))
        with pytest.raises(jobfile.JobFileError, match=message):
            jobfile.load(path)
    sets = ["dataset=samsum_dataset", f'datasetRevision="{sha("x")}"']
    job = jobfile.load(EXAMPLES / "dev.yaml", sets=sets)
    assert f"--dataset_revision={sha('x')}" in job.extra_args


def test_every_planner_model_name_is_refused_with_a_hub_id(tmp_path: Path) -> None:
    """Each of the planner's model names (``planner.shapes.BUILTIN``) is refused in a job file
    with a Hub id (``namespace/name``) to write instead; where the planner maps that id back
    (``planner.args.builtin_for_hub_id``), it maps it to a model of the same dimensions."""
    from jobs.schema import repo_problem
    from planner.args import builtin_for_hub_id
    from planner.shapes import BUILTIN

    assert set(jobfile.PLANNER_HUB_IDS) == set(BUILTIN)
    base = yaml.safe_load((EXAMPLES / "dev.yaml").read_text())
    for name, hub_id in jobfile.PLANNER_HUB_IDS.items():
        assert repo_problem(hub_id) is None, hub_id
        mapped = BUILTIN.get(builtin_for_hub_id(hub_id), BUILTIN[name])  # the same family
        dims = ("vocab_size", "hidden_size", "intermediate_size", "num_layers")
        assert [getattr(mapped, d) for d in dims] == [getattr(BUILTIN[name], d) for d in dims]
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump({**base, "model": name}, sort_keys=False))
        with pytest.raises(jobfile.JobFileError) as err:
            jobfile.load(path)
        assert str(err.value).endswith(f"model: {name} is the planner's name; use {hub_id}")


def test_a_local_job_records_the_commit_its_pods_get(
    hub: FakeHub,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same hook for ``--local``: the job folder's ``job.yaml`` (what ``resume --local``
    reloads) and the runner's training flags carry samsum's commit. The runner starts for real
    and is stopped at once (``cancel --purge``): nothing waits for it to train."""
    from jobs.local.backend import JOB_FILE, RECORD

    monkeypatch.setenv("EKS_FSDP_JOBS_DIR", str(tmp_path / "jobs"))
    hub.refs[("dataset", SAMSUM_HUB_ID)] = {"main": sha("samsum-1")}
    argv = ["submit", "--local", str(EXAMPLES / "dev.yaml"), "--name", "pin-local"]
    code, _, err = _cli(capsys, *argv, "--set", "dataset=samsum_dataset")
    try:
        assert code == 0, err
        folder = tmp_path / "jobs" / "pin-local"
        recorded = yaml.safe_load((folder / JOB_FILE).read_text())
        assert recorded["datasetRevision"] == sha("samsum-1") and "modelRevision" not in recorded
        train_args = json.loads((folder / RECORD).read_text())["train_args"]
        assert f"--dataset_revision={sha('samsum-1')}" in train_args
        assert hub.requests == [(f"/api/datasets/{SAMSUM_HUB_ID}", f"Bearer {TOKEN}")]
    finally:
        assert _cli(capsys, "cancel", "--local", "pin-local", "--purge")[0] == 0


def test_submit_from_a_checkpoint_loads_the_commits_it_was_made_with(
    hub: FakeHub, tmp_path: Path
) -> None:
    """``submit FILE --from ROOT`` on a new cluster: the job file names a branch (none here),
    the newest complete checkpoint of the job under ROOT was made with an older model commit:
    that commit is pinned (no Hub request for it), the dataset without one is resolved as
    usual. A meta.json that cannot be read is one warning line, and the Hub decides."""
    from jobs.revisions import pin_values

    old = sha("model-0")
    for step, model in ((2, sha("model-older")), (4, old)):
        folder = tmp_path / NAME / f"step-{step:06d}"
        folder.mkdir(parents=True)
        meta = {"step": step, "revisions": {"model": model, "dataset": ""}}
        (folder / "meta.json").write_text(json.dumps(meta))
        (folder / "COMPLETE").write_text("")
    (tmp_path / NAME / "step-000006").mkdir()  # a write that never finished: no marker
    job = jobfile.load(P4DE)
    dataset = jobfile.default("dataset")
    got = pin_values(job.values, default_dataset=dataset, source=P4DE, from_uri=str(tmp_path))
    assert got.sets == [f'modelRevision="{old}"', f'datasetRevision="{sha("data-1")}"']
    assert got.notes[0] == (
        f"pinned: model {MODEL} its default branch -> commit {old}, the one "
        f"{tmp_path / NAME / 'step-000004'} was made with"
    )
    assert [path for path, _ in hub.requests] == [f"/api/datasets/{DATASET}"]

    (tmp_path / NAME / "step-000004" / "meta.json").write_text("{torn")
    got = pin_values(job.values, default_dataset=dataset, source=P4DE, from_uri=str(tmp_path))
    assert got.notes[0].startswith(f"warning: --from {tmp_path}: the checkpoint's revisions not")
    assert got.sets[0] == f'modelRevision="{sha("model-1")}"'
