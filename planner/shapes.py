"""Model shapes: the built-in Llama configurations, any HF ``config.json`` and the tiny presets.

A shape is the handful of numbers the planner needs (vocabulary, hidden size, MLP width,
layers, attention and key/value heads, head size, tied embeddings). Parameter lists are
exact: the memory model shards them tensor by tensor as FSDP2 does.
No torch import: ``training/model.py``'s presets are read with ``ast``.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import Path

from eks_fsdp_cli.paths import REPO_ROOT


class ShapeError(ValueError):
    """A model that cannot be resolved; the message names ``--model``."""


@dataclass(frozen=True, kw_only=True)
class ModelShape:
    """The architecture numbers of a Llama-style decoder (LlamaForCausalLM)."""

    name: str
    """Display name (built-in key, preset name or config path)."""
    vocab_size: int
    """Vocabulary size V."""
    hidden_size: int
    """Model width h."""
    intermediate_size: int
    """SwiGLU MLP width i."""
    num_layers: int
    """Decoder layers L."""
    num_heads: int
    """Query heads a."""
    num_kv_heads: int
    """Key/value heads (GQA when smaller than num_heads)."""
    head_dim: int
    """Size of one head (h / a for Llama)."""
    tie_word_embeddings: bool = False
    """Whether lm_head shares the embedding matrix."""
    max_position_embeddings: int = 4096
    """Longest sequence the model supports."""
    qkv_bias: bool = False
    """Biases on the q, k and v projections (Qwen2, Qwen2.5; Llama's ``attention_bias``)."""
    qk_norm: bool = False
    """An RMSNorm of head_dim on each query and key head (Qwen3)."""

    def __post_init__(self) -> None:
        for field_name in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_layers",
            "num_heads",
            "num_kv_heads",
            "head_dim",
        ):
            if getattr(self, field_name) < 1:
                raise ShapeError(f"--model {self.name}: {field_name} must be >= 1")
        if self.num_heads % self.num_kv_heads:
            raise ShapeError(
                f"--model {self.name}: num_attention_heads {self.num_heads} is not a multiple "
                f"of num_key_value_heads {self.num_kv_heads}"
            )

    @property
    def q_size(self) -> int:
        """Width of the query projection output (a x head_dim)."""
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        """Width of the key (and of the value) projection output (kv_heads x head_dim)."""
        return self.num_kv_heads * self.head_dim

    def layer_param_shapes(self) -> list[tuple[int, ...]]:
        """Parameter tensors of one decoder layer, as nn.Linear stores them (out, in)."""
        h, i = self.hidden_size, self.intermediate_size
        return [
            (self.q_size, h),
            (self.kv_size, h),
            (self.kv_size, h),
            (h, self.q_size),  # attention
            (i, h),
            (i, h),
            (h, i),  # gate, up, down
            (h,),
            (h,),  # input_layernorm, post_attention_layernorm
            *([(self.q_size,), (self.kv_size,), (self.kv_size,)] if self.qkv_bias else []),
            *([(self.head_dim,), (self.head_dim,)] if self.qk_norm else []),  # q_norm, k_norm
        ]

    def root_param_shapes(self) -> list[tuple[int, ...]]:
        """Parameters outside the decoder layers: embedding, final norm, lm_head (if untied)."""
        shapes: list[tuple[int, ...]] = [(self.vocab_size, self.hidden_size), (self.hidden_size,)]
        if not self.tie_word_embeddings:
            shapes.append((self.vocab_size, self.hidden_size))
        return shapes

    def param_shapes(self) -> list[tuple[int, ...]]:
        """Every parameter tensor of the model."""
        return self.layer_param_shapes() * self.num_layers + self.root_param_shapes()

    @property
    def layer_params(self) -> int:
        """Parameters of one decoder layer."""
        return sum(_numel(s) for s in self.layer_param_shapes())

    @property
    def root_params(self) -> int:
        """Parameters of the root FSDP unit (embedding, final norm, lm_head)."""
        return sum(_numel(s) for s in self.root_param_shapes())

    @property
    def n_params(self) -> int:
        """Total parameter count N."""
        return self.layer_params * self.num_layers + self.root_params

    @property
    def layer_matmul_params(self) -> int:
        """Weights of one layer that take part in a matmul per token (norm weights excluded)."""
        return sum(_numel(s) for s in self.layer_param_shapes() if len(s) == 2)

    @property
    def selective_ac_recomputed_params(self) -> int:
        """Weights of one layer whose matmul op-level selective AC runs again in backward.

        HF's LlamaDecoderLayer runs seven matmuls in this order: q, k, v, o, gate, up, down.
        torchtitan's policy (``training.parallelize.sac_policy``) saves the output of every
        other one and recomputes the 2nd, 4th and 6th: k, o and up.
        """
        h, i = self.hidden_size, self.intermediate_size
        return h * self.kv_size + self.q_size * h + h * i

    @property
    def matmul_params(self) -> int:
        """Weights multiplied per token: all layer projections plus lm_head (not the lookup)."""
        return self.layer_matmul_params * self.num_layers + self.vocab_size * self.hidden_size


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _llama(
    name: str,
    v: int,
    h: int,
    i: int,
    layers: int,
    heads: int,
    kv: int,
    pos: int,
    head_dim: int | None = None,
    **extra: bool,
) -> ModelShape:
    return ModelShape(
        name=name,
        vocab_size=v,
        hidden_size=h,
        intermediate_size=i,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv,
        head_dim=head_dim or h // heads,
        max_position_embeddings=pos,
        **extra,
    )


