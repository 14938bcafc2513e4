"""What every data module shares: a tokenized `Example`, `IGNORE_INDEX` and `DataError`.

A leaf (no torch, no transformers): `training.data.rows` reads dataset files into rows,
`training.data` tokenizes them, `training.data.batches` cuts them into batches; all three raise
`DataError` and mark unscored tokens with `IGNORE_INDEX`.
"""

from __future__ import annotations

__all__ = ["IGNORE_INDEX", "DataError", "Example"]

IGNORE_INDEX = -100
"""Label of tokens that carry no loss (prompt and padding), as torch's cross_entropy ignores."""

Example = dict[str, list[int]]
"""One tokenized example: input_ids, labels, attention_mask (equal lengths)."""


class DataError(ValueError):
    """Bad data or tokenizer. str(err) is one line: "FILE:LINE: what is wrong" for a bad row."""
