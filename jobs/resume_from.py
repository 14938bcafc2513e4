"""``resume NAME --from URI``: the checkpoint root a resumed job continues from.

A checkpoint of job ``NAME`` is ``<root>/NAME/step-N/`` with a ``COMPLETE`` marker
(``training/checkpoint.py``; a team's job, in namespace ``NS``, keeps its checkpoints in
``<root>/NS/NAME/``: ``workloads.specs.pytorchjob.job_folder``); the root is training's ``--dist_checkpoint_root_folder`` (the
checkpoint volume's mount unless ``--from`` names another). ``URI`` is

- a path: for a local job a folder on this machine (relative to the current folder); for a
  cluster job an absolute path in the pods, on the job's checkpoint claim (anything else is
  the container's own disk, gone with the pod);
- ``s3://BUCKET/PREFIX``: training reads and writes DCP checkpoints there (the bucket name
  as S3's naming rules allow it: 3-63 lowercase letters, digits, dots and hyphens, starting
  and ending with a letter or digit; docs.aws.amazon.com/AmazonS3/latest/userguide/
  bucketnamingrules.html).

The new job reads the newest complete checkpoint there and keeps writing its checkpoints to
the same root (so a later ``resume`` without ``--from`` continues from it: the root is kept in
the job's record); its metrics and output stay where the job's output always goes.

``submit FILE --from URI`` is the same for a job this cluster has no record of: after
``pulumi destroy`` and a new ``pulumi up`` the records (kept on the cluster) are gone, the
checkpoints in the bucket are not. Its first generation gets ``--resume_required``: a root
with no complete checkpoint of the job stops it before its first step, in one line, instead
of training again from step 0 (a local folder is checked here before anything starts).
``submit --from`` also writes the job's record beside its checkpoints, ``ROOT/NAME/job.json``
(``keep_record``), so that ``resume NAME --from ROOT`` on a cluster without the record
rebuilds the submission from it (``resubmit``).
"""

from __future__ import annotations

import json
import posixpath
import re
from pathlib import Path
from typing import Any

import yaml

from jobs.types import JobsError
from workloads.specs.settings import JobSettings

ROOT_FLAG = "--dist_checkpoint_root_folder"
"""The training flag that names the checkpoint root (``training.config``)."""
REQUIRED_FLAG = "--resume_required"
"""The training flag that stops a resume finding no complete checkpoint (``training.config``)."""
_SCHEME = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<rest>.*)$")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


def parse(uri: str, *, local: bool, claim_mount: str | None = None) -> str:
    """``uri`` checked and normalised (a local path made absolute), or ``JobsError`` (status 2)
    in one line naming it. ``claim_mount``: where a cluster job's checkpoint claim is mounted
    (None: the job has no claim)."""
    where = f"--from {uri}"
    if not uri.strip():
        raise JobsError("--from: empty; give a path or s3://BUCKET/PREFIX", status=2)
    found = _SCHEME.match(uri)
    if found is not None:
        scheme = found["scheme"].lower()
        if scheme != "s3":
            raise JobsError(
                f"{where}: unknown scheme {found['scheme']!r}: give a path or s3://BUCKET/PREFIX",
                status=2,
            )
        bucket, _, prefix = found["rest"].partition("/")
        if not bucket:
            raise JobsError(f"{where}: no bucket: give s3://BUCKET/PREFIX", status=2)
        if not _BUCKET.match(bucket) or ".." in bucket:
            raise JobsError(
                f"{where}: {bucket!r} is not an S3 bucket name (3-63 lowercase letters, "
                "digits, dots and hyphens)",
                status=2,
            )
        prefix = prefix.strip("/")
        return f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"
    if local:
        path = Path(uri).expanduser().resolve()
        if not path.is_dir():
            raise JobsError(f"{where}: no such folder", status=2)
        return str(path)
    if not uri.startswith("/"):
        raise JobsError(
            f"{where}: a path in the pods must be absolute (on the checkpoint claim), or give "
            "s3://BUCKET/PREFIX",
            status=2,
        )
    path = posixpath.normpath(uri)
    if claim_mount is None:
        raise JobsError(
            f"{where}: the job has no checkpointClaim, so no path in its pods outlives them: "
            "give s3://BUCKET/PREFIX",
            status=2,
        )
    if path != claim_mount and not path.startswith(claim_mount.rstrip("/") + "/"):
        raise JobsError(
            f"{where}: not on the job's checkpoint claim (mounted at {claim_mount}): give a "
            f"path under {claim_mount}, or s3://BUCKET/PREFIX",
            status=2,
        )
    return path


def with_root(job: JobSettings, root: str | None) -> JobSettings:
    """``job`` reading and writing its checkpoints under ``root`` (and resuming from them);
    ``job`` itself when ``root`` is None."""
    if not root:
        return job
    flags = (ROOT_FLAG, REQUIRED_FLAG)
    args = [a for a in job.train_args if a.split("=", 1)[0] not in flags]
    # a first generation with a root is ``submit --from``: only the root can hold its start
    required = (REQUIRED_FLAG,) if job.generation == 1 else ()
    return job.replace(train_args=(*args, f"{ROOT_FLAG}={root}", *required), resume=True)


