"""Checks on the deploying machine: the stack's secrets, Docker with buildx, the model on the Hub.

- **Secrets** are read from ``Pulumi.<stack>.yaml`` without decrypting: a set secret is a
  ``{secure: <ciphertext>}`` value there (Pulumi docs, "Configuration": secrets are stored
  encrypted under ``secure:`` in the stack settings file). Which ones a stack needs is what the
  program refuses without: ``grafanaAdminPassword`` with ``observability.enabled``
  (``workloads.observability.ObservabilityArgs``); ``hfToken`` when a job of the stack loads a
  gated model (the cluster's ``hf-token`` Secret is made from it, ``workloads.program``).
- **The Pulumi CLI**, first: every later step of docs/deploy.md runs it (``pulumi install``,
  ``config``, ``preview``, ``up``) and ``make setup`` installs only its Python SDKs; at least
  ``infra.versions.PULUMI_CLI_MIN``, read from ``pulumi version``.
- **Docker with buildx**: the stack builds the training image wherever ``pulumi up`` runs
  (``workloads.training_image``, pulumi-docker-build, which drives BuildKit through the Docker
  daemon), so ``docker buildx version`` must work there; a stack without GPU groups builds none.
- **The model**: ``HfApi.model_info`` (huggingface_hub) with ``HF_TOKEN``, against
  ``HF_ENDPOINT`` (default https://huggingface.co). The Hub answers a gated repository's info
  (``GET /api/models/{repo}``) with 200 and ``gated: "manual"|"auto"`` with or without a token;
  it refuses its files. So a gated model is then asked ``HfApi.auth_check`` (``GET
  /api/models/{repo}/auth-check``; huggingface_hub 2.4.0, the version requirements pin,
  ``src/huggingface_hub/hf_api.py`` ``auth_check``), which answers 401/403 with ``X-Error-Code:
  GatedRepo`` until the licence is accepted and the token is of that account
  (``utils/_http.py`` ``hf_raise_for_status`` maps it to ``GatedRepoError``). Unreachable:
  ``skip (offline)``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from doctor.checks import FAIL, OK, SKIP, WARN, Result
from infra.config import NAMESPACE, StackConfig
from infra.config.observability import SECRET_RECEIVERS
from infra.config.sources import REPO_ROOT

DEFAULT_ENDPOINT = "https://huggingface.co"


def secure_keys(stack: str, root: Path = REPO_ROOT) -> dict[str, bool]:
    """``{key: is_secure}`` of the ``eks-fsdp:`` keys set in ``Pulumi.<stack>.yaml`` (the
    ciphertext is never decrypted or returned)."""
    import yaml

    from eks_fsdp_cli.errors import read_text

    data = yaml.safe_load(read_text(root / f"Pulumi.{stack}.yaml")) or {}
    out: dict[str, bool] = {}
    for key, value in (data.get("config") or {}).items():
        ns, _, name = str(key).partition(":")
        if ns == NAMESPACE and name:
            out[name] = isinstance(value, Mapping) and "secure" in value
    return out


def check_secrets(
    cfg: StackConfig,
    gated_models: Sequence[str],
    root: Path = REPO_ROOT,
    unknown: Sequence[str] = (),
) -> list[Result]:
    """The secrets the stack needs are set, as secrets; ``unknown``: hub models whose gating
    could not be looked up (offline)."""
    keys = secure_keys(cfg.stack, root)
    needs = []
    if cfg.observability.enabled:
        needs.append(("grafanaAdminPassword", "observability.enabled is true"))
        receiver = cfg.observability.alerts.receiver
        if receiver in SECRET_RECEIVERS:
            needs.append(("alertsSecret", f"observability.alerts.receiver is {receiver}"))
    if gated_models:
        needs.append(("hfToken", f"gated model {', '.join(gated_models)}"))
    out = []
    for key, why in needs:
        if keys.get(key):
            out.append(Result(check=f"secret {key}", status=OK, detail=f"set (secure), {why}"))
        else:
            out.append(
                Result(
                    check=f"secret {key}",
                    status=FAIL,
                    detail=f"not set; needed: {why}",
                    fix=f"pulumi config set --secret {key} ... --stack {cfg.stack}",
                )
            )
    if "hfToken" not in dict(needs) and unknown:
        state = "set" if keys.get("hfToken") else "not set"
        out.append(
            Result(
                check="secret hfToken",
                status=WARN,
                detail=f"{state}; whether {', '.join(unknown)} is gated is unknown (offline)",
                fix=f"gated models need it: pulumi config set --secret hfToken ... --stack {cfg.stack}",
            )
        )
    elif "hfToken" not in dict(needs):
        state = "set" if keys.get("hfToken") else "not set"
        out.append(
            Result(
                check="secret hfToken",
                status=OK,
                detail=f"{state}; no gated model known to need it",
            )
        )
    return out


def check_docker(cfg: StackConfig, env: Mapping[str, str] | None = None) -> Result:
    """``docker buildx version`` runs where the image is built (stacks with GPU groups)."""
    if not cfg.gpu_node_groups:
        return Result(check="docker buildx", status=SKIP, detail="the stack builds no image")
    env = dict(os.environ if env is None else env)
    docker = shutil.which("docker", path=env.get("PATH"))
    fix = "install Docker with the buildx plugin (docs.docker.com/build/) on this machine"
    if docker is None:
        return Result(check="docker buildx", status=FAIL, detail="no docker on PATH", fix=fix)
    try:
        proc = subprocess.run(
            [docker, "buildx", "version"],
            capture_output=True,
            text=True,
            timeout=30,
            env=env,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return Result(check="docker buildx", status=FAIL, detail=f"docker buildx: {err}", fix=fix)
    line = (proc.stdout or proc.stderr).strip().splitlines()
    if proc.returncode != 0:
        return Result(
            check="docker buildx",
            status=FAIL,
            detail=f"docker buildx version: exit {proc.returncode}: {line[0] if line else ''}",
            fix=fix,
        )
    return Result(check="docker buildx", status=OK, detail=line[0] if line else "present")


PULUMI_INSTALL = "https://www.pulumi.com/docs/install/"

KNOWN_GATED = ("meta-llama/",)
"""Hub namespaces whose models are all gated (a licence to accept on the model's page): every
``meta-llama/`` repository answers ``gated: "manual"`` (Llama 2, 3, 3.1, 3.2, 3.3; the Hub's
``GET /api/models/{repo}``). Offline, doctor still knows these need ``hfToken``."""


def known_gated(model: str) -> bool:
    """True for a hub id in a namespace whose models are all gated (``KNOWN_GATED``)."""
    return model.startswith(KNOWN_GATED)


def _version_tuple(text: str) -> tuple[int, int, int] | None:
    """``v3.272.0`` (``pulumi version``'s output, also ``v3.272.0-alpha.x`` or ``+dirty``)
    -> ``(3, 272, 0)``; None for anything else."""
    m = re.fullmatch(r"v?(\d+)\.(\d+)\.(\d+)([-+.][\w.+-]*)?", text.strip())
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def check_pulumi_cli(env: Mapping[str, str] | None = None) -> Result:
    """The Pulumi CLI is on PATH and at least ``versions.PULUMI_CLI_MIN``: ``pulumi version``
    prints ``v3.272.0`` (what the Automation API parses, ``pulumi/automation/_cmd.py``, with
    ``PULUMI_SKIP_UPDATE_CHECK=true`` so that it asks no server for a newer release)."""
    from infra.versions import PULUMI_CLI_MIN

    env = dict(os.environ if env is None else env)
    name = "pulumi CLI"
    fix = (
        f"install the Pulumi CLI {PULUMI_CLI_MIN} or newer ({PULUMI_INSTALL}: "
        f"curl -fsSL https://get.pulumi.com | sh -s -- --version {PULUMI_CLI_MIN}); "
        "make setup installs only its Python SDKs"
    )
    pulumi = shutil.which("pulumi", path=env.get("PATH"))
    if pulumi is None:
        return Result(check=name, status=FAIL, detail="no pulumi on PATH", fix=fix)
    try:
        proc = subprocess.run(
            [pulumi, "version"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**env, "PULUMI_SKIP_UPDATE_CHECK": "true"},
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return Result(check=name, status=FAIL, detail=f"{pulumi} version: {err}", fix=fix)
    out = (proc.stdout or proc.stderr).strip()
    first = out.splitlines()[0] if out else ""
    found = _version_tuple(first) if proc.returncode == 0 else None
    if found is None:
        what = f"exit {proc.returncode}: " if proc.returncode else ""
        return Result(
            check=name,
            status=FAIL,
            detail=f"{pulumi} version: {what}{first!r} is not a version",
            fix=fix,
        )
    least = _version_tuple(PULUMI_CLI_MIN)
    if least is not None and found < least:
        return Result(
            check=name,
            status=FAIL,
            detail=f"{first} at {pulumi} is older than {PULUMI_CLI_MIN}",
            fix=fix,
        )
    return Result(check=name, status=OK, detail=f"{first} at {pulumi}")


def is_hub_id(model: str) -> bool:
    """A Hugging Face repo id (``namespace/name``), not a preset of ``training`` (read with
    ``ast`` by ``planner.shapes.training_presets``) nor a local or remote folder."""
    from planner.shapes import training_presets

    if model in training_presets() or "://" in model or model.startswith(("/", ".", "~")):
        return False
    return model.count("/") == 1


def model_info(model: str, revision: str | None, token: str | None, endpoint: str) -> Any:
    """``HfApi(endpoint).model_info`` (huggingface_hub); raises what it raises."""
    from huggingface_hub import HfApi

    return HfApi(endpoint=endpoint, token=token or False).model_info(
        model, revision=revision, token=token or False
    )


def auth_check(model: str, token: str | None, endpoint: str) -> None:
    """``HfApi(endpoint).auth_check`` (huggingface_hub): ``GatedRepoError`` when the token (or
    none) may not read the gated repository's files."""
    from huggingface_hub import HfApi

    HfApi(endpoint=endpoint, token=token or False).auth_check(model, token=token or False)


def check_model(
    model: str, revision: str | None = None, env: Mapping[str, str] | None = None
) -> tuple[Result, bool]:
    """(result, gated) for a hub model: reachable with ``HF_TOKEN``; ``skip (offline)`` when the
    Hub cannot be reached or ``HF_HUB_OFFLINE`` is set."""
    env = os.environ if env is None else env
    name = f"model {model}"
    # huggingface_hub 2.4.0 constants.py: _is_true(HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE)
    variable = next((k for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE") if env.get(k)), None)
    if variable is not None and env[variable].lower() in ("1", "true", "yes", "on"):
        return Result(check=name, status=SKIP, detail=f"skipped (offline: {variable})"), False
    endpoint = (env.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
    token = env.get("HF_TOKEN") or None
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    try:
        info = model_info(model, revision, token, endpoint)
        if getattr(info, "gated", False):  # info answers 200 for a gated repo; files do not
            auth_check(model, token, endpoint)
    except GatedRepoError:
        fix = (
            f"accept the licence at {endpoint}/{model} and set hfToken "
            "(export HF_TOKEN=hf_... of that account for this check)"
        )
        detail = "gated: the token is refused" if token else "gated: no HF_TOKEN"
        return Result(check=name, status=FAIL, detail=detail, fix=fix), True
    except RevisionNotFoundError:
        return Result(
            check=name,
            status=FAIL,
            detail=f"revision {revision} not found",
            fix="set modelRevision to a commit, branch or tag of the model",
        ), False
    except RepositoryNotFoundError:
        return Result(
            check=name,
            status=FAIL,
            detail=f"not found on {endpoint} (or private)",
            fix="check the model id, or export HF_TOKEN for a private model",
        ), False
    except HfHubHTTPError as err:
        status = getattr(getattr(err, "response", None), "status_code", "?")
        return Result(
            check=name, status=WARN, detail=f"Hub answered HTTP {status}", fix="retry later"
        ), False
    except OSError as err:  # connection refused, DNS failure, proxy errors
        return Result(
            check=name, status=SKIP, detail=f"skipped (offline: {type(err).__name__})"
        ), False
    except Exception as err:  # httpx's transport errors are not OSErrors
        root = type(err).__module__.split(".")[0]
        if root.startswith(("httpx", "httpcore", "requests", "urllib3")):
            return Result(
                check=name, status=SKIP, detail=f"skipped (offline: {type(err).__name__})"
            ), False
        raise
    gated = bool(getattr(info, "gated", False))
    sha = getattr(info, "sha", None)
    detail = f"reachable{' (gated, token accepted)' if gated else ''}; revision {sha}"
    return Result(check=name, status=OK, detail=detail), gated
