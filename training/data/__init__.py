"""The data of a fine-tuning run (``training.data.dataset``: tokenizer, rows, tokenization,
packing, ``build_dataset``; and one module per part: ``rows``, ``batches``, ``examples``,
``packing``, ``chat``, ``chat_templates``, ``hf_data``, ``preference``).

``from training.data import build_dataset`` works as before; the names are looked up in
``training.data.dataset`` when first asked for (PEP 562), so that importing a light module of
the package (``training.data.hf_data``, which ``training.config`` reads without torch) does not
import torch: the renderer and the deploy environment parse training flags without it.
"""

from __future__ import annotations

import importlib
from typing import Any


def __getattr__(name: str) -> Any:
    dataset = importlib.import_module("training.data.dataset")
    try:
        return getattr(dataset, name)
    except AttributeError:
        raise AttributeError(f"module 'training.data' has no attribute {name!r}") from None
