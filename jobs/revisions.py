"""Reproducible inputs: ``jobs submit`` pins the model's and the dataset's Hugging Face revision
to the commit it names at that moment, so restarts, resumes and reruns load the same weights and
rows.

A job file may name a revision (``modelRevision``, ``datasetRevision``: a branch, a tag or a
commit; none means the repository's default branch). At submit each one of a Hub repository is
resolved once to its commit SHA (``HfApi().model_info`` / ``dataset_info``, which answer
``sha``: the commit the revision points to) and written back into the job's keys, which the
job's record keeps (``JobSpec.dump``: the ConfigMap ``<name>-job`` on a cluster, the local
run's folder) and the manifest hands to training as ``--model_revision`` /
``--dataset_revision`` (``jobs.schema``). A restart reads the same flags; a resume reads the
record: both load that commit even when the branch has moved since. A revision given as 40
hex digits is a commit already and is used as is, without a request.

Not on the Hub, nothing to pin: a training preset (``tiny-llama``), a path (``/...``, ``./...``,
``~/...``) or a URI (``s3://...``); a dataset other than ``hf_dataset`` (a Hub id) or
``samsum_dataset`` (``knkarthick/samsum``); a local data file.

The Hub is reached as huggingface_hub reaches it: ``HF_ENDPOINT`` (default
https://huggingface.co) and ``HF_TOKEN`` (else the token ``huggingface-cli login`` saved).
Offline (``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE``), unreachable, or a repository it does
not show to this token (a private one, or none; the pods may hold a token the submitting machine
lacks; a gated repository's info answers 200 to anyone, its files need the token): one warning line
and the revision as given, unless the job sets ``requireRevisions: true``, which stops the
submit with one line. A revision the Hub says does not exist stops it always: the pods would
fail on it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jobs.types import JobsError

SHA = re.compile(r"^[0-9a-f]{40}$")
"""A full commit id: what the Hub's ``sha`` field holds and what ``revision=`` takes as is."""
SAMSUM_HUB_ID = "knkarthick/samsum"
"""The repository ``--dataset samsum_dataset`` loads first (``training/data/hf_data.py``,
``hub_samsum``: ``knkarthick/samsum``, then ``samsum``). The pinned commit is this one's."""
DATA_FILE_SUFFIXES = (".json", ".jsonl", ".csv", ".parquet")
"""Local data files ``--hf_dataset`` reads with a packaged builder (``training/data/hf_data.py``
``_BUILDERS``): no repository, no revision."""
TIMEOUT_S = 10.0
"""One request's limit: a hub that does not answer in this time counts as unreachable."""
OFFLINE_VALUES = ("1", "ON", "YES", "TRUE")
"""Values of ``HF_HUB_OFFLINE`` that mean offline (huggingface_hub ``constants._is_true``,
``src/huggingface_hub/constants.py`` at v1.x/2.x)."""
OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
"""huggingface_hub 2.4.0 ``constants.py``: ``HF_HUB_OFFLINE = _is_true(os.environ.get(
"HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE"))``."""
DEFAULT_ENDPOINT = "https://huggingface.co"
"""``constants._HF_DEFAULT_ENDPOINT``; ``HF_ENDPOINT`` replaces it, a trailing ``/`` dropped
(``ENDPOINT = os.getenv("HF_ENDPOINT", _HF_DEFAULT_ENDPOINT).rstrip("/")``)."""

KEYS = {"model": "modelRevision", "dataset": "datasetRevision"}
"""The job-file key that names (and, once pinned, records) each input's revision."""
REQUIRE_KEY = "requireRevisions"


class Unresolved(Exception):
    """The Hub could not say which commit a revision is (offline, unreachable, not shown)."""


@dataclass(frozen=True)
class HubInput:
    """One input of a job that lives in a Hub repository."""

    kind: str
    """``model`` or ``dataset``."""
    repo: str
    revision: str | None
    """As the job file names it; None: the default branch."""

    @property
    def key(self) -> str:
        return KEYS[self.kind]

    @property
    def said(self) -> str:
        return self.revision or "its default branch"


