"""Build the local control plane's binaries from the Go modules under ``controlplane/go/``.

    eks-fsdp controlplane build            # what is missing, into the cache
    eks-fsdp controlplane build --print    # the cache folder, building nothing

One wrapper module per upstream that needs its own ``k8s.io`` library versions (a Go build
list holds one version per module): ``kubernetes`` (kube-apiserver, kube-controller-manager,
kube-scheduler from ``k8s.io/kubernetes``, its staging modules required at the published
``v0.35.x`` with ``replace`` lines, as its own go.mod replaces them with local paths), ``etcd``
(a one-line main over ``etcdmain``), ``kwok``, ``training-operator`` and ``kueue``. The pins
are ``infra.versions``'s; ``tests/controlplane/test_pins.py`` checks that the go.mod files agree.

The binaries go to ``${XDG_CACHE_HOME:-~/.cache}/eks-fsdp/controlplane/<key>/bin``, outside the
checkout; the key hashes the Go version and every go.mod/go.sum, so a pin bump builds anew and
an unchanged tree reuses what is there (a binary present is never rebuilt). The manifests the
control plane installs (the operator's and Kueue's CRDs and webhook configurations, kwok's
stages) are copied from the same module versions into ``<key>/manifests``.

``KUBEBUILDER_ASSETS`` (a folder as ``setup-envtest`` lays it out: ``etcd``, ``kube-apiserver``,
``kubectl``) supplies etcd and kube-apiserver when set; the others are built all the same.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from infra import versions

GO_DIR = Path(__file__).resolve().parent / "go"
"""The wrapper modules, one folder each."""
ENVTEST_ENV = "KUBEBUILDER_ASSETS"


@dataclass(frozen=True, kw_only=True)
class Module:
    """One wrapper module under ``controlplane/go/`` and the upstream module it builds."""

    folder: str
    """Folder under ``controlplane/go/``."""
    upstream: str
    """The upstream module path its go.mod requires."""
    version: str
    """The pin (``infra.versions``) that go.mod must require."""
    ldflags: tuple[str, ...] = ()
    """``-X`` version stamps (``/version`` and the logs read them)."""
    manifests: tuple[str, ...] = ()
    """Files of the upstream module copied to ``manifests/<folder>/`` (globs, module-relative)."""


def _k8s_stamps() -> tuple[str, ...]:
    """What ``hack/lib/version.sh`` stamps into a Kubernetes release build. kwok and Kueue parse
    the API server's ``/version``; an unstamped build reports ``v0.0.0-master``."""
    v = versions.CONTROL_PLANE_KUBERNETES_VERSION
    major, minor = v.lstrip("v").split(".")[:2]
    out = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        out += [
            f"-X {pkg}.gitVersion={v}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
            f"-X {pkg}.buildDate=1970-01-01T00:00:00Z",
        ]
    return tuple(out)


MODULES: dict[str, Module] = {
    m.folder: m
    for m in (
        Module(
            folder="kubernetes",
            upstream="k8s.io/kubernetes",
            version=versions.CONTROL_PLANE_KUBERNETES_VERSION,
            ldflags=_k8s_stamps(),
        ),
        Module(
            folder="etcd",
            upstream="go.etcd.io/etcd/server/v3",
            version=versions.CONTROL_PLANE_ETCD_VERSION,
        ),
        Module(
            folder="kwok",
            upstream="sigs.k8s.io/kwok",
            version=versions.KWOK_VERSION,
            manifests=(
                "kustomize/stage/node/fast/node-initialize.yaml",
                "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
                "kustomize/stage/pod/fast/pod-ready.yaml",
                "kustomize/stage/pod/fast/pod-complete.yaml",
                "kustomize/stage/pod/fast/pod-delete.yaml",
            ),
        ),
        Module(
            folder="training-operator",
            upstream="github.com/kubeflow/training-operator",
            version=versions.TRAINING_OPERATOR_VERSION,
            manifests=(
                "manifests/base/crds/kubeflow.org_*.yaml",
                "manifests/base/webhook/manifests.yaml",
            ),
        ),
        Module(
            folder="kueue",
            upstream="sigs.k8s.io/kueue",
            version=versions.KUEUE_VERSION,
            ldflags=(f"-X sigs.k8s.io/kueue/pkg/version.GitVersion={versions.KUEUE_VERSION}",),
            manifests=(
                "config/components/crd/bases/*.yaml",
                "config/components/webhook/manifests.yaml",
            ),
        ),
    )
}


@dataclass(frozen=True, kw_only=True)
class Binary:
    """One executable of the control plane."""

    name: str
    """File name under ``bin/``."""
    module: str
    """``MODULES`` key of the wrapper module that builds it."""
    package: str
    """The Go package built (``.`` for the wrapper's own main)."""
    envtest: bool = False
    """Shipped by ``setup-envtest`` (taken from ``KUBEBUILDER_ASSETS`` when it is set)."""


