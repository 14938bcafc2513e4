"""Exports to S3 and weights from S3, through moto's S3 server on loopback.

If these fail, `--output_dir s3://...` no longer puts a servable Hugging Face folder in the
bucket (sharded safetensors with their index, config, tokenizer) that, downloaded, gives the
trained model's logits with `from_pretrained`, no longer uploads the run's metrics or a LoRA
run's adapter folder there;
or `--model_name s3://...` no longer trains exactly as the same weights from a local folder,
or downloads them again when the node's cache (HF_HOME) already has them. Only AWS itself is
replaced (by moto's server).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.training.conftest import S3Server
from tests.training.helpers import TINY, launch, max_diff, merge, metrics, run_dirs
from training.s3.transfer import DONE, cache_dir, download_prefix, upload_folder
from training.s3.uri import S3Uri

pytestmark = pytest.mark.slow


def test_export_to_s3_and_weights_from_s3(
    s3_env: S3Server, tmp_path: Path, hf_checkpoint: Path
) -> None:
    bucket = s3_env.bucket("export")
    models = S3Uri(bucket, "models/tied")
    upload_folder(hf_checkpoint, models)
    two = ["--enable_fsdp", "--batch_size_training=2", "--max_train_step=3"]
    jobs = [
        {
            "kind": "export_logits",
            "name": "export",
            "argv": merge(
                TINY,
                two,
                run_dirs(tmp_path, "export"),
                [
                    f"--output_dir=s3://{bucket}/runs/export",
                    "--save_model=True",
                    "--export_max_shard_gb=0.0003",  # ~0.32 M fp32 parameters: five shards
                ],
            ),
            "out": str(tmp_path / "logits.pt"),
        },
        {
            "kind": "train",
            "name": "lora",
            "argv": merge(
                TINY,
                two,
                run_dirs(tmp_path, "lora"),
                ["--use_peft", f"--output_dir=s3://{bucket}/runs/lora", "--save_model=True"],
            ),
        },
        {
            "kind": "train",
            "name": "local_weights",
            "argv": merge(
                TINY, two, run_dirs(tmp_path, "local"), [f"--model_name={hf_checkpoint}"]
            ),
        },
        {
            "kind": "train",
            "name": "s3_weights",
            "argv": merge(TINY, two, run_dirs(tmp_path, "s3w"), [f"--model_name={models}"]),
        },
    ]
    results = launch(2, jobs, tmp_path / "launch")
    for name in ("lora", "local_weights", "s3_weights"):
        assert results[name]["rc"] == [0, 0], results[name]["stderr"]

    # the export: shards, index, config and tokenizer in the bucket; nothing left on local disk
    s3 = s3_env.client()
    listing = s3.list_objects_v2(Bucket=bucket, Prefix="runs/export/")["Contents"]
    names = {o["Key"].removeprefix("runs/export/") for o in listing}
    shards = sorted(n for n in names if n.startswith("hf/model-"))
    assert len(shards) > 1 and "hf/model.safetensors.index.json" in names
    assert {"hf/config.json", "hf/tokenizer.json", "hf/generation_config.json"} <= names
    assert {"metrics.jsonl", "summary.json", "goodput.json"} <= names
    assert list((tmp_path / "tmp").rglob("*.safetensors")) == []  # each shard deleted once sent
    rows = s3.get_object(Bucket=bucket, Key="runs/export/metrics.jsonl")["Body"].read()
    assert [json.loads(r)["step"] for r in rows.decode().splitlines()] == [1, 2, 3]

    adapter = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="runs/lora/")["Contents"]}
    assert {
        "runs/lora/adapter/adapter_config.json",
        "runs/lora/adapter/adapter_model.safetensors",
    } <= adapter

    from transformers import AutoModelForCausalLM

    folder = download_prefix(S3Uri(bucket, "runs/export/hf"), tmp_path / "downloaded")
    saved = torch.load(tmp_path / "logits.pt")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(input_ids=saved["input_ids"]).logits.float()
    assert torch.allclose(logits, saved["logits"], atol=1e-5, rtol=0)

    # weights from S3 train exactly as the same weights from a local folder
    local, from_s3 = metrics(tmp_path, "local"), metrics(tmp_path, "s3w")
    assert [r["step"] for r in from_s3] == [1, 2, 3]
    assert max_diff(from_s3, local, "loss") == 0.0
    cached = cache_dir(models)
    assert (cached / DONE).is_file() and (cached / "model.safetensors").is_file()

    # a second start on this node takes the cache: the bucket's copy is no longer needed
    for obj in s3.list_objects_v2(Bucket=bucket, Prefix="models/")["Contents"]:
        s3.delete_object(Bucket=bucket, Key=obj["Key"])
    again = launch(2, [{**jobs[-1], "name": "again"}], tmp_path / "launch2")
    assert again["again"]["rc"] == [0, 0], again["again"]["stderr"]
