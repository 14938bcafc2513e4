"""``--dataset samsum_dataset`` with a revision loads ``knkarthick/samsum`` only.

If this fails, a job whose samsum commit (resolved by ``jobs submit`` on ``knkarthick/samsum``)
cannot be loaded falls back to the ``samsum`` repository with that commit: the error then
names the wrong repository, or another repository's rows are trained on. Without a revision
the fallback stays.

``datasets.load_dataset`` is replaced by a recorder that fails every load: it stands in for
the Hub, which the suite cannot reach (nothing leaves loopback); the call's arguments are what
is checked.
"""

from __future__ import annotations

from typing import Any

import pytest

from training.data.hf_data import SAMSUM_REPOS, HFDataError, hub_samsum

SHA = "0" * 39 + "1"


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    datasets = pytest.importorskip("datasets")
    seen: list[tuple[str, Any]] = []

    def refuse(name: str, *, split: str, revision: Any = None) -> None:
        seen.append((name, revision))
        raise ConnectionError(f"no hub here for {name}")

    monkeypatch.setattr(datasets, "load_dataset", refuse)
    return seen


def test_a_revision_is_tried_on_the_pinned_repository_only(loads: list[tuple[str, Any]]) -> None:
    with pytest.raises(HFDataError) as err:
        hub_samsum("train", SHA)
    assert loads == [("knkarthick/samsum", SHA)]
    message = str(err.value)
    assert "(knkarthick/samsum: " in message and "no hub here for knkarthick/samsum" in message
    assert "; samsum: " not in message  # the other repository is not named: not tried


def test_without_a_revision_both_repositories_are_tried(loads: list[tuple[str, Any]]) -> None:
    with pytest.raises(HFDataError):
        hub_samsum("train")
    assert loads == [(name, None) for name in SAMSUM_REPOS]