def for_job(uri: str, job: JobSettings) -> str:
    """``uri`` (``submit --from``) checked against a cluster job: a path must be on its
    checkpoint claim (``parse``)."""
    mount = job.checkpoint_mount if job.checkpoint_claim else None
    return parse(uri, local=False, claim_mount=mount)


class NoRecord(JobsError):
    """``resume NAME``: no record of the job where it was asked (``no_record``)."""


JOB_RECORD = "job.json"
"""The job's record beside its checkpoints, ``ROOT/<folder>/job.json``: what ``resume NAME
--from ROOT`` rebuilds the submission from on a cluster (or machine) without the record."""


def job_folder(name: str, namespace: str | None) -> str:
    """The job's folder under a checkpoint root: the rule the pods' flags follow
    (``workloads.specs.pytorchjob.folder_of``)."""
    from workloads.specs.pytorchjob import folder_of

    return folder_of(name, namespace)


def keep_record(root: str, folder: str, values: dict[str, Any], image: str | None) -> str:
    """Write ``ROOT/<folder>/job.json`` (the job file's values, with the pinned revisions, and
    the image); where it went. Written by ``submit --from`` with the submitting user's
    credentials: the CLI holds the job file and the image, and a job that never reaches a
    checkpoint has nothing to resume anyway; the pods' role need not write outside its
    checkpoints. A path root is written here only for a local job (a cluster's is in the pods)."""
    body = json.dumps({"values": values, "image": image}, indent=2, sort_keys=True) + "\n"
    if root.startswith("s3://"):
        from training.s3.client import client
        from training.s3.uri import S3Uri

        uri = S3Uri.parse(root) / folder / JOB_RECORD
        client().put_object(Bucket=uri.bucket, Key=uri.key, Body=body.encode("utf-8"))
        return str(uri)
    path = Path(root) / folder / JOB_RECORD
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body, encoding="utf-8")
    return str(path)


def read_record(root: str, folder: str) -> tuple[str, dict[str, Any] | None]:
    """(where, the job's ``job.json`` under ``root``, or None when there is none)."""
    if root.startswith("s3://"):
        from botocore.exceptions import ClientError

        from training.s3.client import client
        from training.s3.uri import S3Uri

        uri = S3Uri.parse(root) / folder / JOB_RECORD
        try:
            body = client().get_object(Bucket=uri.bucket, Key=uri.key)["Body"].read()
        except ClientError as e:
            if e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") in (403, 404):
                return str(uri), None
            raise
        return str(uri), json.loads(body)
    path = Path(root) / folder / JOB_RECORD
    return str(path), json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def resubmit(
    backend: Any, err: NoRecord, root: str, folder: str, image: str | None, *, local: bool
) -> Any:
    """``resume NAME --from ROOT`` without a record here: submit the job again from
    ``ROOT/<folder>/job.json`` (``image``, when given, replaces the recorded one); ``err``
    (the usual hint, naming the missing file) when there is none."""
    from jobs.schema import JobFileError, loads

    where, record = read_record(root, folder)
    if record is None:
        raise NoRecord(f"{err} (no {where})", status=err.status) from None
    try:
        job = loads(yaml.safe_dump(record["values"], sort_keys=False), source=where)
    except (JobFileError, KeyError, TypeError) as e:
        raise JobsError(f"{where}: not a job record: {e}", status=2) from None
    chosen = {} if local else {"image": image or record.get("image")}
    return backend.submit(job, from_uri=root, **chosen)


def no_record(name: str, where: str, flags: str = "", folder: str | None = None) -> NoRecord:
    """``resume NAME`` when ``where`` (a cluster's namespace, this machine) has no record of
    the job: a new cluster's records start empty; the checkpoints outlive them. ``folder``:
    the job's folder under the root (``pytorchjob.job_folder``; its name by default)."""
    return NoRecord(
        f"no record of job {name} {where} (a new cluster?): use `eks-fsdp jobs submit FILE "
        f"--from ROOT{flags}` (ROOT holds {folder or name}/step-N/)"
    )


def checkpoint_folder(root: str, name: str) -> Path | None:
    """The local folder holding job ``name``'s checkpoints under ``root`` (None for s3)."""
    if root.startswith("s3://"):
        return None
    return Path(root) / name


def local_root(uri: str, name: str) -> tuple[str, list[int]]:
    """``uri`` (``submit --local --from``) checked, and the steps of job ``name``'s complete
    checkpoints under it (a folder here; ``[]`` for ``s3://``, which training checks with
    ``--resume_required``); a folder without one is an error naming it (status 2)."""
    from localrun.result import complete_checkpoint_steps

    root = parse(uri, local=True)
    where = checkpoint_folder(root, name)
    steps = complete_checkpoint_steps(where) if where is not None else []
    if where is not None and not steps:
        raise JobsError(
            f"--from {uri}: no complete checkpoint in {where}: --from names the root that "
            f"holds {name}/step-N/",
            status=2,
        )
    return root, steps
