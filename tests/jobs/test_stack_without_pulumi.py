"""A ``--stack`` whose outputs cannot be read (no pulumi CLI here) names the flag that replaces
the output needed.

If this fails, ``jobs submit FILE --stack S --kubeconfig K`` without the pulumi CLI tells the
user to pass ``--kubeconfig``, which they did: the output still read there is the jobs'
namespace, and ``--namespace NS`` is what replaces it.

Nothing is mocked: ``PATH`` holds no ``pulumi``, and the CLI stops before any request.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs import cli
from jobs.cluster.kube import INSTEAD, JOBS_NAMESPACE_OUTPUT, KUBECONFIG_OUTPUT

EXAMPLES = Path(__file__).resolve().parents[2] / "jobs" / "examples"


def test_stack_and_kubeconfig_without_pulumi_suggest_namespace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    argv = ["submit", str(EXAMPLES / "p5-16.yaml"), "--stack", "p5-16"]
    code = cli.main([*argv, "--kubeconfig", str(kubeconfig)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert err.strip().endswith(
        f"--stack p5-16: no pulumi CLI here to read its {JOBS_NAMESPACE_OUTPUT} output: "
        f"{INSTEAD[JOBS_NAMESPACE_OUTPUT]}"
    )
    assert "--namespace NS" in err and "--kubeconfig" not in err
    # --stack alone: the kubeconfig is the output read first, and --kubeconfig replaces it
    assert cli.main(["list", "--stack", "p5-16"]) == 2
    err = capsys.readouterr().err
    assert err.strip().endswith(f"its {KUBECONFIG_OUTPUT} output: {INSTEAD[KUBECONFIG_OUTPUT]}")
