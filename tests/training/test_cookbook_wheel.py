"""Every flag of the pinned llama-cookbook, read from its wheel, against the training CLI.

`make setup` downloads the wheel (scripts/fetch_cookbook_wheel.py, `pip download --no-deps`)
into a cache outside the checkout; nothing here imports llama_cookbook: its config dataclasses
(llama_cookbook/configs/*.py) are read with zipfile + ast, as `update_config` sees them (every
class attribute, annotated or not: it checks `hasattr`). If these tests fail, a job command
written for llama-cookbook stops parsing, means something else here, or a field added upstream
when the pin moves has no entry in `training.cookbook.TABLE` (accepted with its meaning, or
refused in one line with the reason).
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import zipfile
from pathlib import Path
from typing import Any

import pytest
import torch

from training import cookbook
from training.config import ConfigError, TrainConfig, parse_args

REPO = Path(__file__).resolve().parents[2]
MODULES = {
    "train_config": "llama_cookbook/configs/training.py",
    "fsdp_config": "llama_cookbook/configs/fsdp.py",
    "lora_config": "llama_cookbook/configs/peft.py",
    "llama_adapter_config": "llama_cookbook/configs/peft.py",
    "prefix_config": "llama_cookbook/configs/peft.py",
    "wandb_config": "llama_cookbook/configs/wandb.py",
    "quantization_config": "llama_cookbook/configs/quantization.py",
}
REFUSED = {
    ("llama_adapter_config", "adapter_len"),
    ("llama_adapter_config", "adapter_layers"),
    ("prefix_config", "num_virtual_tokens"),
}
"""Fields refused whatever their value: the peft methods llama-cookbook refuses itself."""
COMPANIONS = {
    "profiler_dir": ["--use_profiler"],
    "num_freeze_layers": ["--freeze_layers"],
    **{f"wandb_{n}": ["--use_wandb"] for n in ("project", "entity", "job_type", "tags")},
    **{f"wandb_{n}": ["--use_wandb"] for n in ("group", "notes", "mode")},
    **{n: ["--use_peft"] for n in ("lora_r", "lora_alpha", "lora_dropout", "lora_target_modules")},
}
"""Flags that only mean something with another one (alone they are ignored with a line:
training.cookbook.inert_notes); given with it, as a job command would."""


def _wheel() -> Path:
    spec = importlib.util.spec_from_file_location(
        "fetch_cookbook_wheel", REPO / "scripts" / "fetch_cookbook_wheel.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    found = module.find_wheel(cookbook.COOKBOOK_VERSION)
    if found is None:
        missing = f"llama-cookbook {cookbook.COOKBOOK_VERSION} wheel not cached: run make setup"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(missing)  # CI runs make setup: a missing wheel is a broken setup there
        pytest.skip(missing)
    return Path(found)


def _source(path: str) -> str:
    with zipfile.ZipFile(_wheel()) as whl:
        return whl.read(path).decode("utf-8")


def _value(node: ast.expr | None) -> str:
    """An upstream default as its command-line spelling (what fire would be given)."""
    if node is None:
        return "None"
    if isinstance(node, ast.Call):  # field(default_factory=lambda: [...])
        for kw in node.keywords:
            if kw.arg == "default_factory" and isinstance(kw.value, ast.Lambda):
                return _value(kw.value.body)
        raise AssertionError(f"unreadable default {ast.dump(node)}")
    if isinstance(node, ast.List):
        return "[" + ",".join(_value(e) for e in node.elts) + "]"
    if isinstance(node, ast.Attribute):  # ShardingStrategy.FULL_SHARD, StateDictType.X
        return ast.unparse(node)
    assert isinstance(node, ast.Constant), ast.dump(node)
    return str(node.value)


def upstream_fields() -> dict[str, dict[str, str]]:
    """{config class: {attribute: default as a flag value}} from the wheel's sources."""
    out: dict[str, dict[str, str]] = {}
    for config, path in MODULES.items():
        tree = ast.parse(_source(path))
        cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == config)
        fields: dict[str, str] = {}
        for node in cls.body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                fields[node.target.id] = _value(node.value)
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    assert isinstance(target, ast.Name)
                    fields[target.id] = _value(node.value)
        out[config] = fields
    return out


def _fields_params() -> list[tuple[str, str]]:
    # the table lists what the wheel has (test_table_covers_every_wheel_field checks it)
    return [(c, n) for c, fields in cookbook.TABLE.items() for n in fields]


def test_table_covers_every_wheel_field() -> None:
    """The table and the pinned wheel know the same fields, config by config."""
    wheel = upstream_fields()
    assert set(wheel) == set(cookbook.CONFIGS) == set(cookbook.TABLE)
    for config, fields in wheel.items():
        assert set(fields) == set(cookbook.TABLE[config]), config


def test_dataset_configs_are_the_wheels() -> None:
    """The dataset configs refused as a group (training.cookbook.DATASET_CONFIGS) are the
    wheel's, field for field, so their flags get the refusal's reason, not "unknown flag"."""
    tree = ast.parse(_source("llama_cookbook/configs/datasets.py"))
    wheel = {
        cls.name: tuple(
            n.target.id if isinstance(n, ast.AnnAssign) else n.targets[0].id  # type: ignore[union-attr]
            for n in cls.body
            if isinstance(n, ast.AnnAssign | ast.Assign)
        )
        for cls in tree.body
        if isinstance(cls, ast.ClassDef)
    }
    assert wheel == cookbook.DATASET_CONFIGS