@dataclass
class Pinned:
    """What ``pin`` found: the ``--set`` overrides that record each commit, and the lines to
    print once the job exists (a refusal before it stays one line)."""

    sets: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


_REPO_ID = re.compile(r"(\b[\w\-.]{1,96}\b/)?\b[\w\-.]{1,96}\b", re.ASCII)
"""huggingface_hub's ``REPO_ID_REGEX`` (``utils/_validators.py``, v1.x/2.x): an optional
``namespace/``, then a name of ASCII letters, digits, ``-``, ``_``, ``.``; with
``validate_repo_id``'s other rules (``repo_problem``), what the Hub accepts before any request."""


def repo_problem(name: str) -> str | None:
    """Why ``name`` cannot be a Hugging Face repo id (huggingface_hub ``validate_repo_id``:
    1-96 characters a-z A-Z 0-9 ``-_.`` per part, at most one ``/``, no ``--`` or ``..``, no
    ``.git`` ending, no leading or trailing ``-``/``.``); None when it can, or when ``name`` is a
    local or remote folder (starts with ``/``, ``.``, ``~`` or holds ``://``)."""
    if "://" in name or name.startswith(("/", ".", "~")):
        return None
    if name.count("/") > 1:
        return "is not a Hugging Face repo id (namespace/name) nor an absolute path"
    if not _REPO_ID.fullmatch(name) or any(
        p[:1] in "-." or p[-1:] in "-." for p in name.split("/")
    ):
        return (
            "is not a Hugging Face repo id: letters, digits, '-', '_' and '.' only, at most 96 "
            "per part, not starting or ending with '-' or '.'"
        )
    if "--" in name or ".." in name or name.endswith(".git"):
        return "is not a Hugging Face repo id: no '--' or '..', no '.git' ending"
    return None


def hub_repo(name: str, presets: Sequence[str] = ()) -> str | None:
    """``name`` if it is a Hub repository id (``namespace/name``), else None: a preset, a path,
    a URI or a data file."""
    if not name or name in presets or "://" in name or name.startswith(("/", ".", "~")):
        return None
    if name.count("/") != 1 or name.lower().endswith(DATA_FILE_SUFFIXES):
        return None
    return name if repo_problem(name) is None else None


def _flag(extra_args: Sequence[str], flag: str) -> str | None:
    prefix = f"--{flag}="
    return next((a[len(prefix) :] for a in extra_args if a.startswith(prefix)), None)


def hub_inputs(
    model: str, dataset: str, extra_args: Sequence[str], values: Mapping[str, object]
) -> list[HubInput]:
    """The job's inputs that live on the Hub, with the revision its file names."""
    from planner.shapes import training_presets  # the presets, read without importing torch

    found = []
    if (repo := hub_repo(model, list(training_presets()))) is not None:
        found.append(HubInput("model", repo, _revision(values, "model")))
    data = None
    if dataset == "hf_dataset":
        data = hub_repo(_flag(extra_args, "hf_dataset") or "")
    elif dataset == "samsum_dataset":
        data = SAMSUM_HUB_ID
    if data is not None:
        found.append(HubInput("dataset", data, _revision(values, "dataset")))
    return found


def _revision(values: Mapping[str, object], kind: str) -> str | None:
    value = values.get(KEYS[kind])
    return str(value) if value not in (None, "") else None


def offline(env: Mapping[str, str]) -> bool:
    """As huggingface_hub decides it: the first of ``OFFLINE_VARIABLES`` that is set."""
    value = next((env[k] for k in OFFLINE_VARIABLES if env.get(k)), "")
    return value.upper() in OFFLINE_VALUES


