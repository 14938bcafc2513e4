"""The planner's memory model against real FSDP2 runs on CPU (gloo, world sizes 1, 2, 4).

If this fails, ``planner.memory`` no longer predicts the bytes FSDP2 actually keeps
per rank (sharded parameters, gradients, AdamW state) after one optimizer step: the fits /
does-not-fit verdicts of ``eks-fsdp plan`` would be wrong. Each rank measures its own
``DTensor.to_local()`` bytes for three precisions (fp32; mixed = fp32 master with bf16 compute;
pure bf16) and the test compares them with the prediction, rank by rank. Nothing is mocked.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any, TypedDict

import pytest

from planner.memory import PRECISIONS, rank_shard_elements, shard_elements
from planner.shapes import resolve

PRESET = "tiny-llama"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


WORLDS = (1, 2, 4)
"""FSDP2 world sizes measured; one launch of max(WORLDS) processes measures them all, each on
a process group of its first ``world`` ranks (process start-up, not the step, is the cost)."""


class _LlamaKwargs(TypedDict):
    """The ``LlamaConfig`` arguments of the measured model (the preset's shape)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    max_position_embeddings: int
    tie_word_embeddings: bool
    attention_dropout: float


def _worker(rank: int, size: int, port: int, out_dir: str, cfg: _LlamaKwargs) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh

    from training.gc_policy import freeze_libraries

    # as the training program starts: the exit's collections skip torch's and transformers' objects
    freeze_libraries(("transformers.models.llama.modeling_llama", "torch.distributed.fsdp"))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=size)
    for world in WORLDS:
        # every rank creates every group (new_group is collective); only members train
        group = dist.new_group(list(range(world))) if world < size else dist.group.WORLD
        assert group is not None
        if rank < world:
            mesh = DeviceMesh.from_group(group, "cpu")
            _measure(rank, world, mesh, Path(out_dir), cfg)
        dist.barrier()
    dist.destroy_process_group()


def _measure(rank: int, world: int, mesh: Any, out_dir: Path, cfg: _LlamaKwargs) -> None:
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.tensor import DTensor
    from transformers import LlamaConfig, LlamaForCausalLM

    def nbytes(t: torch.Tensor) -> int:
        local = t.to_local() if isinstance(t, DTensor) else t
        return local.numel() * local.element_size()

    results = {}
    for precision in ("fp32", "mixed", "pure_bf16"):
        torch.manual_seed(0)
        model = LlamaForCausalLM(LlamaConfig(**cfg))
        mp = MixedPrecisionPolicy()
        if precision == "pure_bf16":
            # typeshed's functools._Wrapped has no __get__, so the @wraps-decorated
            # PreTrainedModel.to does not bind self and mypy reads the dtype as ``self``.
            model.to(torch.bfloat16)  # type: ignore[arg-type]
        if precision == "mixed":
            mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for layer in model.model.layers:  # per decoder layer, then the root
            fully_shard(layer, mesh=mesh, mp_policy=mp)
        fully_shard(model, mesh=mesh, mp_policy=mp)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        ids = torch.randint(0, int(cfg["vocab_size"]), (1, 4))  # bytes do not depend on length
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        states = [
            v for st in opt.state.values() for k, v in st.items() if k in ("exp_avg", "exp_avg_sq")
        ]
        results[precision] = {
            "params": sum(nbytes(p) for p in model.parameters()),
            "grads": sum(nbytes(p.grad) for p in model.parameters() if p.grad is not None),
            "optimizer": sum(nbytes(v) for v in states),
        }
    (out_dir / f"{world}-{rank}.json").write_text(json.dumps(results))


def _config() -> _LlamaKwargs:
    shape = resolve(PRESET)
    return {
        "vocab_size": shape.vocab_size,
        "hidden_size": shape.hidden_size,
        "intermediate_size": shape.intermediate_size,
        "num_hidden_layers": shape.num_layers,
        "num_attention_heads": shape.num_heads,
        "num_key_value_heads": shape.num_kv_heads,
        "max_position_embeddings": shape.max_position_embeddings,
        "tie_word_embeddings": False,
        "attention_dropout": 0.0,
    }


@pytest.mark.slow
def test_sharded_state_bytes_match_real_fsdp2_runs(tmp_path: Path) -> None:
    import torch.multiprocessing as mp

    os.environ["OMP_NUM_THREADS"] = "1"
    size = max(WORLDS)
    mp.start_processes(
        _worker,
        args=(size, _free_port(), str(tmp_path), _config()),
        nprocs=size,
        join=True,
        start_method="spawn",
    )
    shape = resolve(PRESET)
    shapes = shape.param_shapes()
    for world in WORLDS:
        for rank in range(world):
            measured = json.loads((tmp_path / f"{world}-{rank}.json").read_text())
            elems = rank_shard_elements(shapes, world, rank)
            for name, m in measured.items():
                p = PRECISIONS[name]
                predicted = {
                    "params": elems * p.param,
                    "grads": elems * p.grad,
                    "optimizer": 2 * elems * p.optim,
                }
                for kind, value in predicted.items():
                    assert m[kind] == pytest.approx(value, rel=0.05), (world, rank, name, kind)
                total = sum(predicted.values())
                assert sum(m.values()) == pytest.approx(total, rel=0.05)
        # The planner reports the largest rank (rank 0); every rank is within 5% of it here.
        rank0 = json.loads((tmp_path / f"{world}-0.json").read_text())["mixed"]
        assert sum(rank0.values()) == pytest.approx(16 * shard_elements(shapes, world), rel=0.05)
        print(
            f"world {world}: rank0 mixed measured {sum(rank0.values())} B, "
            f"predicted {16 * shard_elements(shapes, world)} B"
        )
