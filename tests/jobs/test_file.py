"""Job files (``jobs.schema``): strict, one line per mistake, the manifest from the pure builders.

Nothing is mocked and nothing runs: a job file is read, checked against its stack's nodegroups
and turned into the settings ``workloads.specs`` renders. If these fail, a typo in a job file
would be silently dropped (a job trained with defaults nobody asked for), a wrong value would
surface as a stack trace or as a pod crash-looping on the cluster, or the example jobs would
drift from the manifests the stacks' jobs rendered.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from jobs import schema as jobfile
from jobs.build import build as job_workloads
from workloads.specs import pytorchjob as pj

EXAMPLES = Path(__file__).resolve().parents[2] / "jobs" / "examples"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/eks-fsdp-training:sha-1"
DEV = """\
name: demo
stack: dev
model: tiny-llama
dataset: samsum_sample
workers: 2
device: cpu
args:
  fsdp_activation_checkpointing: false
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("stack", ["dev", "p4de-odcr", "p5-16"])
def test_each_example_loads_and_renders_a_valid_pytorchjob(stack: str) -> None:
    from workloads.specs.validate import validate_pytorchjob

    job = jobfile.load(EXAMPLES / f"{stack}.yaml")
    assert job.stack == stack
    w = job_workloads(job, image=IMAGE)
    obj = pj.pytorchjob(w.job, w.etcd.host)
    validate_pytorchjob(obj)
    assert obj["metadata"]["name"] == job.name


def test_dev_example_is_the_demo_job() -> None:
    """What the dev stack's job block held: the demo's model, data, size and flags."""
    w = job_workloads(jobfile.load(EXAMPLES / "dev.yaml"))
    job = w.job
    assert (job.name, job.workers, job.min_workers, job.rdzv_backend) == (
        "llama-finetune-dev",
        2,
        2,
        "etcd",
    )
    assert w.device == "cpu"
    assert job.train_args == (
        "--enable_fsdp",
        "--model_name=tiny-llama",
        "--dataset=samsum_sample",
        "--num_epochs=1",
        "--batch_size_training=2",
        "--context_length=256",
        "--sharding_strategy=FULL_SHARD",
        "--max_train_step=100",
        "--checkpoint_every=50",
        "--fsdp_activation_checkpointing=False",
    )


def test_gpu_examples_mount_the_stacks_fsx_claim_and_use_c10d() -> None:
    for stack, workers, min_workers in (("p4de-odcr", 2, 2), ("p5-16", 16, 14)):
        job = job_workloads(jobfile.load(EXAMPLES / f"{stack}.yaml"), image=IMAGE).job
        assert job.checkpoint_claim == "fsx-checkpoints"
        assert (job.workers, job.min_workers, job.rdzv_backend) == (workers, min_workers, "c10d")
        assert job.resumes


def test_set_and_name_override_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path, DEV)
    job = jobfile.load(
        path,
        sets=["workers=1", "maxTrainStep=7", "args.lr=3.0e-4", "args.log-every=2"],
        name="other",
    )
    assert (job.name, job.workers, job.max_train_step) == ("other", 1, 7)
    assert job.extra_args == (
        "--fsdp_activation_checkpointing=False",
        "--lr=0.0003",
        "--log_every=2",
    )
    assert job.values["name"] == "other" and job.values["workers"] == 1
    again = jobfile.loads(job.dump(), source="record other")

    def spec(j: jobfile.JobSpec) -> jobfile.JobSpec:  # the job, wherever it was read from
        return dataclasses.replace(j, source="", lines={})

    assert spec(again) == spec(job)


