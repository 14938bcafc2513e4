"""Session fixtures of the training tests: a few multi-process launches shared by many tests.

Each fixture is one torchrun launch running several configurations in sequence (see
helpers.launch); tests only read the metrics and measurements those runs leave behind.
  world1: the 1-process reference run (no FSDP), a same-world-size resume, a local HF checkpoint;
  world2: every 2-process sharding variant, a 1 -> 2 resume, state bytes, an HF export, the
          local HF checkpoint (tied embeddings) sharded;
  world4: HYBRID_SHARD 2x2 and FULL_SHARD with 4 processes, state bytes.
LoRA (--use_peft) runs ride along in world1 and world2: a 1-process reference, the 2-process
parity run, a 1 -> 2 resume, state bytes, and the adapter / merged export of the local HF
checkpoint. So do the model families (tests/training/families.py: Llama 3.x, Mistral, Qwen2,
Qwen3): a 1-process run each in world1, the 2-process run with its export in world2, and a
LoRA of Qwen3 on every linear layer at both world sizes.
Both world1 and world2 also train two epochs of an 11-sample dataset (global batch 4 does not
divide it): the last batch of each epoch is completed with masked filler rows.

`s3_server` / `s3_env`: moto's S3 server on a free loopback port (one per worker) and its
variables set for a test and the processes it starts (tests/training/test_s3_*.py).

Under pytest-xdist (``make test``) each launch runs once per test run: the first worker that
needs it runs it under a file lock in the run's shared folder, the others read its result
(``tests/shared.py``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.shared import once, shared_dir
from tests.training import families as family_models
from tests.training.helpers import GLOBAL_BATCH, TINY, ckpt_dir, launch, merge, run_dirs

STEPS = 6
RESUME_AT = 3  # the reference run checkpoints every RESUME_AT steps
CLIP = ("--gradient_clipping", "--gradient_clipping_threshold=0.05")
"""Clipping that acts at every step of the tiny run (its grad norms are ~1.7-2.2)."""
LORA = ("--use_peft", "--lora_dropout=0")
"""LoRA with llama-recipes' defaults (r 8, alpha 32, q_proj and v_proj) but no dropout: the
dropout masks of a 1-process and a 2-process run are drawn differently."""
LORA_KILL_STEPS = 30
"""Steps of the LoRA run with dropout that test_lora's SIGKILL test interrupts and resumes."""
FILLER_SAMPLES = 11
"""Training rows of the filler dataset (12 rows, the last 10% is validation)."""


def _filler_job(base: Path, world: int) -> dict[str, Any]:
    """Two epochs over FILLER_SAMPLES samples, global batch 4, no step limit."""
    data = base / "filler.jsonl"
    data.parent.mkdir(parents=True, exist_ok=True)
    data.write_text(
        "".join(
            json.dumps({"text": f"sample {i}: " + " ".join(["word"] * (3 + 2 * i))}) + "\n"
            for i in range(FILLER_SAMPLES + 1)
        ),
        encoding="utf-8",
    )
    argv = merge(
        _argv(base, "filler", world),
        [
            "--dataset=custom",
            f"--data_path={data}",
            "--batching_strategy=padding",
            "--num_epochs=2",
            "--max_train_step=0",
            # activation checkpointing stays on (the default) for the 2-process run: padded
            # micro-batches of different widths must replay right in backward
        ],
    )
    return {"kind": "train", "name": "filler", "argv": argv}


def _argv(base: Path, name: str, world: int, *extra: str) -> list[str]:
    per_rank = GLOBAL_BATCH // world
    fsdp = ["--enable_fsdp"] if world > 1 else []
    return merge(
        TINY,
        [f"--max_train_step={STEPS}", f"--batch_size_training={per_rank}", *fsdp],
        run_dirs(base, name),
        extra,
    )


def _train(base: Path, name: str, world: int, *extra: str) -> dict[str, Any]:
    return {"kind": "train", "name": name, "argv": _argv(base, name, world, *extra)}


def _copy(base: Path, src: str, dst: str) -> dict[str, Any]:
    return {
        "kind": "copy_checkpoint",
        "src": str(ckpt_dir(base, src)),
        "dst": str(ckpt_dir(base, dst)),
        "step": RESUME_AT,
    }


@pytest.fixture(scope="session")
def train_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return shared_dir(tmp_path_factory, "training")


@pytest.fixture(scope="session")
def hf_checkpoint(tmp_path_factory: pytest.TempPathFactory, train_root: Path) -> Path:
    """A local Hugging Face checkpoint with tied input/output embeddings (like Llama 3.2 1B)."""
    return once(tmp_path_factory, "hf-checkpoint", lambda _d: _hf_checkpoint(train_root))


def _hf_checkpoint(train_root: Path) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from training.data import load_tokenizer

    tok = load_tokenizer("tiny-llama-2l")
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=176,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
    )
    torch.manual_seed(7)
    path = train_root / "hf_tied"
    LlamaForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def families(tmp_path_factory: pytest.TempPathFactory, train_root: Path) -> dict[str, Path]:
    """{family: folder of its tiny random checkpoint} (tests/training/families.py)."""
    return once(tmp_path_factory, "families", lambda _d: family_models.build(train_root))


