"""Fine-tune a causal LM with FSDP2: `torchrun --nproc_per_node N -m training.finetune --enable_fsdp ...`

The loop reads top to bottom: `Trainer(cfg, env)` sets up (data, model, sharding, optimizer,
checkpoint to resume from), `fit()` trains and validates epoch by epoch, `finish()` exports and
summarises. Flags are llama-recipes' (see training.config); bad input stops before any work with
one line `eks-fsdp train: error: ...` (training.errors) and exit status 2.

Exit status (docs/adr/0004-preemption-semantics.md): 0 only when training is complete; 143 when a
SIGTERM stopped it (this pod is going away, or torchrun restarts the group): every rank stops
at the same step boundary, takes an emergency checkpoint only if it fits the time torchrun
leaves before its SIGKILL, and exits 143 so that torchrun restarts the surviving group and the
training operator never counts a stopped worker as a successful one; 1 on any other failure (a
collective that timed out on a dead or hung peer), without waiting for a clean teardown.

Invariant: the gradient of every optimizer step is that of the sum of token losses of the GLOBAL
batch divided by its number of label tokens (counted over all ranks and micro-batches before the
backward pass), so any world size, sharding or accumulation split gives the same update.
"""

from __future__ import annotations

import functools
import gc
import math
import os
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from training import cookbook, deadline, errors, gc_policy
from training.config import ConfigError, TrainConfig, parse_args
from training.step import build_optimizer, clip_grads, token_loss_sum
from training.tracking.hooks import RunHooks

if TYPE_CHECKING:
    import torch
    from torch.distributed.checkpoint.stateful import Stateful

    from training.dist import DistEnv

PREEMPTED_EXIT = 143
"""Exit status of a worker stopped by SIGTERM (128 + 15, the shell's convention): non-zero, so
torchrun restarts the group and the training operator (v1.9, which marks an elastic job
Succeeded as soon as one worker exits 0) does not end the job."""
FAILED_EXIT = 1
"""Exit status after an unexpected error (a collective timeout on a dead peer, say)."""


def main(argv: Sequence[str] | None = None, *, freeze_libraries: bool = False) -> int:
    """Parse flags, train, return the exit status (2 for bad input). ``freeze_libraries``: the
    program's entry point (``python -m training.finetune``, what torchrun starts) moves the
    imported libraries to Python's permanent generation before the run creates anything
    (``training.gc_policy.freeze_libraries``); a caller's own heap is left alone."""
    try:
        cfg = parse_args(argv)
    except ConfigError as e:
        return _fail(e)
    from training.checkpoint import CheckpointError
    from training.data import DataError
    from training.dist import distributed, world_from_env
    from training.model import ModelError
    from training.parallelize import ParallelDims, ParallelError
    from training.s3.check import S3AccessError, check_locations

    rank, world, _, local_world = world_from_env()
    try:  # a layout this world cannot take: before the process group and the model libraries
        ParallelDims.from_config(cfg, world, local_world)
        cookbook.check_world(cfg, world)  # --one_gpu
        check_locations(cfg)  # s3:// flags: region, credentials, bucket reachable
    except (ParallelError, cookbook.CookbookError, S3AccessError) as e:
        return _fail(e, rank)
    if freeze_libraries:
        gc_policy.freeze_libraries()

    with distributed() as env:
        if cfg.preflight:  # every (re)start checks the nodes it got, before step 1
            from training.preflight import gate
            from training.s3.transfer import OutputDir

            out = str(OutputDir(cfg.output_dir).local)  # s3://: its local staging folder
            if (status := gate(cfg.preflight_expect, out, env.device)) != 0:
                return status
        error = None
        try:
            trainer = trainer_class(cfg)(cfg, env)
        except (CheckpointError, ConfigError, DataError, ModelError, ParallelError) as e:
            error = str(e)
        if error is not None:
            gc.collect()  # a half-built trainer goes while the process group is alive
            return _fail(error, env.rank)
        try:
            preempted = trainer.fit()
            trainer.finish(preempted)
            status = trainer.deadline.exit_status(preempted, PREEMPTED_EXIT)
        except Exception:
            # A peer is dead or hung: the process group cannot be torn down cleanly, and a
            # background checkpoint thread waiting on it would keep the process alive. Exit now,
            # non-zero, so that torchrun restarts the group.
            traceback.print_exc(file=sys.__stderr__)  # not a redirected sys.stderr: we exit now
            sys.stdout.flush()
            if sys.__stderr__ is not None:
                sys.__stderr__.flush()
            os._exit(FAILED_EXIT)
        # Free the sharded model, its meshes and the checkpoint state while the process group
        # is alive: collected after it is destroyed, they can abort the process at exit.
        del trainer
        gc.collect()
    return status