# The public config.json of each checkpoint (meta-llama/Llama-2-*-hf, meta-llama/Meta-Llama-3-*,
# meta-llama/Llama-3.1-*, meta-llama/Llama-3.2-*, Qwen/Qwen2.5-*, Qwen/Qwen3-*); the parameter
# counts equal the checkpoints' (tests/planner/test_lora_memory.py).
BUILTIN: dict[str, ModelShape] = {
    "llama2-7b": _llama("llama2-7b", 32000, 4096, 11008, 32, 32, 32, 4096),
    "llama2-13b": _llama("llama2-13b", 32000, 5120, 13824, 40, 40, 40, 4096),
    "llama2-70b": _llama("llama2-70b", 32000, 8192, 28672, 80, 64, 8, 4096),
    "llama3-8b": _llama("llama3-8b", 128256, 4096, 14336, 32, 32, 8, 8192),
    "llama3-70b": _llama("llama3-70b", 128256, 8192, 28672, 80, 64, 8, 8192),
    "llama3.1-8b": _llama("llama3.1-8b", 128256, 4096, 14336, 32, 32, 8, 131072),
    "llama3.1-70b": _llama("llama3.1-70b", 128256, 8192, 28672, 80, 64, 8, 131072),
    "llama3.2-1b": _llama(
        "llama3.2-1b", 128256, 2048, 8192, 16, 32, 8, 131072, 64, tie_word_embeddings=True
    ),
    "llama3.2-3b": _llama(
        "llama3.2-3b", 128256, 3072, 8192, 28, 24, 8, 131072, 128, tie_word_embeddings=True
    ),
    "qwen2.5-7b": _llama("qwen2.5-7b", 152064, 3584, 18944, 28, 28, 4, 32768, qkv_bias=True),
    "qwen2.5-72b": _llama("qwen2.5-72b", 152064, 8192, 29568, 80, 64, 8, 32768, qkv_bias=True),
    "qwen3-8b": _llama("qwen3-8b", 151936, 4096, 12288, 36, 32, 8, 40960, 128, qk_norm=True),
    "qwen3-32b": _llama("qwen3-32b", 151936, 5120, 25600, 64, 64, 8, 40960, 128, qk_norm=True),
}

_REQUIRED = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
)


def from_config_dict(cfg: dict[str, object], name: str) -> ModelShape:
    """A shape from the keys of a Hugging Face Llama-style config."""
    missing = [k for k in _REQUIRED if k not in cfg]
    if missing:
        raise ShapeError(f"--model {name}: config has no {', '.join(missing)}")

    def _int(key: str, default: object = None) -> int:
        value = cfg.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ShapeError(f"--model {name}: {key} must be an integer, got {value!r}")
        return value

    heads = _int("num_attention_heads")
    hidden = _int("hidden_size")
    kv = cfg.get("num_key_value_heads")
    head_dim = cfg.get("head_dim")
    return ModelShape(
        name=name,
        vocab_size=_int("vocab_size"),
        hidden_size=hidden,
        intermediate_size=_int("intermediate_size"),
        num_layers=_int("num_hidden_layers"),
        num_heads=heads,
        num_kv_heads=heads if kv is None else _int("num_key_value_heads"),
        head_dim=(hidden // heads if heads else 0) if head_dim is None else _int("head_dim"),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        max_position_embeddings=_int("max_position_embeddings", 4096),
        qkv_bias=bool(cfg.get("attention_bias", False)) or cfg.get("model_type") == "qwen2",
        qk_norm=cfg.get("model_type") == "qwen3",
    )


def from_config_json(path: Path) -> ModelShape:
    """A shape from a Hugging Face ``config.json`` file (or a folder holding one)."""
    if path.is_dir():
        path = path / "config.json"
    try:
        text = path.read_text()
    except OSError as e:
        raise ShapeError(f"--model {path}: cannot read ({e.strerror})") from None
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as e:
        raise ShapeError(f"--model {path}:{e.lineno}: not valid JSON ({e.msg})") from None
    if not isinstance(cfg, dict):
        raise ShapeError(f"--model {path}: a config.json must hold a JSON object")
    return from_config_dict(cfg, str(path))


def training_presets(root: Path = REPO_ROOT) -> dict[str, dict[str, object]]:
    """The training package's tiny presets, read from its source without importing torch."""
    source = root / "training" / "model.py"
    try:
        tree = ast.parse(source.read_text())
    except (OSError, SyntaxError):
        return {}
    for node in tree.body:
        target = None
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            target, value = node.target.id, node.value
        elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            target, value = node.targets[0].id, node.value
        if target == "PRESETS" and value is not None:
            try:
                presets = ast.literal_eval(value)
            except ValueError:
                return {}
            return presets if isinstance(presets, dict) else {}
    return {}


def bundled_vocab_size(root: Path = REPO_ROOT) -> int:
    """len(tokenizer) of the bundled tokenizer the presets are built with."""
    data = json.loads((root / "training" / "assets" / "tokenizer" / "tokenizer.json").read_text())
    ids = list(data["model"]["vocab"].values()) + [t["id"] for t in data.get("added_tokens", [])]
    return max(ids) + 1


def resolve(model: str) -> ModelShape:
    """``--model``: a built-in name, a training preset, or a path to a config.json."""
    if model in BUILTIN:
        return BUILTIN[model]
    presets = training_presets()
    if model in presets:
        cfg = {"vocab_size": bundled_vocab_size(), "tie_word_embeddings": False, **presets[model]}
        return from_config_dict(cfg, model)
    path = Path(model)
    if path.suffix == ".json" or path.is_dir() or path.exists():
        return from_config_json(path)
    known = ", ".join([*BUILTIN, *presets])
    raise ShapeError(f"--model {model}: unknown (built in: {known}; or a path to a config.json)")