BINARIES: tuple[Binary, ...] = (
    Binary(name="etcd", module="etcd", package=".", envtest=True),
    Binary(
        name="kube-apiserver",
        module="kubernetes",
        package="k8s.io/kubernetes/cmd/kube-apiserver",
        envtest=True,
    ),
    Binary(
        name="kube-controller-manager",
        module="kubernetes",
        package="k8s.io/kubernetes/cmd/kube-controller-manager",
    ),
    Binary(
        name="kube-scheduler", module="kubernetes", package="k8s.io/kubernetes/cmd/kube-scheduler"
    ),
    Binary(name="kwok", module="kwok", package="sigs.k8s.io/kwok/cmd/kwok"),
    Binary(
        name="training-operator",
        module="training-operator",
        package="github.com/kubeflow/training-operator/cmd/training-operator.v1",
    ),
    Binary(name="kueue", module="kueue", package="sigs.k8s.io/kueue/cmd/kueue"),
)


class BuildError(RuntimeError):
    """A build that cannot run or failed; the message is one line with the fix."""


def cache_root() -> Path:
    """``${XDG_CACHE_HOME:-~/.cache}/eks-fsdp/controlplane``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "eks-fsdp" / "controlplane"


def go_binary() -> str:
    """The Go toolchain: ``go`` on PATH, else where Go's release archives install
    (``/usr/local/go/bin``, go.dev/doc/install), which a non-login shell may lack on PATH."""
    go = shutil.which("go") or shutil.which("go", path="/usr/local/go/bin")
    if go is None:
        raise BuildError(
            "go: not found on PATH; install Go >= 1.26 (https://go.dev/dl) or set "
            f"{ENVTEST_ENV} and build on a machine with Go"
        )
    return go


def go_version() -> str:
    """``go env GOVERSION`` (``BuildError``, one line, without a working Go toolchain)."""
    go = go_binary()
    try:
        out = subprocess.run(
            [go, "env", "GOVERSION"], capture_output=True, text=True, check=False, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise BuildError(f"{go} env GOVERSION: {err}") from None
    version = out.stdout.strip()
    if out.returncode != 0 or not version.startswith("go"):
        lines = (out.stderr.strip() or out.stdout.strip() or "no output").splitlines()
        raise BuildError(
            f"{go} env GOVERSION failed (exit {out.returncode}): {lines[-1]}; "
            "fix the Go toolchain (Go >= 1.26, https://go.dev/dl)"
        )
    return version


def cache_key(go: str) -> str:
    """``k8s-<version>-<hash>``: the Go version, the stamps, the manifests copied and every
    go.mod/go.sum."""
    h = hashlib.sha256(go.encode())
    for folder in sorted(MODULES):
        mod = MODULES[folder]
        h.update(" ".join((*mod.ldflags, *mod.manifests)).encode())
        for name in ("go.mod", "go.sum", "main.go"):
            path = GO_DIR / folder / name
            if path.exists():
                h.update(f"{folder}/{name}".encode() + path.read_bytes())
    return f"k8s-{versions.CONTROL_PLANE_KUBERNETES_VERSION}-{h.hexdigest()[:12]}"


@dataclass(frozen=True, kw_only=True)
class Build:
    """Where the binaries and manifests of one cache key are."""

    root: Path
    """``<cache>/<key>``."""
    binaries: dict[str, Path]
    """Binary name -> executable (from the cache or ``KUBEBUILDER_ASSETS``)."""

    @property
    def manifests(self) -> Path:
        return self.root / "manifests"

    def manifest_files(self, module: str) -> list[Path]:
        """The upstream manifests copied for ``module``, sorted by name."""
        return sorted((self.manifests / module).glob("*.yaml"))


def _envtest_binaries() -> dict[str, Path]:
    folder = os.environ.get(ENVTEST_ENV)
    if not folder:
        return {}
    found = {}
    for b in BINARIES:
        path = Path(folder) / b.name
        if b.envtest and path.is_file() and os.access(path, os.X_OK):
            found[b.name] = path
    return found


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One builder per cache key (parallel test workers wait for the first)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    go_dir = os.path.dirname(go_binary())
    env.update(
        PATH=os.pathsep.join((go_dir, env.get("PATH", ""))),  # "go" below is this toolchain
        CGO_ENABLED="0",  # static binaries, no C toolchain needed
        GOFLAGS="-mod=readonly",  # go.mod and go.sum are committed: never rewritten by a build
        GOTOOLCHAIN="local",  # never download another toolchain
    )
    return env


def _cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _build_one(b: Binary, out: Path, log: Path) -> dict[str, float]:
    mod = MODULES[b.module]
    tmp = out.with_name(f".{out.name}.tmp")
    cmd = [
        "go",
        "build",
        "-trimpath",
        "-ldflags",
        " ".join(("-s", "-w", *mod.ldflags)),
        "-o",
        str(tmp),
        b.package,
    ]
    start, cpu = time.monotonic(), _cpu_seconds()
    with log.open("a") as fh:
        fh.write(f"$ (cd {GO_DIR / mod.folder}) {' '.join(cmd)}\n")
        fh.flush()
        proc = subprocess.run(
            cmd,
            cwd=GO_DIR / mod.folder,
            env=_go_env(),
            stdout=fh,
            stderr=subprocess.STDOUT,
            check=False,
        )
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise BuildError(f"{b.name}: go build failed (exit {proc.returncode}); see {log}")
    tmp.rename(out)
    return {"wall_s": round(time.monotonic() - start, 1), "cpu_s": round(_cpu_seconds() - cpu, 1)}


def _module_dir(mod: Module) -> Path:
    """The upstream module's folder in the module cache (downloaded if missing)."""
    proc = subprocess.run(
        ["go", "mod", "download", "-json", f"{mod.upstream}@{mod.version}"],
        cwd=GO_DIR / mod.folder,
        env=_go_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise BuildError(f"{mod.upstream}@{mod.version}: go mod download failed: {proc.stderr}")
    return Path(json.loads(proc.stdout)["Dir"])


def _copy_manifests(root: Path) -> None:
    for mod in MODULES.values():
        if not mod.manifests:
            continue
        dest = root / "manifests" / mod.folder
        if dest.is_dir():
            continue
        src = _module_dir(mod)
        tmp = dest.with_name(f".{dest.name}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        for pattern in mod.manifests:
            matches = sorted(src.glob(pattern))
            if not matches:
                raise BuildError(f"{mod.upstream}@{mod.version}: no file matches {pattern}")
            for path in matches:
                shutil.copyfile(path, tmp / path.name)
        tmp.rename(dest)


def ensure(*, only: tuple[str, ...] = (), quiet: bool = False, build: bool = True) -> Build:
    """Build what is missing (all binaries, or ``only`` those) and return where they are.

    ``build=False`` builds nothing: ``BuildError`` names what is missing (the tests' fixture,
    whose per-test timeout a cold build would outlast, asks this way)."""
    given = _envtest_binaries()
    go = go_version()
    root = cache_root() / cache_key(go)
    bin_dir = root / "bin"
    times_file = root / "build-times.json"
    wanted = [b for b in BINARIES if not only or b.name in only]
    if not build:
        missing = [
            b.name for b in wanted if b.name not in given and not (bin_dir / b.name).exists()
        ]
        if missing or not (root / "manifests").is_dir():
            raise BuildError(
                f"not built: {', '.join(missing) or 'manifests'} (in {root}); run make controlplane"
            )
    with _locked(root.parent / f"{root.name}.lock"):
        bin_dir.mkdir(parents=True, exist_ok=True)
        times = json.loads(times_file.read_text()) if times_file.exists() else {}
        for b in wanted:
            out = bin_dir / b.name
            if b.name in given or out.exists():
                continue
            if not quiet:
                print(f"controlplane: building {b.name} ({go})", file=sys.stderr, flush=True)
            times[b.name] = _build_one(b, out, root / "build.log")
            times_file.write_text(json.dumps(times, indent=2) + "\n")
            if not quiet:
                t = times[b.name]
                print(
                    f"controlplane: {b.name}: {t['wall_s']} s wall, {t['cpu_s']} s CPU",
                    file=sys.stderr,
                    flush=True,
                )
        _copy_manifests(root)
    binaries = {b.name: given.get(b.name, bin_dir / b.name) for b in BINARIES}
    return Build(root=root, binaries=binaries)


def main(argv: list[str] | None = None) -> int:
    from eks_fsdp_cli.errors import Parser

    parser = Parser(
        command="controlplane",
        prog="eks-fsdp controlplane build",
        description=__doc__.split("\n")[0],  # shown without its markup (errors.plain)
    )
    parser.add_argument(
        "--only",
        nargs="*",
        default=(),
        metavar="BINARY",
        choices=[b.name for b in BINARIES],
        help="build only these",
    )
    parser.add_argument(
        "--print",
        action="store_true",
        dest="print_only",
        help="print the cache folder of this tree and build nothing",
    )
    args = parser.parse_args(argv)
    try:
        if args.print_only:
            print(cache_root() / cache_key(go_version()))
            return 0
        build = ensure(only=tuple(args.only))
    except BuildError as err:
        print(f"controlplane: {err}", file=sys.stderr)
        return 2
    for name, path in build.binaries.items():
        print(f"{name:<24} {path}" if path.exists() else f"{name:<24} (not built)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
