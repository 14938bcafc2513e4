"""Experiment tracking, profiling and FLOP counting for the training loop.

`trackers` holds the three trackers (W&B, MLflow, TensorBoard) behind the metrics sink interface
(`log(metrics, step)`, `close()`); `hooks` holds `RunHooks`, the few calls the trainer makes for
`--tracker`/`--use_wandb`, `--use_profiler`, `--flop_counter` and `--save_metrics`. Nothing here
imports a tracker library at module level: only rank 0 imports the one asked for.
"""