FAMILY_LORA = ("--use_peft", "--lora_dropout=0", "--lora_target_modules=all-linear")


def _family_jobs(base: Path, world: int, families: dict[str, Path]) -> list[dict[str, Any]]:
    """Every family trained STEPS steps (at world 2 also exported, with the trained logits),
    and a LoRA of Qwen3."""
    jobs = []
    for family, path in families.items():
        job = _train(base, f"fam_{family}", world, f"--model_name={path}")
        if world > 1:
            job["kind"] = "export_logits"
            job["argv"] = merge(job["argv"], ["--save_model=True"])
            job["out"] = str(base / f"fam_{family}" / "logits.pt")
        jobs.append(job)
    jobs.append(
        _train(base, "fam_qwen3_lora", world, f"--model_name={families['qwen3']}", *FAMILY_LORA)
    )
    return jobs


@pytest.fixture(scope="session")
def world1(
    tmp_path_factory: pytest.TempPathFactory,
    train_root: Path,
    hf_checkpoint: Path,
    families: dict[str, Path],
) -> tuple[Path, dict[str, Any]]:
    return once(tmp_path_factory, "world1", lambda _d: _world1(train_root, hf_checkpoint, families))


def _world1(
    train_root: Path, hf_checkpoint: Path, families: dict[str, Path]
) -> tuple[Path, dict[str, Any]]:
    base = train_root / "w1"
    # A checkpoint interrupted mid-write, and one renamed but never marked complete: both ignored.
    partial = ckpt_dir(base, "resume_w1")
    (partial / "step-000004.tmp").mkdir(parents=True)
    (partial / "step-000004.tmp" / "__0_0.distcp").write_bytes(b"\0" * 100)
    (partial / "step-000005").mkdir()
    (partial / "step-000005" / ".metadata").write_bytes(b"truncated")
    jobs = [
        _train(base, "ref", 1, f"--checkpoint_every={RESUME_AT}"),
        _copy(base, "ref", "resume_w1"),
        _train(base, "resume_w1", 1, "--resume"),
        _train(base, "hf_tied", 1, f"--model_name={hf_checkpoint}"),
        _train(base, "ref_batch8", 1, "--batch_size_training=8"),  # for world 4 x 2 micro-batches
        _train(base, "clipped", 1, *CLIP),
        _filler_job(base, 1),
        _train(base, "lora_ref", 1, *LORA, f"--checkpoint_every={RESUME_AT}"),
        _train(base, "lora_dropout_ref", 1, "--use_peft", f"--max_train_step={LORA_KILL_STEPS}"),
        *_family_jobs(base, 1, families),
    ]
    return base, launch(1, jobs, base)


@pytest.fixture(scope="session")
def world2(
    tmp_path_factory: pytest.TempPathFactory,
    train_root: Path,
    world1: tuple[Path, dict[str, Any]],
    hf_checkpoint: Path,
    families: dict[str, Path],
) -> tuple[Path, dict[str, Any]]:
    return once(
        tmp_path_factory,
        "world2",
        lambda _d: _world2(train_root, world1, hf_checkpoint, families),
    )


