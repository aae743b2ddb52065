"""`ablate search`: hyperparameter search with optuna around one sweep row, each trial a training process.

A search file (YAML, data) names a sweep and its base row, a scale, the metric and the parameters to search:

    name: tiny_search
    sweep: table3.yaml            # relative to this file's folder, else to the current folder
    row: base
    scale: tiny
    metric: dev_bleu              # dev_bleu or dev_f1 (parsing) (maximize), dev_loss or dev_ppl (minimize)
    direction: maximize           # optional; must agree with the metric
    budget: 8                     # trials, unless --trials says otherwise
    pruner: {type: median, n_startup_trials: 2, n_warmup_steps: 0}   # or {type: none}
    params:
      train.warmup_steps: {type: int, low: 50, high: 400}
      train.lr_scale: {type: float, low: 0.25, high: 2.0, log: true}
      P_drop: {type: float, low: 0.0, high: 0.3}
      positional: {type: categorical, choices: [sinusoidal, rope]}

Parameter keys are what `ablations.sweep.canonical_key` accepts; their values are in the run's own units (they
apply last, after the scale preset, like `ablate train --set`). Everything is validated, the bounds of every
parameter included (each must give a valid run config), before a study is created or anything trains.

How a search runs:

* The study is created once, by the command itself, before any worker starts (two workers creating a fresh
  sqlite study at once crash). Storage: `sqlite:///<out>/<name>.db` by default; `journal:PATH` or a path
  ending in `.journal` is an append-only `JournalStorage` file (for shared filesystems); any other URL
  (`postgresql://...`) is an SQLAlchemy URL for `RDBStorage`. The pruner is not stored by optuna: its spec
  is kept in the study's user attributes and every process that loads the study (workers, training
  processes) builds the same pruner from it.
* `--workers K` starts K worker processes (multiprocessing spawn); each loops: ask a trial, resolve its run
  config (`ablations.sweep.resolve(sweep, row, scale, seed, sets=params)`), train it as a subprocess
  (`python -m ablations.cli train --config C --run-dir <out>/<name>/trial-<n>-<run id>`), and tell the result.
  Counting and asking happen under a file lock (`<out>/.<name>.lock`), so the study ends with exactly N
  trials, none lost or duplicated, and no two asks run at once (optuna's RDB storage numbers a new trial by
  counting the rows before it, which two concurrent transactions on PostgreSQL may each do without seeing the
  other's row). The lock covers the workers of every search sharing `<out>` (one host, or a filesystem
  with working flock); workers on other hosts sharing only a database are not counted under it.
* The training process gets `ABLATE_OPTUNA_STORAGE`, `ABLATE_OPTUNA_STUDY` and `ABLATE_OPTUNA_TRIAL` (the
  trial number); `ablate train` passes `trial.optuna_callbacks_from_env()` to train_run: a Lightning callback
  that reports the monitored dev metric (`dev/bleu`, `dev/loss`, `dev/ppl`) at each validation with the
  global step as the step, and when the pruner says so stops training with exit code 77 (`PRUNED_EXIT`).
* Exit 77 -> the trial is told PRUNED; exit 0 with a `done` record and a finite metric -> COMPLETE with the
  metric from `<run>/metrics.json`; anything else (a crash, a kill, divergence) -> FAIL, the reason kept in
  the trial's user attributes and the run's metrics.json.
* Samplers: TPE (`--sampler tpe`, seeded with `sampler_seed` + the worker's index, constant liar so that
  parallel workers spread out), or `--sampler grid`: every combination of the (categorical only) choices is
  enqueued once, in product order, and workers pop them (optuna's GridSampler run by two workers in parallel
  duplicated a point); `--trials` larger than the grid runs the grid.
* Ctrl-C / SIGTERM: each worker stops its training process and tells its trial FAIL ("interrupted"); the
  command exits 130. Finished trials of every state count toward N when the search is run again.
* At the end: the best trial is printed and `<out>/<name>_best.yaml` written, a sweep file whose `base` is
  the sweep's base, the row's overrides and the best parameters (keys that a scale rescales are converted
  back to paper units), with one row `best`; `scales.yaml` is copied beside it when there is none, so that
  `ablate sweep <out>/<name>_best.yaml --scale S` trains exactly the best trial's config (checked by run id).

Running the same command again continues the study (N counts every trial in it). A trial left RUNNING by a
worker of this host that no longer exists is marked FAIL (stale) when a search starts.

The package, bottom up: `spec` (the search file), `study` (storage, sampler, pruner, the study, and how a
training process finds its trial), `trial` (the training side: the pruning callback; it imports Lightning),
`workers` (ask, train, tell; the training processes through `ablations.launch.processes`) and `command` (the
command: create or continue the study, start the workers, write the best sweep).
"""