@pytest.mark.parametrize(
    ("text", "sets", "message"),
    [
        (DEV + "wrokers: 3\n", [], "job.yaml:9: wrokers: unknown key (did you mean workers?)"),
        (DEV.replace("workers: 2", "workers: two"), [], "job.yaml:5: workers: expected an integer"),
        (DEV.replace("model: tiny-llama\n", ""), [], "job.yaml: model: required"),
        (DEV.replace("name: demo\n", ""), [], "job.yaml: name: required (or pass --name)"),
        (DEV.replace("stack: dev\n", ""), [], "job.yaml: stack: required (or pass --stack)"),
        (DEV + "nodeGroup: gpu-x\n", [], "job.yaml:9: nodeGroup: 'gpu-x' is not a GPU nodegroup"),
        (
            DEV.replace("stack: dev", "stack: nope"),
            [],
            "job.yaml:2: stack: no stack file Pulumi.nope.yaml (stacks: dev, ",
        ),
        (DEV.replace("workers: 2", "workers: 5"), [], "job.yaml:5: workers: 5 is greater than"),
        (DEV.replace("device: cpu", "device: tpu"), [], "job.yaml:6: device: 'tpu' is not one"),
        (DEV.replace("name: demo", "name: Demo_1"), [], "job.yaml:1: name: 'Demo_1' is not a DNS"),
        (DEV.replace("name: demo", "name: 1abc"), [], "job.yaml:1: name: '1abc' is not a DNS-1035"),
        (
            DEV.replace("name: demo", "name: " + "a" * 51),
            [],
            f"job.yaml:1: name: '{'a' * 51}' is 51 characters: at most 50",
        ),
        (DEV + "workers: 1\n", [], "job.yaml:9: workers: given twice (first on line 5)"),
        (DEV + "  bogus_flag: 1\n", [], "job.yaml:9: args.bogus_flag: unknown training flag"),
        (DEV + "  model_name: x\n", [], "job.yaml:9: args.model_name: set by the key model"),
        (DEV + "  output_dir: /x\n", [], "job.yaml:9: args.output_dir: set by the manifest"),
        (DEV + "  lr: [1, 2]\n", [], "job.yaml:9: args.lr: expected a single value"),
        (DEV + "  lr: fast\n", [], "job.yaml:9: args.lr: expects a number, got 'fast'"),
        (DEV + "  fsdp_config.nope: 1\n", [], "job.yaml:9: args.fsdp_config.nope: --fsdp_config"),
        (DEV + "  use_fp16: true\n", [], "job.yaml:9: args.use_fp16"),
        (
            DEV + "  train_config.model_name: x\n",
            [],
            "job.yaml:9: args.train_config.model_name: set",
        ),
        (DEV.replace("samsum_sample", "nope"), [], "job.yaml:4: dataset: "),
        (DEV.replace("args:\n", "args: 3\n").rsplit("\n", 2)[0], [], "job.yaml:7: args: expected"),
        ("name: [x\n", [], "job.yaml:2: not valid YAML"),
        ("- a\n- b\n", [], "job.yaml: expected a mapping of job keys, got list"),
        ("", [], "job.yaml: empty job file"),
        (DEV, ["wrokers=2"], "--set wrokers=2: wrokers: unknown key (did you mean workers?)"),
        (DEV, ["workers"], "--set workers: expected key=value"),
        (DEV, ["workers=many"], "job.yaml:5: workers: expected an integer, got 'many'"),
    ],
)
def test_bad_job_files_are_one_line_naming_the_key(
    tmp_path: Path, text: str, sets: list[str], message: str
) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(jobfile.JobFileError) as err:
        job_workloads(jobfile.load(path, sets=sets))
    text_err = str(err.value)
    assert "\n" not in text_err
    assert text_err.startswith(message.replace("job.yaml", str(path))) or (
        message.replace("job.yaml", str(path)) in text_err
    ), text_err


def test_the_longest_job_name_renders_pods_the_api_accepts(tmp_path: Path) -> None:
    """A 50-character name (the limit ``parse_job`` keeps) still gives pod and Service names
    ``<name>-worker-<i>`` that are DNS-1035 labels of at most 63 characters, the rule the
    operator's webhook applies to the job's own name (``NameIsDNS1035Label``,
    ``pkg/webhooks/pytorch/pytorchjob_webhook.go``, kubeflow/trainer v1.9.4)."""
    import re

    name = "a" + "-b" * 24 + "9"
    assert len(name) == 50
    job = jobfile.load(_write(tmp_path, DEV), name=name)
    w = job_workloads(job)
    rendered = pj.pytorchjob(w.job, w.etcd.host)
    assert rendered["metadata"]["name"] == name
    workers = rendered["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"]
    for i in range(workers):
        pod = f"{name}-worker-{i}"
        assert len(pod) <= 63 and re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", pod)


