"""Every number the planner assumes that is not in the instance catalog, with its source.

Hardware facts per instance (GPU count and memory, dense bf16 peak, NVLink and network
bandwidth, price) come from ``infra.instances``; this module adds what the catalog does not
hold (HBM bandwidth, achievable fractions of the peaks) and the software constants of the
memory, communication and epoch models. docs/planner.md derives each value; nothing here is
fitted to a published scaling point.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any


@dataclass(frozen=True, kw_only=True)
class GpuGeneration:
    """What a GPU generation achieves, as fractions of its data-sheet peaks."""

    name: str
    """Generation key (prefix of the catalog's ``gpu_model``)."""
    hbm_gbytes_per_s: float
    """HBM bandwidth of one GPU, GB/s (NVIDIA data sheet)."""
    gemm_efficiency: float
    """Sustained fraction of dense bf16 peak in large training GEMMs (power-capped clocks x cuBLAS)."""
    attention_efficiency: float
    """Fraction of peak FlashAttention-2 (PyTorch SDPA flash backend) reaches, forward+backward."""
    nccl_sm_fraction: float
    """Share of the SMs NCCL kernels occupy while a collective overlaps compute (channels / SMs)."""
    overlaps_comm: bool = True
    """Whether FSDP's collectives run beside compute (CUDA streams) or block it (CPU, gloo)."""


GENERATIONS: dict[str, GpuGeneration] = {
    g.name: g
    for g in (
        # H100 SXM5: 3.35 TB/s HBM3; 989 TF at 1.83 GHz boost, GEMMs sustain ~1.6-1.7 GHz at the
        # 700 W cap and cuBLAS reaches ~85% of the clock's peak -> 0.75. FA2 on H100: ~335 TF/s
        # of 989 (Dao 2023) -> 0.35. NCCL: 16 channels on 132 SMs -> 0.12.
        GpuGeneration(
            name="H100",
            hbm_gbytes_per_s=3350.0,
            gemm_efficiency=0.75,
            attention_efficiency=0.35,
            nccl_sm_fraction=16 / 132,
        ),
        # H200: the H100 die at the same 700 W; 4.8 TB/s HBM3e.
        GpuGeneration(
            name="H200",
            hbm_gbytes_per_s=4800.0,
            gemm_efficiency=0.75,
            attention_efficiency=0.35,
            nccl_sm_fraction=16 / 132,
        ),
        # B200 (HGX, 1,000 W): 8 TB/s HBM3e per GPU (NVIDIA DGX B200 datasheet: 64 TB/s for
        # eight); dense bf16 2,250 TF (NVIDIA Blackwell architecture technical brief, HGX B200;
        # the catalog's peak_bf16_tflops). No measured run here: GEMM 0.7 and attention 0.3 are
        # assumptions below the H100's (FlashAttention-2 has no Blackwell kernels; SDPA falls
        # back to cuDNN/efficient attention) until `planner calibrate` fits them. 148 SMs.
        GpuGeneration(
            name="B200",
            hbm_gbytes_per_s=8000.0,
            gemm_efficiency=0.7,
            attention_efficiency=0.3,
            nccl_sm_fraction=16 / 148,
        ),
        # A100 SXM4: 312 TF at 1.41 GHz, which it holds at 400 W; cuBLAS ~85-90% -> 0.85.
        # FA2 fwd+bwd ~190 TF/s at head dim 128 (Dao 2023) -> 0.6. 16 channels on 108 SMs.
        # HBM2e 2.04 TB/s (80 GB) / 1.56 TB/s (40 GB): keyed by the full model name below.
        GpuGeneration(
            name="A100-SXM-80GB",
            hbm_gbytes_per_s=2039.0,
            gemm_efficiency=0.85,
            attention_efficiency=0.6,
            nccl_sm_fraction=16 / 108,
        ),
        GpuGeneration(
            name="A100-SXM-40GB",
            hbm_gbytes_per_s=1555.0,
            gemm_efficiency=0.85,
            attention_efficiency=0.6,
            nccl_sm_fraction=16 / 108,
        ),
        # A10G and L4: PCIe cards, power-limited (150 W / 72 W): clocks sag under GEMM load.
        GpuGeneration(
            name="A10G",
            hbm_gbytes_per_s=600.0,
            gemm_efficiency=0.7,
            attention_efficiency=0.5,
            nccl_sm_fraction=16 / 80,
        ),
        GpuGeneration(
            name="L4",
            hbm_gbytes_per_s=300.0,
            gemm_efficiency=0.6,
            attention_efficiency=0.45,
            nccl_sm_fraction=16 / 58,
        ),
        # One training process on a CPU core (``planner.catalog.LOCAL_CPU``): nominal 10 GB/s of
        # memory bandwidth per process; efficiencies are placeholders until ``planner
        # calibrate`` fits them from a preflight and a run. Nothing overlaps: FSDP2 calls its
        # all-gathers with async_op=False and its reduce-scatters synchronously
        # (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py ``unshard``,
        # _fsdp_collectives.py ``foreach_reduce``), which on CUDA only orders them on their own
        # streams but on CPU makes gloo block the computing thread until the collective is done
        # (profiled: every FSDP all-gather and reduce-scatter of a 2-process run is a wait on
        # the main thread). So no SM share either.
        GpuGeneration(
            name="CPU",
            hbm_gbytes_per_s=10.0,
            gemm_efficiency=0.5,
            attention_efficiency=0.25,
            nccl_sm_fraction=0.0,
            overlaps_comm=False,
        ),
    )
}


def generation(gpu_model: str) -> GpuGeneration:
    """The generation row for a catalog ``gpu_model`` (longest matching key wins)."""
    matches = [k for k in GENERATIONS if gpu_model.startswith(k)]
    if not matches:
        raise KeyError(f"no planner assumptions for GPU model {gpu_model!r}")
    return GENERATIONS[max(matches, key=len)]


@dataclass(frozen=True, kw_only=True)
class Assumptions:
    """Software and system constants of the memory, time and epoch models."""

    # -- memory -------------------------------------------------------------------------------
    cuda_context_bytes: int = 768 * 2**20
    """CUDA context + kernels loaded lazily (CUDA_MODULE_LOADING=LAZY) + cuBLAS workspace."""
    nccl_buffer_bytes: int = 1024 * 2**20
    """NCCL communicator buffers (NCCL_BUFFSIZE 4 MiB x channels x peers, proxy FIFOs)."""
    fragmentation: float = 0.10
    """Caching-allocator slack on the dynamic memory (activations and gathered units)."""
    prefetch_units: int = 2
    """Unsharded units alive at once under FULL_SHARD: the running one and the prefetched next."""
    loss_chunk_bytes: int = 256 * 2**20
    """fp32 bytes of one chunk of logits in the chunked cross-entropy (training/loss.py
    CHUNK_BYTES; tests/planner/test_memory_model.py checks they agree)."""
    loss_min_chunks: int = 4
    """The loss splits the tokens into at least this many chunks (training/loss.py MIN_CHUNKS)."""

    # -- compute ------------------------------------------------------------------------------
    hbm_efficiency: float = 0.7
    """Fraction of HBM bandwidth that eager elementwise/reduction kernels reach."""
    backward_traffic_factor: float = 2.0
    """HBM traffic of the backward of elementwise ops, in units of the forward's."""

    # -- communication ------------------------------------------------------------------------
    nvlink_efficiency: float = 0.8
    """NCCL ring bus bandwidth / NVLink (or PCIe) bandwidth per direction inside a node."""
    network_efficiency: float = 0.75
    """NCCL ring bus bandwidth / instance network bandwidth across nodes (EFA, SRD)."""
    intra_hop_latency_s: float = 3e-6
    """Latency of one ring step between GPUs of a node."""
    inter_hop_latency_s: float = 12e-6
    """Latency of one ring step that crosses the network (EFA)."""
    reduce_scatter_bus_ratio: float = 1.0
    """Reduce-scatter busbw / all-gather busbw on the same link. NCCL runs both as one ring pass
    over the same bytes (nccl-tests' busbw of the two agree): 1. gloo's reduce_scatter_tensor is
    a clone of the input plus an all-reduce of the whole tensor (ProcessGroupGloo.cpp
    ``reduce_scatter_tensor_coalesced``, pytorch/pytorch#118911: ``allreduce(inp).chunk(n)[rank]``,
    twice a real reduce-scatter's traffic): about half; ``planner calibrate`` fits it."""
    reduce_scatter_latency_ratio: float = 1.0
    """Reduce-scatter per-hop latency / all-gather's (NCCL 1; fitted for gloo)."""
    all_reduce_bus_ratio: float = 1.0
    """All-reduce busbw / all-gather busbw (nccl-tests' busbw: a ring all-reduce is a
    reduce-scatter then an all-gather, 2(n-1)/n of the bytes: 1 for NCCL; fitted for gloo)."""
    all_reduce_latency_ratio: float = 1.0
    """All-reduce per-hop latency / all-gather's (the ring's 2(n-1) hops are counted apart)."""
    step_all_reduces: int = 3
    """Scalar all-reduces over the world per optimizer step (training.finetune.Trainer.train_step):
    the global gradient norm (clip_grads, DTensor.full_tensor), the loss sum and the
    stop/checkpoint vote. Latency only; they matter on gloo, where each blocks the step."""
    host_step_all_reduces: int = 1
    """Of those, the ones on CPU tensors over gloo even in a CUDA job (the vote,
    ``Trainer._vote``): the CPU waits while the GPU runs the queued step on, so a GPU's step
    does not wait for them (nor do they cross NVLink or EFA); on a CPU they block like the rest."""

    # -- epoch --------------------------------------------------------------------------------
    loop_start_s: float = 0.3
    """Train-loop entry: DataLoader worker fork, first batch, progress bar, memory tracer."""
    first_step_extra_s: float = 0.4
    """First optimizer step's one-off cost: lazy kernel loads, allocator growth, optimizer state."""
    process_start_s: float = 20.0
    """Python + torch + transformers import and CUDA init on every rank (in parallel)."""
    rendezvous_s_per_node: float = 0.5
    """torchrun rendezvous + NCCL communicator init, per node in the job (store round trips)."""
    rendezvous_base_s: float = 5.0
    """Rendezvous floor: etcd/c10d round trips and the last-call window."""
    storage_gbytes_per_s: float = 1.0
    """Read/write bandwidth of one node to the checkpoint/model storage (FSx/EBS class), GB/s."""
    eval_fraction: float = 818 / 14732
    """Validation split size relative to the training split (samsum: 818 / 14,732 dialogs)."""

    overrides: dict[str, float] = field(default_factory=dict)
    """Values replaced on the command line or by a benchmark (recorded in the JSON)."""

    def with_overrides(self, **values: float) -> Assumptions:
        """A copy with some fields replaced (the changes are recorded in ``overrides``)."""
        changes: dict[str, Any] = {**values, "overrides": {**self.overrides, **values}}
        return replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        """Plain values for the JSON output."""
        return asdict(self)


DEFAULT = Assumptions()

# samsum (Gliwa et al. 2019): 14,732 training dialogs. With llama-recipes' prompt ("Summarize this
# dialog:\n...\n---\nSummary:\n") the Llama-2 tokenizer gives about 190 tokens per example
# (dialogs average ~95 words, summaries ~20; ~1.4 tokens per chat word with speaker tags and
# newlines; 13 template tokens; BOS/EOS).
SAMSUM_EXAMPLES = 14732
SAMSUM_TOKENS_PER_EXAMPLE = 190
# ultrachat_200k (HuggingFaceH4/ultrachat_200k, split train_sft): 207,865 multi-turn chats
# (num_examples in the dataset card's dataset_info). Its messages column holds 1,203,127,976
# bytes (dataset_info num_bytes of mlabonne/ultrachat_200k_sft, the same 207,865 rows with the
# messages column alone): ~5,790 bytes per chat. At ~4 bytes of English text per Llama-2 token,
# plus the chat template's [INST] tags, about 1,450 tokens per chat, ~301 M tokens per epoch:
# enough for a few hundred optimizer steps of 128 GPUs x 2 x 4096 tokens.
ULTRACHAT_EXAMPLES = 207865
ULTRACHAT_TOKENS_PER_EXAMPLE = 1450
DATASETS: dict[str, int] = {
    "samsum": SAMSUM_EXAMPLES * SAMSUM_TOKENS_PER_EXAMPLE,
    "ultrachat_200k": ULTRACHAT_EXAMPLES * ULTRACHAT_TOKENS_PER_EXAMPLE,
}
"""Named datasets -> training tokens per epoch (before packing)."""
HF_DATASETS: dict[tuple[str, str], str] = {
    ("HuggingFaceH4/ultrachat_200k", "train_sft"): "ultrachat_200k",
}
"""A job's ``--hf_dataset`` and ``--hf_split`` -> its row of ``DATASETS`` (no download)."""
# samsum_sample (training/assets/samsum_sample.jsonl, 2,400 rows): its training split (the first
# 90% of rows, training.data.rows.VALIDATION_FRACTION) tokenized as the training package does it for a
# tiny preset (training.data: the bundled byte-level BPE, bos + samsum prompt + summary + eos per
# row). Wrapped packing (the default) concatenates those tokens and cuts whole context_length
# chunks, so the packed sample count is this // context_length, which is the planner's epoch
# rule, at 128 tokens and more (the demo's 256 included); below, chunks that hold only prompt
# tokens are left out (training.data), so training has fewer samples. tests/planner/
# test_job_examples.py re-derives the figure from the file with training.data.
SAMSUM_SAMPLE_TRAIN_TOKENS = 167_644
BUNDLED_DATASETS: dict[str, int] = {"samsum_sample": SAMSUM_SAMPLE_TRAIN_TOKENS}
"""Datasets bundled in training/assets -> training tokens per epoch with the tiny presets'
bundled tokenizer (another model's tokenizer gives another count: the planner does not know it)."""