def _world2(
    train_root: Path,
    world1: tuple[Path, dict[str, Any]],
    hf_checkpoint: Path,
    families: dict[str, Path],
) -> tuple[Path, dict[str, Any]]:
    base = train_root / "w2"
    w1_base, _ = world1
    no_ac = "--fsdp_activation_checkpointing=False"
    jobs = [
        _train(base, "full_shard", 2),
        _train(base, "full_shard_no_ac", 2, no_ac),
        _train(base, "shard_grad_op", 2, "--sharding_strategy=SHARD_GRAD_OP"),
        _train(base, "shard_grad_op_no_ac", 2, "--sharding_strategy=SHARD_GRAD_OP", no_ac),
        _train(base, "no_shard", 2, "--sharding_strategy=NO_SHARD", no_ac),
        _train(base, "no_shard_ac", 2, "--sharding_strategy=NO_SHARD"),
        _train(
            base,
            "accumulation",
            2,
            "--gradient_accumulation_steps=2",
            "--batch_size_training=1",
        ),
        _train(
            base,
            "no_shard_accumulation",
            2,
            "--sharding_strategy=NO_SHARD",
            "--gradient_accumulation_steps=2",
            "--batch_size_training=1",
        ),
        _train(base, "cpu_offload", 2, "--fsdp_cpu_offload"),
        # --force_bf16: on a CPU without native bf16 the default would quietly train in fp32.
        _train(base, "bf16_mixed", 2, "--mixed_precision=True", "--force_bf16"),
        _train(base, "selective_ac", 2, "--ac_mode=selective"),
        _train(base, "compile", 2, "--compile"),
        _train(base, "compile_selective_ac", 2, "--compile", "--ac_mode=selective"),
        _train(base, "clipped", 2, *CLIP),
        {
            "kind": "host_syncs",
            "name": "syncs",
            "argv": _argv(
                base,
                "syncs",
                2,
                "--log_every=3",
                "--gradient_accumulation_steps=2",
                "--batch_size_training=1",
                # as every cluster job renders it: the time-checkpoint vote must not sync
                "--checkpoint_every_s=3600",
                "--gc_freq=2",  # Python's GC at steps 2, 4, 6 only (test_host_syncs)
            ),
        },
        _train(base, "hf_tied", 2, f"--model_name={hf_checkpoint}"),
        {
            "kind": "copy_checkpoint",
            "src": str(ckpt_dir(w1_base, "ref")),
            "dst": str(ckpt_dir(base, "resume_1to2")),
            "step": RESUME_AT,
        },
        _train(base, "resume_1to2", 2, "--resume"),
        {"kind": "state_bytes", "name": "bytes", "argv": _argv(base, "bytes", 2, no_ac)},
        {
            "kind": "export_logits",
            "name": "export",
            "argv": _argv(base, "export", 2, "--save_model=True", "--max_train_step=3"),
            "out": str(base / "export" / "logits.pt"),
        },
        {
            "kind": "export_logits",
            "name": "export_sharded",  # ~0.32 M fp32 parameters: five shards of <= 300 kB
            "argv": _argv(
                base,
                "export_sharded",
                2,
                "--save_model=True",
                "--max_train_step=3",
                "--export_max_shard_gb=0.0003",
            ),
            "out": str(base / "export_sharded" / "logits.pt"),
        },
        _filler_job(base, 2),
        _train(base, "lora_full_shard", 2, *LORA),
        _train(base, "lora_bf16_mixed", 2, *LORA, "--mixed_precision=True", "--force_bf16"),
        _train(base, "lora_pure_bf16", 2, *LORA, "--pure_bf16"),
        {
            "kind": "copy_checkpoint",
            "src": str(ckpt_dir(w1_base, "lora_ref")),
            "dst": str(ckpt_dir(base, "lora_resume_1to2")),
            "step": RESUME_AT,
        },
        _train(base, "lora_resume_1to2", 2, *LORA, "--resume"),
        {"kind": "state_bytes", "name": "lora_bytes", "argv": _argv(base, "lora_bytes", 2, *LORA)},
        {
            "kind": "export_logits",
            "name": "lora_export",
            "argv": _argv(
                base,
                "lora_export",
                2,
                f"--model_name={hf_checkpoint}",
                "--use_peft",
                "--lora_target_modules=all-linear",
                "--lr=1e-2",  # adapters far from their zero start after 3 steps
                "--save_model=True",
                "--merge_adapters",
                "--max_train_step=3",
            ),
            "out": str(base / "lora_export" / "logits.pt"),
        },
        *_family_jobs(base, 2, families),
    ]
    return base, launch(2, jobs, base)


@pytest.fixture(scope="session")
def world4(
    tmp_path_factory: pytest.TempPathFactory, train_root: Path
) -> tuple[Path, dict[str, Any]]:
    return once(tmp_path_factory, "world4", lambda _d: _world4(train_root))


def _world4(train_root: Path) -> tuple[Path, dict[str, Any]]:
    base = train_root / "w4"
    hsdp = ["--hsdp", "--sharding_group_size=2", "--replica_group_size=2"]
    jobs = [
        _train(base, "hsdp_2x2", 4, *hsdp),
        _train(
            base,
            "hsdp_2x2_accumulation",
            4,
            *hsdp,
            "--gradient_accumulation_steps=2",
            "--batch_size_training=1",
        ),
        _train(base, "full_shard_4", 4),
        {
            "kind": "state_bytes",
            "name": "bytes",
            "argv": _argv(base, "bytes", 4, "--fsdp_activation_checkpointing=False"),
        },
    ]
    return base, launch(4, jobs, base)


# ---------------------------------------------------------------------------------------------
# S3 on loopback (tests/training/test_s3_*.py)


class S3Server:
    """moto's S3 HTTP API on 127.0.0.1 (moto[server]'s `ThreadedMotoServer`, the same server
    as `moto_server`): what the training package sees as S3 through AWS_ENDPOINT_URL_S3."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        from tests.training.helpers import free_port

        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self._server.start()
        self.env = {
            "AWS_ENDPOINT_URL_S3": self.endpoint,
            "AWS_ACCESS_KEY_ID": "testing",  # moto accepts any key
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",  # the credentials chain never leaves loopback
            "AWS_CONFIG_FILE": "/nonexistent/aws-config",  # no profile of the machine's user
            "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/aws-credentials",
        }

    def client(self) -> Any:
        import boto3

        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def bucket(self, prefix: str) -> str:
        """A new, empty bucket whose name starts with `prefix`."""
        import uuid

        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def stop(self) -> None:
        self._server.stop()


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    server = S3Server()
    yield server
    server.stop()


@pytest.fixture
def s3_env(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> S3Server:
    """The S3 server's variables in this process's environment (so in every child it starts),
    a private HF_HOME and TMPDIR (the weights cache and the --output_dir staging folder)."""
    for key in ("AWS_PROFILE", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    return s3_server