def test_llama_cookbook_spellings_pass_through_to_training(tmp_path: Path) -> None:
    """A job file takes the seed's flags as llama-cookbook spells them (`--fsdp_config.pure_bf16`,
    `--lora_config.r`, training.cookbook's table); the training parser reads them back with their
    meaning. Without this, pasting the seed's command into `args:` fails flag by flag."""
    from training.config import parse_args

    text = DEV + "  fsdp_config.pure_bf16: false\n  lora_config.r: 4\n  use_peft: true\n"
    job = jobfile.load(_write(tmp_path, text))
    assert job.extra_args[1:] == (
        "--fsdp_config.pure_bf16=False",
        "--lora_config.r=4",
        "--use_peft=True",
    )
    cfg = parse_args(list(job.extra_args))
    assert (cfg.pure_bf16, cfg.lora_r, cfg.use_peft) == (False, 4, True)


def test_a_missing_file_names_the_examples(tmp_path: Path) -> None:
    with pytest.raises(jobfile.JobFileError, match=r"no such job file \(examples: jobs/examples"):
        jobfile.load(tmp_path / "nope.yaml")


def test_the_jobs_package_imports_no_pulumi_and_no_torch() -> None:
    """A laptop that submits jobs needs neither the Pulumi SDK nor torch (a fresh interpreter:
    other tests have imported both)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import jobs.cli, jobs.local.backend, jobs.local.worker, jobs.cluster.backend, jobs.cluster.kube, jobs.backends\n"
        "jobs.cli._parser()\n"
        "bad = sorted({m.split('.')[0] for m in sys.modules} & {'pulumi', 'torch'})\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=EXAMPLES.parents[1],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == ""


def test_a_job_that_cannot_fit_or_names_no_repo_is_refused() -> None:
    """The planner's peak memory per GPU (``planner.fit``) refuses a micro-batch of 1,000,000
    x 4,096 tokens on p5-16's 80 GiB H100s in one line naming batchSize, while the shipped
    layout (the planner's recommendation, micro-batch 3 x 4,096) loads; a model that cannot be a Hugging Face repo id
    ('üñí', huggingface_hub's validate_repo_id rules) is refused naming model."""
    example = Path(__file__).resolve().parents[2] / "jobs" / "examples" / "p5-16.yaml"
    assert jobfile.load(example).batch_size == 3
    with pytest.raises(jobfile.JobFileError) as err:
        jobfile.load(example, sets=["batchSize=1000000"])
    line = str(err.value)
    at = 1 + example.read_text().splitlines().index("batchSize: 3")
    assert line.startswith(f"{example}:{at}: batchSize: batchSize 1000000 x contextLength 4096")
    assert "does not fit" in line and "a H100-SXM-80GB has 80.0 GiB" in line
    with pytest.raises(jobfile.JobFileError) as err:
        jobfile.load(example, sets=["model=üñí"])
    at = 1 + [n.split(":")[0] for n in example.read_text().splitlines()].index("model")
    assert str(err.value).startswith(f"{example}:{at}: model: 'üñí' is not a Hugging Face repo id")


def test_a_cluster_jobs_data_path_is_a_path_on_the_pods(tmp_path: Path) -> None:
    """A cluster job names its dataset where the pods see it (the shared file system, e.g.
    /checkpoints/data/train.jsonl): render and submit never look it up on this machine's disk,
    but refuse a relative path in one line; a local run still checks the file here. Without
    this, a dataset on FSx could not be named at all ("no such file" at render)."""
    text = DEV.replace("dataset: samsum_sample", "dataset: custom")
    text += "  data_path: /checkpoints/data/train.jsonl\n"
    job = jobfile.load(_write(tmp_path, text))
    w = job_workloads(job)  # a cluster job: nothing read from this machine's disk
    assert "--data_path=/checkpoints/data/train.jsonl" in pj.train_command(w.job)
    with pytest.raises(jobfile.JobFileError, match=r"args.data_path: no such file"):
        job_workloads(job, local_paths=True)
    relative = jobfile.load(_write(tmp_path, text.replace("/checkpoints/data/", "data/")))
    with pytest.raises(jobfile.JobFileError) as err:
        job_workloads(relative)
    assert "a path the pods see" in str(err.value) and "\n" not in str(err.value)