def trainer_class(cfg: TrainConfig) -> type[Trainer]:
    """The trainer of --method: `Trainer` (sft) or `training.dpo.PreferenceTrainer` (dpo)."""
    return _preference_trainer() if cfg.method == "dpo" else Trainer


@functools.cache
def _preference_trainer() -> type[Trainer]:
    from training.dpo import PreferenceSteps

    class PreferenceTrainer(PreferenceSteps, Trainer):
        """`Trainer` on preference pairs (training.dpo)."""

    return PreferenceTrainer


def _fail(err: Exception | str, rank: int = 0) -> int:
    if rank == 0:  # every rank finds the same problem; one line is enough
        print(errors.line("train", err), file=sys.stderr, flush=True)
    return errors.USAGE_EXIT


class TrainerState:
    """Counters saved with every checkpoint (a `Stateful`)."""

    def __init__(self) -> None:
        self.step = 0
        self.epoch = 0
        self.tokens_seen = 0

    def state_dict(self) -> dict[str, int]:
        return {"step": self.step, "epoch": self.epoch, "tokens_seen": self.tokens_seen}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        self.step, self.epoch = int(sd["step"]), int(sd["epoch"])
        self.tokens_seen = int(sd["tokens_seen"])


class Trainer:
    """setup (here) -> fit -> finish."""

    def __init__(self, cfg: TrainConfig, env: DistEnv) -> None:
        import torch

        from training import checkpoint, cookbook_run
        from training.data import load_tokenizer, use_chat_template
        from training.dist import broadcast_object, checkpoint_group, device_type
        from training.lora import checkpoint_settings as lora_settings
        from training.metrics import (
            GOODPUT_FILE,
            Goodput,
            JsonlSink,
            Metrics,
            ProgressSink,
            peak_flops,
        )
        from training.model import build_empty, full_state_dict, materialize, model_spec
        from training.parallelize import (
            ParallelDims,
            build_mesh,
            parallelize,
            resolve_precision,
            uses_dropout,
        )
        from training.preference import checkpoint_settings as preference_settings
        from training.s3.transfer import OutputDir, local_model

        cfg, self.precision_note = resolve_precision(cfg, env.device)
        self.cfg, self.env = cfg, env
        self.deadline = deadline.CapacityDeadline.from_env(cfg)  # EKS_FSDP_CAPACITY_ENDS_AT
        torch.manual_seed(cfg.seed)
        self.dims = ParallelDims.from_config(cfg, env.world_size, env.local_world_size)

        # tokenizer and model config first: a wrong --model_name fails before any data work
        source = local_model(cfg.model_name)  # s3://: downloaded once per node (HF_HOME)
        rev = cfg.model_revision or None  # a hub commit pins reruns to the same weights
        self.tokenizer = load_tokenizer(
            cfg.tokenizer_name or source, None if cfg.tokenizer_name else rev
        )
        use_chat_template(self.tokenizer, cfg.chat_template)  # --chat_template: chats, export
        dtype = torch.bfloat16 if cfg.pure_bf16 else torch.float32
        self.spec = model_spec(source, len(self.tokenizer), cfg.context_length, dtype, revision=rev)

        # data
        self.data_notes: list[str] = []  # what the data left out, said once at the start
        self.batches, self.eval_data = self._build_data()

        # model: empty everywhere, adapters injected (--use_peft), sharded, filled from rank 0
        self.model = build_empty(self.spec)
        if cfg.freeze_layers:  # llama-cookbook's, on the empty model: FSDP2 keeps the flags
            cookbook_run.freeze_first_layers(self.model, cfg.num_freeze_layers)
        self.peft: Any = None  # the PeftModel around self.model (its config, the export)
        adapt = None
        if cfg.use_peft:
            from training import lora

            self.peft = lora.apply_lora(self.model, cfg, empty=True)
            adapt = functools.partial(lora.apply_lora, cfg=cfg, empty=False)
            if cfg.from_peft_checkpoint:  # rank 0 loads the folder; materialize broadcasts it
                adapt = cookbook_run.with_adapter(adapt, cfg.from_peft_checkpoint)
        self.mesh = build_mesh(self.dims, device_type())
        parallelize(self.model, self.mesh, cfg, self.dims)
        where = torch.device("cpu") if cfg.fsdp_cpu_offload and cfg.enable_fsdp else env.device
        weights = full_state_dict(self.spec, cfg.seed, adapt) if env.is_main else None
        materialize(self.model, self.spec, where, weights)
        del weights
        self.model.train()
        # Dropout (LoRA's) draws random numbers: each step's come from (seed, step, rank), so a
        # resumed run draws what the uninterrupted one did.
        self._step_seeded = uses_dropout(self.model)

        self.optimizer = build_optimizer(self.model, cfg)
        self.scheduler = torch.optim.lr_scheduler.StepLR(
            self.optimizer, step_size=1, gamma=cfg.gamma
        )
        self.state = TrainerState()

        # checkpoints
        self.ckpt_root = checkpoint.root_of(cfg)  # a folder or an s3:// location
        self.stateful: dict[str, Stateful] = {
            "app": checkpoint.ModelOptimizerState(
                self.model, self.optimizer, trainable_only=cfg.use_peft
            ),
            "scheduler": self.scheduler,
            "data": self.batches,
            "trainer": self.state,
            **self._extra_state(),
        }
        # the flags a checkpoint fits only with: recorded in meta.json, compared by --resume
        self._settings = {**lora_settings(cfg), **preference_settings(cfg)}
        self._revisions = checkpoint.revisions_of(cfg)  # meta.json's, checked on resume
        self.resumed_from: checkpoint.Location | None = None
        self._saved_at: tuple[int, int] | None = None
        if env.is_main:  # writes that never finished (a killed pod, a cut-off emergency save)
            checkpoint.prune(self.ckpt_root)
        self.checkpointer = checkpoint.Checkpointer(
            self.ckpt_root,
            self.stateful,
            use_async=cfg.async_checkpoint,
            group=checkpoint_group(),
        )
        if cfg.resume:
            latest = checkpoint.resume_point(
                self.ckpt_root, required=cfg.resume_required, group=self.checkpointer.group
            )
            if latest is not None:
                checkpoint.load(latest, self.stateful, self._settings, self._revisions)
                self.resumed_from = latest
                self._saved_at = (self.state.step, self.state.epoch)
        self.stop = checkpoint.StopSignal()
        self.gc = gc_policy.GarbageCollection(cfg.gc_freq)

        # metrics
        self.outputs = OutputDir(cfg.output_dir)  # s3://: staged locally, uploaded by finish
        self.out_dir = self.outputs.local
        self.total_steps = self._planned_steps()
        self.metrics = Metrics()
        ledger: Goodput | None = None
        if env.is_main:
            self.outputs.prepare(cfg.resume)  # s3:// and resuming: the uploaded metrics
            if self.outputs.uri is not None:  # pushed with every checkpoint, not only at the end
                self.checkpointer.after_publish = self.outputs.push
            resume_step = self.state.step if cfg.resume else None
            jsonl = JsonlSink(self.out_dir / "metrics.jsonl", resume_step)
            self.metrics.add(jsonl)
            self.metrics.add(
                ProgressSink(self.total_steps, cfg.log_every, self.state.step, bar=cfg.progress)
            )
            ledger = Goodput.resume(self.out_dir / GOODPUT_FILE, jsonl) if cfg.resume else None
            ledger = ledger or Goodput(started_at=time.time())
            ledger.save(self.out_dir / GOODPUT_FILE)
        goodput = broadcast_object(ledger)
        assert goodput is not None  # rank 0 always builds one
        self.goodput: Goodput = goodput
        if cfg.metrics_port:  # Prometheus exporter: local rank 0 of every node serves
            from training.prometheus import prometheus_sink_for_rank

            try:
                sink = prometheus_sink_for_rank(cfg.metrics_port)
            except OSError as e:
                raise ConfigError(f"--metrics_port {cfg.metrics_port}: {e.strerror or e}") from e
            if sink is not None:
                self.metrics.add(sink)
        self.peak_flops = peak_flops(env.device)
        from training.model import flops_per_token, num_params

        self.n_params = num_params(self.model)
        self.n_trainable = sum(p.numel() for p in self.model.parameters() if p.requires_grad)
        lora = self.n_trainable if cfg.use_peft else None  # frozen base: 4 N + 6 N_adapters
        self.flops_per_token = flops_per_token(self.spec.config, cfg.context_length, lora)
        self.history: dict[str, list[float]] = {
            "epoch_loss": [],
            "epoch_time": [],
            "eval_loss": [],
            "ckpt_stall": [],
        }
        self.train_time = 0.0
        self.train_tokens = 0
        self._rows: list[
            tuple[int, dict[str, Any]]
        ] = []  # logged steps whose figures wait on the device
        self._first_step = self.state.step + 1
        self._last_save_t = time.monotonic()
        self._stall_to_log: float | None = None
        self.hooks = RunHooks.build(self)  # --tracker, --use_profiler, --flop_counter, ...
        self._announce()

    def _data_kinds(self) -> tuple[Any, Any, Any]:
        """(rows of a split, the training batch order, the validation batches): token
        sequences here; a method with other rows (``training.dpo``: preference pairs) gives its
        own, called alike."""
        from training.data import DistributedBatches, build_dataset, eval_batches

        return build_dataset, DistributedBatches, eval_batches

    def _build_data(self) -> tuple[Any, Any]:
        """(this rank's training batches, its validation batches or None)."""
        build, train_batches, eval_batches = self._data_kinds()
        cfg, env, pad_id = self.cfg, self.env, self.tokenizer.pad_token_id
        batches = train_batches(
            build(cfg, self.tokenizer, "train", self.data_notes),
            micro_batch_size=cfg.batch_size_training,
            grad_accum=cfg.gradient_accumulation_steps,
            rank=env.rank,
            world_size=env.world_size,
            seed=cfg.seed,
            shuffle=True,
            pad_id=pad_id,
            num_workers=cfg.num_workers_dataloader,
        )
        if not cfg.run_validation:
            return batches, None
        return batches, eval_batches(
            build(cfg, self.tokenizer, "validation", self.data_notes),
            batch_size=cfg.val_batch_size,
            rank=env.rank,
            world_size=env.world_size,
            pad_id=pad_id,
            max_steps=cfg.max_eval_step,
        )

    def _extra_state(self) -> dict[str, Stateful]:
        """What else a checkpoint holds (a method's own state); nothing for SFT."""
        return {}

    def _summary_extra(self) -> dict[str, Any]:
        """What else summary.json says (a method's own figures); nothing for SFT."""
        return {}

    def _unit(self) -> str:
        """What one training example is, for the start-up line."""
        return f"train sequences of {self.cfg.context_length} tokens"

    # ------------------------------------------------------------------------------------------
    def fit(self) -> bool:
        """Train until num_epochs / max_train_step; returns True when stopped by SIGTERM."""
        self.stop.install()
        try:
            with self.gc.paused():  # no automatic collection mid-step: no rank straggles
                return self._train()
        finally:
            self.stop.uninstall()
            self.hooks.close()

    def _train(self) -> bool:
        """The loop of `fit`: epochs, steps, validation and checkpoints."""
        import torch

        from training import cookbook_run
        from training.dist import set_collective_timeout

        cfg, st = self.cfg, self.state
        while st.epoch < cfg.num_epochs and not self._step_limit_reached():
            self.batches.set_epoch(st.epoch)
            t_epoch, losses = time.perf_counter(), []
            t_last = time.perf_counter()
            for micro_batches in self.batches:
                if self._step_seeded:
                    step_seed = (cfg.seed * 1_000_003 + st.step) * self.env.world_size
                    torch.manual_seed(step_seed + self.env.rank)
                with self.hooks.step():  # --use_profiler, --flop_counter
                    out = self.train_step(micro_batches)
                self.gc.step(st.step + 1)  # part of the step's measured time
                now = time.perf_counter()
                out["step_time_s"] = now - t_last
                st.step += 1
                st.tokens_seen += out["tokens"]
                losses.append(out["loss"])
                if st.step == self._first_step:  # loading and warm-up are behind us
                    set_collective_timeout(cfg.collective_timeout_s)
                self._log(out)
                if out["stop"]:
                    self._settle()
                    self._end_epoch_stats(losses, t_epoch)
                    if self.deadline.reached:  # the capacity ends: checkpoint, exit 0
                        return self.deadline.stop(self)
                    self._stop_on_signal()
                    return True
                self.checkpointer.poll()
                if self._checkpoint_due(out["checkpoint_due"]):
                    self.save()
                if self._step_limit_reached():
                    break
                t_last = time.perf_counter()
            trained, epoch_done = st.epoch, self.batches.remaining_steps() == 0
            self._end_epoch_stats(losses, t_epoch)
            if epoch_done:
                st.epoch += 1
                self.scheduler.step()
            if cfg.run_validation:
                self.history["eval_loss"].append(self.validate(trained))
            cookbook_run.save_full_state(self, trained)  # --checkpoint_type FULL_STATE_DICT
            self.save()
        self._settle()
        t0 = time.monotonic()
        self.checkpointer.wait()  # the last checkpoint is on disk before the exit
        if self.history["ckpt_stall"]:
            self.history["ckpt_stall"][-1] += time.monotonic() - t0
        return False

    def _checkpoint_due(self, time_vote: bool) -> bool:
        """Step interval, or the time interval as this step's vote decided it (`_vote`): the
        same answer on every rank, without a collective of its own."""
        cfg = self.cfg
        due = bool(cfg.checkpoint_every) and self.state.step % cfg.checkpoint_every == 0
        return due or time_vote

    def _stop_on_signal(self) -> None:
        """SIGTERM seen by some rank: finish the write in flight, take an emergency checkpoint if
        it fits before torchrun's SIGKILL on every rank, then let the caller exit 143."""
        from training import checkpoint
        from training.dist import all_reduce_max

        st = self.state
        self.checkpointer.wait()
        budget = checkpoint.shutdown_timeout_s()
        # survivors (no SIGTERM of their own) have all the time in the world: the minimum wins
        (neg_left,) = all_reduce_max([-min(self.stop.seconds_left(budget), 1e18)], self.env.device)
        left = -neg_left
        estimate = self.checkpointer.write_s or self.cfg.checkpoint_write_estimate_s
        if self._saved_at == (st.step, st.epoch):
            what = f"checkpoint step {st.step} already written"
        elif checkpoint.emergency_checkpoint_fits(left, estimate):
            self.save()
            self.checkpointer.wait()
            what = (
                f"emergency checkpoint step {st.step} written in {self.checkpointer.write_s:.1f} s"
            )
        else:
            latest = checkpoint.latest_complete(self.ckpt_root)
            what = (
                f"no time for an emergency checkpoint ({left:.0f} s left, a write takes "
                f"~{estimate:.0f} s); the group resumes from {latest.name if latest else 'scratch'}"
            )
        if self.env.is_main:
            print(
                f"SIGTERM: stopped at step {st.step}; {what}; exiting {PREEMPTED_EXIT}",
                flush=True,
            )

    def train_step(self, micro_batches: list[dict[str, torch.Tensor]]) -> dict[str, Any]:
        """One optimizer step over this rank's micro-batches; returns global figures.

        No host sync (CUDA): the global token counts come from the data order every rank holds
        (`DistributedBatches.step_token_counts`), loss and grad norm stay on the device
        ("loss", "grad_norm" are 0-d tensors; `_log` fetches them every --log_every steps), and
        the stop flag and the time-checkpoint flag are one CPU all-reduce once the step is
        launched (`_vote`): a SIGTERM is acted on at the end of the step in flight when it came. `benchmarks/step_anatomy.py` counts the syncs; a test requires 0.
        """
        import torch

        from training.data import to_device
        from training.dist import all_reduce_sum_tensor
        from training.parallelize import set_gradient_sync

        dev = self.env.device
        g_label, g_input = self.batches.step_token_counts()
        # FSDP averages gradients over ranks: scale so that the result is sum / global count.
        scale = self.env.world_size / max(g_label, 1)
        loss_sum = torch.zeros((), device=dev, dtype=torch.float64)
        for i, mb in enumerate(micro_batches):
            last = i == len(micro_batches) - 1
            set_gradient_sync(self.model, self.dims, last_micro_batch=last)
            batch = {k: to_device(mb[k], dev) for k in ("input_ids", "labels")}
            tok_loss = token_loss_sum(self.model, batch)
            (tok_loss * scale).backward()
            loss_sum += tok_loss.detach().double()
        grad_norm = self._clip_grads()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        all_reduce_sum_tensor(loss_sum)  # on the device, no wait
        stop, checkpoint_due = self._vote()  # a CPU collective: the GPU runs on meanwhile
        return {
            "loss": loss_sum / max(g_label, 1),
            "grad_norm": grad_norm,
            "tokens": g_input,
            "label_tokens": g_label,
            "stop": stop,
            "checkpoint_due": checkpoint_due,
            "lr": self.optimizer.param_groups[0]["lr"],
        }

    def _vote(self) -> tuple[bool, bool]:
        """This step's vote, decided for all ranks: (stop, checkpoint time due).

        Every rank votes [SIGTERM or capacity end (training.deadline), checkpoint time due] and
        the element-wise MAX decides for all (clocks differ: any rank's vote counts), so every
        rank stops or checkpoints after the same step. The vote is a CPU tensor (gloo, also
        under NCCL: the process group is "cpu:gloo,cuda:nccl") all-reduced once the step's
        kernels are all launched: the wait is the CPU's alone (the ranks' launches meeting),
        the GPU never waits for it and keeps running the queued step. A SIGTERM is therefore
        acted on at the end of the step in flight when it came, the one-step allowance of the
        preemption budget (workloads.specs.preemption.STEP_ALLOWANCE_S).
        """
        import torch
        import torch.distributed as dist

        from training.dist import host_only

        every_s = self.cfg.checkpoint_every_s
        mine = [
            self.deadline.vote(self.stop.requested, self.checkpointer.write_s),
            float(bool(every_s) and time.monotonic() - self._last_save_t >= every_s),
        ]
        if self.env.world_size > 1:
            flags = torch.tensor(mine, dtype=torch.float64)
            dist.all_reduce(flags, op=dist.ReduceOp.MAX)
            mine = host_only(flags).tolist()
        return self.deadline.decided(mine[0]), mine[1] > 0

    def _settle(self) -> None:
        """Write the metric rows still held (end of training or a stop)."""
        self._flush_rows()

    def _clip_grads(self) -> torch.Tensor:
        """The global gradient norm (a 0-d tensor on the device), clipping if asked."""
        cfg = self.cfg
        return clip_grads(
            self.model, cfg.gradient_clipping_threshold if cfg.gradient_clipping else None
        )

    def validate(self, epoch: int = 0) -> float:
        """Mean token loss over the validation split (all ranks), as llama-recipes' eval loss."""
        import torch

        from training.data import IGNORE_INDEX, to_device
        from training.dist import all_reduce_sum, host_only

        assert self.eval_data is not None
        self.model.eval()
        # Summed on the device and read once, not a host sync per batch; the label count comes
        # from the host batches (a CPU tensor that waits for no device).
        total = torch.zeros((), dtype=torch.float64, device=self.env.device)
        count = 0
        with torch.no_grad():
            for mb in self.eval_data:
                batch = {k: to_device(v, self.env.device) for k, v in mb.items()}
                total += self.hooks.eval_batch(token_loss_sum(self.model, batch).double(), mb)
                count += int(host_only((mb["labels"][:, 1:] != IGNORE_INDEX).sum()))
        self.model.train()
        g_total, g_count = all_reduce_sum([float(total), count], self.env.device)
        loss = g_total / max(g_count, 1.0)
        self.hooks.evaluated(loss, self.state.step)
        if self.env.is_main:
            print(
                f"epoch {epoch}: eval loss {loss:.4f}, perplexity {_exp(loss):.2f}",
                flush=True,
            )
        return loss

    def save(self) -> None:
        """Checkpoint everything the run needs to continue (collective; may write in the
        background: `self.checkpointer.wait()` blocks until it is complete)."""
        if self._saved_at == (self.state.step, self.state.epoch):
            return  # nothing changed since the last checkpoint
        from training.checkpoint import REVISIONS, SETTINGS

        meta = {
            **self.state.state_dict(),
            "world_size": self.env.world_size,
            "model_name": self.cfg.model_name,
            "layout": self.dims.describe(),
            SETTINGS: self._settings,
            REVISIONS: self._revisions,
        }
        stall = self.checkpointer.save(self.state.step, meta)
        self.history["ckpt_stall"].append(stall)
        self._stall_to_log = stall
        self._last_save_t = time.monotonic()
        self._saved_at = (self.state.step, self.state.epoch)

    def finish(self, preempted: bool) -> None:
        """Export the model, write summary.json and the plot, print the summary (rank 0)."""
        import torch.distributed as dist

        from training.export import export_run
        from training.metrics import (
            GOODPUT_FILE,
            format_summary,
            peak_memory_bytes,
            plot_metrics,
            write_summary,
        )

        self.metrics.close()
        exported: list[tuple[str, Path]] = []
        if self.cfg.save_model and not preempted:
            exported = export_run(
                self.cfg, self.model, self.peft, self.spec, self.tokenizer, self.env.device
            )
        import torch

        peak = torch.tensor([peak_memory_bytes(self.env.device)], dtype=torch.float64)
        if dist.get_world_size() > 1:
            peak = peak.to(self.env.device)
            dist.all_reduce(peak, op=dist.ReduceOp.MAX)
        if not self.env.is_main:
            return
        h = self.history
        g = self.goodput
        g.save(self.out_dir / GOODPUT_FILE)
        summary = {
            "avg_train_loss": _mean(h["epoch_loss"]),
            "avg_train_prep": _mean([_exp(x) for x in h["epoch_loss"]]),
            "avg_eval_loss": _mean(h["eval_loss"]),
            "avg_eval_prep": _mean([_exp(x) for x in h["eval_loss"]]),
            "avg_epoch_time": _mean(h["epoch_time"]),
            "avg_checkpoint_time": _mean(h["ckpt_stall"]),
            "checkpoint_stall_s": [round(x, 4) for x in h["ckpt_stall"]],
            "checkpoint_write_s": self.checkpointer.write_s,
            "async_checkpoint": self.cfg.async_checkpoint,
            "tokens_per_s": self.train_tokens / self.train_time if self.train_time else 0.0,
            "peak_mem_bytes": int(peak.item()),
            "steps": self.state.step,
            "tokens_seen": self.state.tokens_seen,
            "world_size": self.env.world_size,
            "layout": self.dims.describe(),
            "params": self.n_params,
            "trainable_params": self.n_trainable,
            "preempted": preempted and not self.deadline.reached,
            "capacity_end": self.deadline.reached,
            **g.as_dict(),
            **self._summary_extra(),
            **({"data_notes": self.data_notes} if self.data_notes else {}),  # rows cut, left out
        }
        write_summary(self.out_dir / "summary.json", summary)
        self.hooks.finish(summary)
        jsonl = self.out_dir / "metrics.jsonl"
        if self.cfg.plot_metrics and jsonl.is_file():
            plot_metrics(jsonl, self.out_dir / "metrics.png")
        self.outputs.push()  # --output_dir s3://: metrics, goodput, summary, plot
        print(format_summary(summary, exported, self.ckpt_root, PREEMPTED_EXIT), flush=True)

    # ------------------------------------------------------------------------------------------
    def _log(self, out: dict[str, Any]) -> None:
        from training.metrics import peak_memory_bytes

        self.train_time += out["step_time_s"]
        self.train_tokens += out["tokens"]
        self.goodput.productive_s += out["step_time_s"]
        tps = out["tokens"] / out["step_time_s"] if out["step_time_s"] > 0 else 0.0
        row = {
            "epoch": self.state.epoch,
            "loss": out["loss"],  # a device tensor until _flush_rows
            "lr": out["lr"],
            "grad_norm": out["grad_norm"],  # likewise
            "tokens": out["tokens"],
            "label_tokens": out["label_tokens"],
            "tokens_per_s": tps,
            "step_time_s": out["step_time_s"],
            "world_size": self.env.world_size,
            "peak_mem_bytes": peak_memory_bytes(self.env.device),
            "time": time.time(),
            "goodput": self.goodput.ratio(),
            "restarts": self.goodput.restarts,
            "steps_redone": self.goodput.steps_redone,
        }
        row.update(out.get("extra", {}))  # a method's own figures (device tensors too)
        if self._stall_to_log is not None:  # the checkpoint taken after the previous step
            row["ckpt_stall_s"] = self._stall_to_log
            self._stall_to_log = None
        if self.peak_flops:
            achieved = tps * self.flops_per_token
            row["mfu"] = achieved / (self.peak_flops * self.env.world_size)
        self._rows.append((self.state.step, row))
        if (
            self.state.step % self.cfg.log_every == 0
            or out["stop"]
            or self._step_limit_reached()
            or self.batches.remaining_steps() == 0
        ):
            self._flush_rows()

    def _flush_rows(self) -> None:
        """Fetch the held steps' loss, grad norm (and any other device figure of the rows) in ONE
        device->host copy, then log them.

        metrics.jsonl still gets every step; a GPU waits for the host only once per --log_every
        steps (and at the end of an epoch, a SIGTERM or the step limit).

        Throughput is the interval's, as torchtitan's metrics do over the log interval: on a GPU
        a quiet step's wall time is only its launches (the device runs behind), and the wait
        for the device lands in this fetch. Each held row gets the interval's mean step time
        (the steps' times plus the wait), tokens/s and MFU, and the wait counts as training
        time (summary throughput, goodput).
        """
        import torch

        if not self._rows:
            return
        t0 = time.perf_counter()
        keys = [k for k, v in self._rows[0][1].items() if isinstance(v, torch.Tensor)]
        values = torch.stack(
            [torch.stack([r[k].to(r["loss"]) for k in keys]) for _, r in self._rows]
        ).tolist()
        wait = time.perf_counter() - t0
        self.train_time += wait
        self.goodput.productive_s += wait
        interval_s = sum(r["step_time_s"] for _, r in self._rows) + wait
        tps = sum(r["tokens"] for _, r in self._rows) / interval_s if interval_s > 0 else 0.0
        for (step, row), fetched in zip(self._rows, values, strict=True):
            row.update(zip(keys, fetched, strict=True))
            row["step_time_s"] = interval_s / len(self._rows)
            row["tokens_per_s"] = tps
            if "mfu" in row and self.peak_flops:
                row["mfu"] = tps * self.flops_per_token / (self.peak_flops * self.env.world_size)
            self.metrics.log(row, step)
        self._rows = []

    def _end_epoch_stats(self, losses: list[Any], t_epoch: float) -> None:
        import torch

        if losses:
            mean = torch.stack([torch.as_tensor(x, dtype=torch.float64) for x in losses]).mean()
            self.history["epoch_loss"].append(float(mean))
            self.history["epoch_time"].append(time.perf_counter() - t_epoch)

    def _step_limit_reached(self) -> bool:
        return bool(self.cfg.max_train_step) and self.state.step >= self.cfg.max_train_step

    def _planned_steps(self) -> int:
        total = self.batches.steps_per_epoch() * self.cfg.num_epochs
        return min(total, self.cfg.max_train_step) if self.cfg.max_train_step else total

    def _announce(self) -> None:
        if not self.env.is_main:
            return
        cfg = self.cfg
        resumed = (
            f", resumed from {self.resumed_from} at step {self.state.step}"
            if self.resumed_from
            else ""
        )
        print(
            f"model {cfg.model_name}: {self.n_params / 1e6:.2f} M parameters | "
            f"{self.dims.describe()} | world size {self.env.world_size} on {self.env.device.type}\n"
            f"data {cfg.dataset}: {len(self.batches.dataset)} {self._unit()}, "
            f"global batch {self.batches.global_batch_size} "
            f"({cfg.batch_size_training} x {self.env.world_size} ranks x "
            f"{cfg.gradient_accumulation_steps} accumulation), {self.total_steps} steps{resumed}",
            flush=True,
        )
        for line in [self.precision_note, *self.data_notes, *cookbook.notes(cfg)]:
            if line:
                print(line, flush=True)
        if self.peft is not None:
            from training.lora import describe

            print(describe(cfg, self.model), flush=True)


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def _exp(x: float) -> float:
    return math.exp(min(x, 700.0))


if __name__ == "__main__":
    sys.exit(main(freeze_libraries=True))