def endpoint(env: Mapping[str, str]) -> str:
    """The Hub's base URL as huggingface_hub builds it from ``HF_ENDPOINT``."""
    return (env.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def resolve(item: HubInput, env: Mapping[str, str]) -> str:
    """The commit SHA ``item.revision`` names on the Hub. ``JobsError`` (status 2) when the
    Hub says the revision does not exist; ``Unresolved`` when it cannot say."""
    if offline(env):
        raise Unresolved("offline: HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE is set")
    try:
        from huggingface_hub import HfApi
        from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError
    except ImportError:
        raise Unresolved("the huggingface_hub package is not installed") from None
    # Endpoint and token from the environment given (not huggingface_hub's import-time copy):
    # HfApi(endpoint=None) would use constants.ENDPOINT, read once at import.
    api = HfApi(endpoint=endpoint(env), token=env.get("HF_TOKEN") or None)
    info = api.model_info if item.kind == "model" else api.dataset_info
    try:
        sha = info(item.repo, revision=item.revision, timeout=TIMEOUT_S).sha
    except RevisionNotFoundError:
        raise JobsError(
            f"{item.key}: {item.revision!r}: no such revision of {item.kind} {item.repo} on the "
            "Hub (a branch, a tag or a commit)",
            status=2,
        ) from None
    except RepositoryNotFoundError:  # private or missing: 401/404 RepoNotFound (utils/_http.py)
        # A gated repository's info answers 200 with or without a token (its files need one),
        # so a gated model resolves here; GatedRepoError, a subclass, is caught alike.
        raise Unresolved(
            "the Hub shows no such repository to this token (private, or not found: set HF_TOKEN "
            "for a private one)"
        ) from None
    except Exception as err:  # offline mode, DNS, refused, timeout, a 5xx: cannot say
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise Unresolved(f"the Hub cannot be reached: {first}") from None
    if not isinstance(sha, str) or not SHA.match(sha):
        raise Unresolved(f"the Hub answered no commit for it (sha {sha!r})")
    return sha


@dataclass(frozen=True)
class Recorded:
    """The revisions the newest complete checkpoint under ``submit --from``'s root was made
    with (its meta.json's ``revisions``, ``training.checkpoint.REVISIONS``)."""

    where: str
    """The checkpoint, as the notes name it."""
    revisions: Mapping[str, str]
    """``{"model": sha, "dataset": sha}``; a kind without a commit is absent."""


def recorded(root: str | None, folder: str) -> tuple[Recorded | None, str | None]:
    """(what the newest complete checkpoint of ``folder`` under ``root`` records, a warning
    line when it cannot be read). Readable from here: a local folder (``submit --local --from``,
    or a cluster path this machine also mounts) and ``s3://`` (``training.s3``'s reader, the
    one a resuming job uses: newest complete ``step-N`` with its ``COMPLETE`` marker). A path
    only the pods see: nothing (the training side refuses another commit,
    ``training.checkpoint.check_revisions``)."""
    import json
    from pathlib import Path

    if not root:
        return None, None
    try:
        if root.startswith("s3://"):
            from training.s3.checkpoints import latest_complete, read_meta
            from training.s3.uri import S3Uri

            found = latest_complete(S3Uri.parse(root) / folder)
            meta = read_meta(found) if found is not None else {}
            where = str(found)
        else:
            from localrun.result import complete_checkpoint_steps

            base = Path(root) / folder
            steps = complete_checkpoint_steps(base) if base.is_dir() else []
            if not steps:
                return None, None
            step = base / f"step-{steps[-1]:06d}"
            step = step if (step / "meta.json").is_file() else step.with_name(step.name + ".old")
            meta = json.loads((step / "meta.json").read_text(encoding="utf-8"))
            where = str(step)
    except Exception as err:  # no credentials, access denied, a torn meta.json: say so
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return None, f"warning: --from {root}: the checkpoint's revisions not read ({first})"
    saved = meta.get("revisions") if isinstance(meta, dict) else None
    if not isinstance(saved, dict):
        return None, None
    revisions = {k: str(v) for k, v in saved.items() if k in KEYS and SHA.match(str(v or ""))}
    return (Recorded(where, revisions) if revisions else None), None


def pin(
    model: str,
    dataset: str,
    extra_args: Sequence[str],
    values: Mapping[str, object],
    *,
    source: str,
    env: Mapping[str, str] | None = None,
    checkpoint: Recorded | None = None,
) -> Pinned:
    """Each Hub input's revision as a commit: the ``--set KEY="SHA"`` overrides to reload the
    job file with, and one line per input. ``JobsError`` (status 2) for a revision that does
    not exist, or one that cannot be resolved under ``requireRevisions: true``.
    ``checkpoint``: what the checkpoint a ``submit --from`` resumes was made with; its commit
    wins over a branch (or none) in the job file, so the resumed run loads the same weights
    and rows as the run it continues."""
    env = os.environ if env is None else env
    required = values.get(REQUIRE_KEY) is True
    out = Pinned()
    for item in hub_inputs(model, dataset, extra_args, values):
        if item.revision is not None and SHA.match(item.revision):
            out.notes.append(f"pinned: {item.kind} {item.repo} at commit {item.revision}")
            continue
        if checkpoint is not None and item.kind in checkpoint.revisions:
            sha = checkpoint.revisions[item.kind]
            out.sets.append(f'{item.key}="{sha}"')
            out.notes.append(
                f"pinned: {item.kind} {item.repo} {item.said} -> commit {sha}, the one "
                f"{checkpoint.where} was made with"
            )
            continue
        try:
            sha = resolve(item, env)
        except Unresolved as why:
            if required:
                raise JobsError(
                    f"{source}: {REQUIRE_KEY}: {item.kind} {item.repo} at {item.said}: not "
                    f"resolved to a commit ({why}); name a commit in {item.key}, or reach the "
                    "Hub (HF_ENDPOINT, HF_TOKEN)",
                    status=2,
                ) from None
            out.notes.append(
                f"warning: {item.kind} {item.repo} not pinned to a commit ({why}): restarts "
                f"load whatever {item.said} holds then"
            )
            continue
        out.sets.append(f'{item.key}="{sha}"')  # quoted: --set reads YAML, a SHA is a string
        out.notes.append(f"pinned: {item.kind} {item.repo} {item.said} -> commit {sha}")
    return out


JOBS_NAMESPACE = "default"
"""The stack's jobs namespace: its jobs' checkpoints sit in ``<root>/NAME``, a team's in
``<root>/NS/NAME`` (``workloads.specs.pytorchjob.job_folder``)."""


def pin_values(
    values: Mapping[str, Any],
    *,
    default_dataset: str,
    source: str,
    env: Mapping[str, str] | None = None,
    from_uri: str | None = None,
    local: bool = False,
) -> Pinned:
    """``pin`` on a job file's keys as read (``--set`` applied), before they are checked: what
    it finds on the Hub (``model``, ``dataset``, ``args.hf_dataset``) is pinned, and the file is
    then checked once with the commits in (``jobs submit``). Keys of the wrong type name no Hub
    input here; the schema refuses them when it checks the file. ``default_dataset``: the
    schema's default ``dataset`` (``jobs.schema.default``)."""

    def text(key: str, default: str = "") -> str:
        value = values.get(key, default)
        return value if isinstance(value, str) else ""

    raw_args = values.get("args")
    args = raw_args if isinstance(raw_args, Mapping) else {}
    extra = tuple(f"--{str(k).lstrip('-').replace('-', '_')}={v}" for k, v in args.items())
    name = text("name")
    namespace = text("team") or text("namespace") or JOBS_NAMESPACE
    folder = name if local or namespace == JOBS_NAMESPACE else f"{namespace}/{name}"
    found, warning = recorded(from_uri, folder) if name else (None, None)
    out = pin(
        text("model"),
        text("dataset", default_dataset),
        extra,
        values,
        source=source,
        env=env,
        checkpoint=found,
    )
    if warning is not None:
        out.notes.insert(0, warning)
    return out
