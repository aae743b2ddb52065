"""`ablate sweep`: run a sweep's runs on this machine, K at a time, each in a process of its own.

A sweep expands (purely) into runs; each run has a folder named by its config hash (records.run_folder).
The launcher reads each folder's status and:

* skips `done` runs, and `failed` / `diverged` ones unless asked to retry them;
* resumes a `running` run whose process is gone (train_run continues from `checkpoints/last.ckpt`);
* takes an exclusive, non-blocking `flock` on `<run>/.lock` before starting a run, and hands that lock to the
  training process (an inherited descriptor), so the lock is held as long as either of them lives. Two sweep
  processes on the same output folder therefore never train the same run at once; a run whose lock is held
  elsewhere is skipped and reported as running elsewhere. `ablate train` takes the same lock.
* starts `python -m ablations.cli train --config <run>/config.yaml --run-dir <run>` (an argv list), with
  `OMP_NUM_THREADS` / `MKL_NUM_THREADS` = cores // K, its own share of the cores (`ABLATE_CPUS`, applied by
  `ablate train` with `os.sched_setaffinity`), and one GPU per slot when CUDA is there; output appends to
  `<run>/train.log`;
* records a run whose process exits without a `done` / `diverged` record as `failed`, with the reason and
  the tail of its log, and carries on with the others;
* on Ctrl-C or SIGTERM stops its training processes (SIGTERM, then SIGKILL after a grace period); they are
  left `running` with no process, i.e. stale, and resume the next time the sweep is launched.

`--gpus-per-run G` (G > 1): each slot gets G GPUs (CUDA_VISIBLE_DEVICES "0,1") and the run trains with Lightning
DDP over them (`ablate train --devices G`); without CUDA, G CPU processes over gloo.

`--launcher slurm` (`slurm.submit_sweep`): the same selection (`select` / `claim`: skip finished runs and runs locked or
queued elsewhere, reset failed ones on --retry-failed) but the runs are submitted as one submitit job array, one
task per run, each running `TrainJob` (train_run in-process, taking the run's lock itself when it starts); the
launcher prints the job ids and returns, or with --wait waits and reports as above.

The package, bottom up: `processes` (slots of cores and GPUs, the training process's command, environment, log
and stop; shared with `ablate search`), `plan` (the runs of a sweep, their selection and claim, the report),
`local` (the launcher here: dry run, live view, `run_sweep`) and `slurm` (one submitit job array).
"""
