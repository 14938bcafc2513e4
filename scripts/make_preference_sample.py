"""Write training/assets/preference_sample.jsonl: preference pairs made from the samsum sample.

Each row is TRL's standard preference format, {"prompt", "chosen", "rejected"}: the prompt is
llama-recipes' samsum prompt of a bundled dialog (training/assets/samsum_sample.jsonl, written by
scripts/make_samsum_sample.py), `chosen` its summary, and `rejected` the same summary made wrong
in one of two ways a tiny model can learn to tell apart:

- **negated**: the first "will", "is", "are", "can" or "has" of the summary is negated, so it
  says the opposite of the dialog ("Anna will not bring the cake");
- **wrong person**: every speaker's name in the summary is swapped for a name that does not
  occur in the dialog.

Even rows are negated where the summary has such a verb, the others get the wrong person. The
output is a pure function of the samsum sample and the seed, byte-identical on every run.

    python scripts/make_preference_sample.py            # rewrite the committed file
    python scripts/make_preference_sample.py --check    # exit 1 if the committed file is stale
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from pathlib import Path

SEED = 20260801
NUM_PAIRS = 1200
ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "training" / "assets" / "samsum_sample.jsonl"
OUT = ROOT / "training" / "assets" / "preference_sample.jsonl"
NEGATIONS = ((" will ", " will not "), (" is ", " is not "), (" are ", " are not "))
NEGATIONS += ((" can ", " cannot "), (" has ", " has not "))
_SPEAKER = re.compile(r"^([^:\n]{1,40}):", re.MULTILINE)


def prompt_of(dialogue: str) -> str:
    """llama-recipes' samsum prompt (training.data.samsum_prompt), what the SFT demo learned."""
    return f"Summarize this dialog:\n{dialogue}\n---\nSummary:\n"


def negated(summary: str) -> str | None:
    """The summary with its first auxiliary verb negated, or None when it has none."""
    hits = [(summary.find(old), old, new) for old, new in NEGATIONS if old in summary]
    if not hits:
        return None
    at, old, new = min(hits)
    return summary[:at] + new + summary[at + len(old) :]


def wrong_person(summary: str, dialogue: str, names: list[str], r: random.Random) -> str | None:
    """Every speaker named in the summary swapped for a name absent from the dialog; None when
    the summary names no speaker."""
    speakers = sorted({m.strip() for m in _SPEAKER.findall(dialogue)}, key=lambda s: (-len(s), s))
    present = [s for s in speakers if re.search(rf"\b{re.escape(s)}\b", summary)]
    if not present:
        return None
    absent = [n for n in names if n not in dialogue]
    out = summary
    for name, other in zip(present, r.sample(absent, len(present)), strict=True):
        out = re.sub(rf"\b{re.escape(name)}\b", other, out)
    return out


def make_rows(num: int = NUM_PAIRS, seed: int = SEED) -> list[dict[str, str]]:
    """The sample's rows, a pure function of the samsum sample, num and seed."""
    r = random.Random(seed)
    source = [json.loads(line) for line in SOURCE.read_text(encoding="utf-8").splitlines()]
    names = sorted({m.strip() for row in source for m in _SPEAKER.findall(row["dialogue"])})
    rows = []
    for i, row in enumerate(source[:num]):
        dialogue, summary = row["dialogue"], row["summary"]
        rejected = negated(summary) if i % 2 == 0 else None
        rejected = rejected or wrong_person(summary, dialogue, names, r) or negated(summary)
        if rejected is None or rejected == summary:
            continue
        rows.append({"prompt": prompt_of(dialogue), "chosen": summary, "rejected": rejected})
    return rows


def render(rows: list[dict[str, str]]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the committed file is stale")
    args = ap.parse_args()
    rows = make_rows()
    text = render(rows)
    if args.check:
        if not OUT.exists() or OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT} is stale: run python scripts/make_preference_sample.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8", newline="")
    print(f"wrote {OUT} ({len(text.encode())} bytes, {len(rows)} pairs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