def test_update_config_forms_are_the_ones_we_take() -> None:
    """llama-cookbook's update_config: a bare name, or `<config class>.<field>` split on ".";
    the source is read, so a new form upstream shows up here."""
    source = _source("llama_cookbook/utils/config_utils.py")
    func = re.search(r"def update_config\(.*?(?=\ndef )", source, re.S)
    assert func is not None
    body = func.group(0)
    assert "hasattr(config, k)" in body
    assert 'config_name, param_name = k.split(".")' in body
    assert "type(config).__name__ == config_name" in body


def _parse(config: str, name: str, value: str, dotted: bool) -> TrainConfig:
    flag = cookbook.TABLE[config][name]
    spelled = f"{config}.{name}" if dotted else name
    extra = COMPANIONS.get(flag.ours or "", [])
    return parse_args([f"--{spelled}={value}", *extra])


@pytest.mark.parametrize(
    ("config", "name"), _fields_params(), ids=[f"{c}.{n}" for c, n in _fields_params()]
)
def test_every_field_in_both_spellings(config: str, name: str) -> None:
    """Each field, given its upstream default in both spellings: accepted with that value in
    the TrainConfig field that carries its meaning (or, for a fixed flag, accepted at that
    value and refused at another in one line), or refused in one line with a reason."""
    value = upstream_fields()[config][name]
    flag = cookbook.TABLE[config][name]
    bare_owner = next(c for c in cookbook.TABLE if name in cookbook.TABLE[c])
    spellings = [True] + ([False] if bare_owner == config or not flag.refused else [])
    for dotted in spellings:
        if (config, name) in REFUSED:
            with pytest.raises(ConfigError) as err:
                _parse(config, name, value, dotted)
            msg = str(err.value)
            assert "\n" not in msg
            assert msg.startswith(f"--{config}.{name}: " if dotted else f"--{name}: ")
            assert "use --" in msg  # says what to use instead
            continue
        cfg = _parse(config, name, value, dotted)
        if flag.ours is None:  # a fixed value: upstream's default is accepted, and sets nothing
            assert cfg == TrainConfig()
            with pytest.raises(ConfigError) as err:
                _parse(config, name, "something_else", dotted)
            assert "\n" not in str(err.value) and flag.refused in str(err.value)
            continue
        got = getattr(cfg, flag.ours)
        expected = _expected(flag.ours, value)
        assert got == expected, (config, name, got, expected)


def _expected(ours: str, upstream: str) -> Any:
    """The upstream value as our field holds it (enum prefixes and list syntax dropped)."""
    kind = type(getattr(TrainConfig(), ours))
    text = cookbook.value_form(ours, upstream)
    if upstream == "None":
        return None
    if kind is bool:
        return text == "True"
    if kind in (int, float):
        return kind(text)
    return text


def test_counts() -> None:
    """The pinned release's tally (updated with the pin, in docs/migrating.md too): fields that
    carry their meaning here, fields that take only llama-cookbook's default value here, and
    fields refused whatever their value."""
    flags = [f for fields in cookbook.TABLE.values() for f in fields.values()]
    carried = sum(f.ours is not None for f in flags)
    fixed = sum(bool(f.fixed) for f in flags)
    refused = sum(bool(f.refused) and not f.fixed for f in flags)
    assert (carried, fixed, refused) == (len(flags) - fixed - refused, fixed, len(REFUSED))
    assert (carried, fixed, refused) == (64, 10, 3)


def test_anyprecision_steps_as_the_wheels_optimizer() -> None:
    """`--optimizer anyprecision`: our AnyPrecisionAdamW and the wheel's (its source run as a
    module: it needs torch alone; llama_cookbook itself is not imported) give bit-identical bf16
    parameters and states over 4 steps with weight decay, as finetuning.py builds it."""
    from training.cookbook_run import AnyPrecisionAdamW

    namespace: dict[str, Any] = {}
    exec(  # the file imports torch and defines the class, nothing else
        compile(_source("llama_cookbook/policies/anyprecision_optimizer.py"), "apo", "exec"),
        namespace,
    )
    theirs_cls = namespace["AnyPrecisionAdamW"]
    gen = torch.Generator().manual_seed(3)
    start = torch.randn(64, 32, generator=gen).to(torch.bfloat16)
    grads = [torch.randn(64, 32, generator=gen).to(torch.bfloat16) for _ in range(4)]
    a, b = torch.nn.Parameter(start.clone()), torch.nn.Parameter(start.clone())
    mine = AnyPrecisionAdamW([a], lr=1e-2, weight_decay=0.1)
    theirs = theirs_cls(
        [b],
        lr=1e-2,
        weight_decay=0.1,
        momentum_dtype=torch.bfloat16,
        variance_dtype=torch.bfloat16,
        use_kahan_summation=False,
    )
    for g in grads:
        a.grad, b.grad = g.clone(), g.clone()
        mine.step()
        theirs.step()
    assert not torch.equal(a.detach(), start)
    assert torch.equal(a.detach(), b.detach())
    for key in ("exp_avg", "exp_avg_sq"):
        assert mine.state[a][key].dtype == torch.bfloat16
        assert torch.equal(mine.state[a][key], theirs.state[b][key])
