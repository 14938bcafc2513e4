"""Build the tokenizer of the tiny model presets into training/assets/tokenizer/.

A byte-level BPE (the `tokenizers` library) trained on the bundled samsum sample, with Llama's
special tokens <s> (bos), </s> (eos), <unk> and a <pad> token, wrapped in a
`PreTrainedTokenizerFast` and saved with `save_pretrained`, so that
`AutoTokenizer.from_pretrained("training/assets/tokenizer")` loads it with no network.
Byte-level means any text round-trips, not only the sample's. Like Llama's tokenizer it adds <s>
when asked for special tokens; the dataset code adds bos/eos itself (as llama-recipes does) and
encodes with `add_special_tokens=False`.

It carries a chat template (Zephyr's shape on these special tokens, no new token: the vocabulary
and so the presets' shapes stay as they are): `<s>`, then per message `<|role|>` + newline +
content + `</s>`, and `<|assistant|>` + newline as the generation prompt. An assistant turn
therefore ends with `</s>`, which the model learns, so generation stops there.

Deterministic: the same sample gives byte-identical files.

    python scripts/make_tiny_tokenizer.py                 # rewrite the committed folder
    python scripts/make_tiny_tokenizer.py --out DIR       # build elsewhere (the tests do)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "training" / "assets" / "samsum_sample.jsonl"
OUT = ROOT / "training" / "assets" / "tokenizer"
VOCAB_SIZE = 2048  # an upper bound: on the sample the merges run out at 1763
SPECIALS = ["<unk>", "<s>", "</s>", "<pad>"]  # ids 0..3
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + eos_token }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)


def corpus(path: Path = SAMPLE) -> list[str]:
    """The training texts: each dialog in its prompt and its summary, in file order."""
    texts = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            texts.append(f"Summarize this dialog:\n{row['dialogue']}\n---\nSummary:\n")
            texts.append(row["summary"])
    return texts


def build(out: Path, sample: Path = SAMPLE, vocab_size: int = VOCAB_SIZE) -> Path:
    """Train the BPE on `sample` and save_pretrained it to `out`; return `out`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(sample), trainer=trainer)
    bos_id = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos_id)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        model_max_length=1_000_000,
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    out.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(out))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT, help=f"output folder (default {OUT})")
    args = ap.parse_args()
    out = build(args.out)
    from transformers import AutoTokenizer

    print(f"wrote {out} (vocab {len(AutoTokenizer.from_pretrained(str(out)))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
