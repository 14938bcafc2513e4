"""Rows of a Hugging Face dataset (`--dataset hf_dataset --hf_dataset NAME_OR_PATH`).

The source is a local folder written by `Dataset.save_to_disk` / `DatasetDict.save_to_disk`
(`datasets.load_from_disk`), a local data file (`.json`, `.jsonl`, `.csv`, `.parquet`: the
`datasets` builder of that format), or a hub name (`datasets.load_dataset`, with whatever cache
and network the job has). `--hf_columns ours=theirs,...` renames the dataset's columns to the
fields `training.data` reads (`messages`, `prompt`/`completion`, `text`, `dialogue`/`summary`),
as TRL's and axolotl's field mappings do; other columns are ignored. Each row keeps its place
as `NAME[split]:INDEX` for error messages.

A leaf module (imports `datasets` only when called); `HFDataError` is one line and
`training.data` turns it into its DataError.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

FIELDS = ("messages", "prompt", "completion", "text", "dialogue", "summary", "chosen", "rejected")
"""The row fields `--hf_columns` may map to (the shapes of `--dataset custom`, and preference
pairs' chosen and rejected with `--method dpo`)."""
_BUILDERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}


class HFDataError(ValueError):
    """A dataset that cannot be read; one line naming the flag."""


def parse_columns(text: str) -> dict[str, str]:
    """`--hf_columns`: "messages=conversations,prompt=question" -> {ours: theirs}."""
    out: dict[str, str] = {}
    for item in (t.strip() for t in text.split(",") if t.strip()):
        ours, eq, theirs = (x.strip() for x in item.partition("="))
        if not eq or not ours or not theirs:
            raise HFDataError(f"--hf_columns: expects ours=theirs pairs, got {item!r}")
        if ours not in FIELDS:
            raise HFDataError(f"--hf_columns: {ours!r} is not a row field ({', '.join(FIELDS)})")
        if ours in out:
            raise HFDataError(f"--hf_columns: {ours!r} mapped twice")
        out[ours] = theirs
    return out


def load_rows(
    source: str, split: str, columns: dict[str, str], revision: str | None = None
) -> list[tuple[str, Any]]:
    """(NAME[split]:INDEX, row with the mapped fields) of every row of `split`; a hub name is
    read at `revision` (a commit pins reruns to the same rows; None: the default branch)."""
    try:
        import datasets
    except ImportError:
        raise HFDataError("--hf_dataset: the 'datasets' package is not installed") from None
    datasets.disable_progress_bars()
    path = Path(source)
    try:
        if path.is_dir():
            ds = datasets.load_from_disk(str(path))
            if isinstance(ds, datasets.DatasetDict):
                if split not in ds:
                    raise HFDataError(
                        f"--hf_split {split}: {source} has the splits {', '.join(ds)}"
                    )
                ds = ds[split]
        elif path.is_file():
            builder = _BUILDERS.get(path.suffix.lower())
            if builder is None:
                raise HFDataError(f"--hf_dataset {source}: a data file is {', '.join(_BUILDERS)}")
            # A local file: a packaged builder, no hub repository (no revision to pin).
            ds = datasets.load_dataset(builder, data_files={split: str(path)}, split=split)  # local
        else:
            ds = datasets.load_dataset(source, split=split, revision=revision)
    except HFDataError:
        raise
    except Exception as e:  # missing, offline, bad split, unreadable: all "cannot load it"
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise HFDataError(f"--hf_dataset {source} [{split}]: cannot load it ({first})") from None
    missing = sorted(set(columns.values()) - set(ds.column_names))
    if missing:
        raise HFDataError(
            f"--hf_columns: {source} [{split}] has no column {', '.join(map(repr, missing))} "
            f"(its columns: {', '.join(ds.column_names)})"
        )
    rename = {theirs: ours for ours, theirs in columns.items()}
    out = []
    for index, row in enumerate(ds):
        mapped = {rename.get(k, k): v for k, v in row.items()}
        out.append((f"{source}[{split}]:{index}", mapped))
    return out


SAMSUM_REPOS = ("knkarthick/samsum", "samsum")
"""Where samsum is loaded from, in order; the second only without a revision."""


def hub_samsum(split: str, revision: str | None = None) -> list[tuple[str, str]]:
    """samsum from the hub (`knkarthick/samsum`, then `samsum`, at `revision`): (dialogue,
    summary) of the rows where both are non-empty strings (the hub copy has a few empty ones).

    With a revision only the first: the revision is a commit `jobs submit` resolved on
    `knkarthick/samsum` (`jobs.revisions.SAMSUM_HUB_ID`), which names nothing in another
    repository, so falling back would report that repository's error, or load other rows."""
    hint = "use --dataset samsum_sample for the bundled sample"
    try:
        import datasets
    except ImportError:
        raise HFDataError(
            f"--dataset samsum_dataset: the 'datasets' package is not installed; {hint}"
        ) from None

    errors = []
    for name in SAMSUM_REPOS[:1] if revision else SAMSUM_REPOS:
        try:
            ds = datasets.load_dataset(name, split=split, revision=revision)
            break
        except Exception as e:  # offline, not found, script datasets refused, ...
            errors.append(f"{name}: {str(e).strip().splitlines()[0] if str(e).strip() else e!r}")
    else:
        raise HFDataError(
            f"--dataset samsum_dataset: cannot load it from the hub ({'; '.join(errors)}); {hint}"
        )
    out = []
    for row in ds:
        dialogue, summary = row.get("dialogue"), row.get("summary")
        if isinstance(dialogue, str) and isinstance(summary, str) and dialogue and summary:
            out.append((dialogue, summary))
    return out
