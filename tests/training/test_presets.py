"""The tiny presets' stated sizes are the built models' (training/model.py, the docs).

If this fails, the comment above a preset in training/model.py, or a page that gives
`tiny-llama`'s size, states a parameter count or a tokenizer size that the preset no longer
has (it said 4.6 M parameters and a 3,072-token tokenizer where the model had 3.8 M and the
bundled tokenizer 1,763 tokens): readers size the demo and the tests by a wrong figure. The
figures are computed here, by building each preset on the meta device with the bundled
tokenizer, and compared at the precision the text gives them.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from training import model as model_module
from training.data import load_tokenizer
from training.model import PRESETS, build_empty, model_spec, num_params

ROOT = Path(__file__).resolve().parents[2]
COMMENT = re.compile(r"# ~?([\d.]+) M parameters([^\n]*)\n\s*\"([\w-]+)\": \{")
TOKENS = re.compile(r"([\d,]+)-token tokenizer")


def _sizes() -> tuple[dict[str, int], int]:
    vocab = len(load_tokenizer("tiny-llama"))
    return {n: num_params(build_empty(model_spec(n, vocab, 256))) for n in PRESETS}, vocab


def _same(stated: str, value: float) -> bool:
    """`stated` is `value` rounded to the decimals `stated` shows."""
    places = len(stated.partition(".")[2])
    return f"{value:.{places}f}" == stated


def test_the_comment_above_each_preset_states_its_size() -> None:
    sizes, vocab = _sizes()
    source = inspect.getsource(model_module)
    stated = {name: (millions, rest) for millions, rest, name in COMMENT.findall(source)}
    assert set(stated) == set(PRESETS), "every preset has a '# N M parameters' comment"
    for name, (millions, rest) in stated.items():
        assert _same(millions, sizes[name] / 1e6), (name, millions, sizes[name])
        for exact in re.findall(r"^ \(([\d,]+)\)", rest):  # "3.8 M parameters (3,804,928)"
            assert int(exact.replace(",", "")) == sizes[name], (name, exact, sizes[name])
        for tokens in TOKENS.findall(rest):
            assert int(tokens.replace(",", "")) == vocab, (name, tokens, vocab)
    assert TOKENS.search(stated["tiny-llama"][1]), "the demo's preset names its tokenizer"


@pytest.mark.parametrize("page", ["docs/workloads.md", "docs/performance.md", "README.md"])
def test_pages_give_tiny_llama_its_size(page: str) -> None:
    sizes, _ = _sizes()
    text = (ROOT / page).read_text(encoding="utf-8")
    for millions in re.findall(r"`tiny-llama` \(([\d.]+) M parameters", text) + re.findall(
        r"([\d.]+) M-parameter (?:tiny-llama|model)", text
    ):
        assert _same(millions, sizes["tiny-llama"] / 1e6), (page, millions)
