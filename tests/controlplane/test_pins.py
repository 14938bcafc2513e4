"""The control plane's Go modules build what ``infra.versions`` pins.

``controlplane/go/*/go.mod`` and ``infra/versions.py`` both name the versions; if this fails,
a pin was bumped on one side only, and the suite would test against binaries other than the
ones the project says it uses (or the Kubernetes staging modules would not match the tag).
No control plane runs here: these tests read files.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from controlplane import build
from infra import versions

GO = build.GO_DIR


def _requires(go_mod: Path) -> dict[str, str]:
    out = {}
    for line in go_mod.read_text().splitlines():
        m = re.match(r"^\s*(?:require\s+)?([\w./~-]+)\s+(v[\w.+-]+)(\s*//.*)?$", line)
        if m and "=>" not in line:
            out[m.group(1)] = m.group(2)
    return out


def _replaces(go_mod: Path) -> dict[str, tuple[str, str]]:
    out = {}
    for line in go_mod.read_text().splitlines():
        m = re.match(r"^\s*(?:replace\s+)?([\w./-]+)\s+=>\s+([\w./-]+)\s+(v\S+)$", line)
        if m:
            out[m.group(1)] = (m.group(2), m.group(3))
    return out


@pytest.mark.parametrize("folder", sorted(build.MODULES))
def test_go_mod_requires_the_pin(folder: str) -> None:
    mod = build.MODULES[folder]
    requires = _requires(GO / folder / "go.mod")
    assert requires.get(mod.upstream) == mod.version, (
        f"controlplane/go/{folder}/go.mod requires {mod.upstream} "
        f"{requires.get(mod.upstream)}, infra.versions pins {mod.version}"
    )
    assert (GO / folder / "go.sum").stat().st_size > 0


def test_kubernetes_is_the_clusters_minor_with_its_staging_modules_at_the_same_patch() -> None:
    k8s = versions.CONTROL_PLANE_KUBERNETES_VERSION
    assert k8s.startswith(f"v{versions.KUBERNETES_VERSION}.")
    staging = "v0." + k8s.split(".", 1)[1]
    replaces = _replaces(GO / "kubernetes" / "go.mod")
    # k8s.io/kubernetes v1.35's go.mod replaces 31 staging modules with ./staging/src paths.
    assert len(replaces) == 31, sorted(replaces)
    for module, (target, version) in replaces.items():
        assert module.startswith("k8s.io/") and target == module, (module, target)
        assert version == staging, f"{module} => {version}, want {staging}"


def test_each_upstream_has_its_own_module() -> None:
    """A Go build list has one version of each module: kwok and the operators need k8s.io
    libraries other than Kubernetes 1.35's own, so each is a module of its own."""
    client_go = {f: _requires(GO / f / "go.mod").get("k8s.io/client-go") for f in build.MODULES}
    assert client_go["kubernetes"] == "v0." + versions.CONTROL_PLANE_KUBERNETES_VERSION[3:]
    assert len({client_go[f] for f in ("kubernetes", "kwok", "training-operator")}) == 3


def test_every_binary_comes_from_a_module() -> None:
    assert {b.module for b in build.BINARIES} == set(build.MODULES)
    assert {b.name for b in build.BINARIES if b.envtest} == {"etcd", "kube-apiserver"}


def test_cache_key_follows_the_go_mod_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = build.cache_key("go1.26.0")
    assert key.startswith(f"k8s-{versions.CONTROL_PLANE_KUBERNETES_VERSION}-")
    assert build.cache_key("go1.26.1") != key
    copy = tmp_path / "go"
    for folder in build.MODULES:
        (copy / folder).mkdir(parents=True)
        for name in ("go.mod", "go.sum", "main.go"):
            if (GO / folder / name).exists():
                (copy / folder / name).write_bytes((GO / folder / name).read_bytes())
    monkeypatch.setattr(build, "GO_DIR", copy)
    assert build.cache_key("go1.26.0") == key
    with (copy / "kwok" / "go.sum").open("a") as fh:
        fh.write("\n")
    assert build.cache_key("go1.26.0") != key


def test_cache_lives_outside_the_checkout(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert build.cache_root() == tmp_path / "eks-fsdp" / "controlplane"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert build.cache_root() == Path.home() / ".cache" / "eks-fsdp" / "controlplane"


def test_kubebuilder_assets_supply_etcd_and_the_apiserver(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("etcd", "kube-apiserver", "kubectl", "kwok"):
        (tmp_path / name).write_text("#!/bin/sh\n")
        (tmp_path / name).chmod(0o755)
    monkeypatch.setenv(build.ENVTEST_ENV, str(tmp_path))
    given = build._envtest_binaries()
    assert given == {"etcd": tmp_path / "etcd", "kube-apiserver": tmp_path / "kube-apiserver"}


def test_a_broken_go_toolchain_is_a_one_line_build_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    go.write_text("#!/bin/sh\necho 'go: cannot find GOROOT directory: /nowhere' >&2\nexit 2\n")
    go.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(build.BuildError) as err:
        build.go_version()
    message = str(err.value)
    assert "\n" not in message
    assert "exit 2" in message and "cannot find GOROOT" in message
