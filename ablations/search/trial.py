"""The training side of a trial: the Lightning callback that reports to the study and stops a pruned trial.

`ablate train` adds `optuna_callbacks_from_env()` to a run's callbacks: [] unless `ablate search` started it.
"""

from __future__ import annotations

import math
import os
import sys
import warnings
from typing import Mapping, Optional

from lightning.pytorch.callbacks import Callback

from .study import ATTR, PRUNED_EXIT, STORAGE_ENV, STUDY_ENV, TRIAL_ENV, load_study, numbered_trial, redact


class TrialPruned(SystemExit):
    """Raised in the training process when the pruner stops a trial: not an Exception, so train_run does not
    record it as a failure; Lightning tears down and re-raises it, and the process exits with PRUNED_EXIT."""

    def __init__(self, message: str) -> None:
        super().__init__(PRUNED_EXIT)
        self.message = message


def report_and_check(trial, value: float, step: int) -> bool:
    """Report an intermediate value; whether the pruner stops the trial. Non-finite values are not reported."""
    if math.isfinite(value):
        with warnings.catch_warnings():  # a resumed run re-validates a step it reported already: ignored
            warnings.simplefilter("ignore")
            trial.report(value, step)
    return trial.should_prune()


class OptunaPruning(Callback):
    """Reports `monitor` after each validation (step = global step) and stops a pruned trial (exit 77).

    optuna_integration's PyTorchLightningPruningCallback reports with step = epoch, and training here is
    step-based (several validations per epoch on a large corpus, or many epochs per validation on a small
    one), and it raises optuna.TrialPruned, an Exception that train_run would record as a failure; hence this
    small callback. Under DDP rank 0 reports and decides, and the decision is broadcast.
    """

    def __init__(self, trial, monitor: str) -> None:
        super().__init__()
        self.trial = trial
        self.monitor = monitor
        self.warned = False

    def on_validation_end(self, trainer, pl_module) -> None:
        if trainer.sanity_checking:
            return
        prune, value = False, None
        if trainer.is_global_zero:
            metric = trainer.callback_metrics.get(self.monitor)
            if metric is None:
                if not self.warned:
                    print(
                        f"optuna: {self.monitor!r} was not logged at this validation; nothing reported", file=sys.stderr
                    )
                    self.warned = True
            else:
                value = float(metric)
                try:
                    prune = report_and_check(self.trial, value, trainer.global_step)
                except Exception as error:  # an unreachable storage must not stop training
                    reason = redact(f"{type(error).__name__}: {error}", os.environ.get(STORAGE_ENV))
                    print(f"optuna: could not report to the study: {reason}", file=sys.stderr)
        prune = bool(trainer.strategy.broadcast(prune))
        if prune:
            message = f"pruned by optuna at step {trainer.global_step} ({self.monitor} = {value})"
            print(message, file=sys.stderr, flush=True)
            raise TrialPruned(message)


def trial_from_env(environ: Optional[Mapping[str, str]] = None):
    """(trial, monitored metric) of a training process started by `ablate search`; None otherwise."""
    environ = os.environ if environ is None else environ
    spec, name, number = environ.get(STORAGE_ENV), environ.get(STUDY_ENV), environ.get(TRIAL_ENV)
    if not (spec and name and number):
        return None
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = load_study(spec, name, sampler=optuna.samplers.RandomSampler())  # the stored pruner, no sampling here
    return numbered_trial(spec, study, int(number)), study.user_attrs.get(ATTR + "monitor", "dev/loss")


def optuna_callbacks_from_env(environ: Optional[Mapping[str, str]] = None) -> list:
    """The pruning callback of a trial started by `ablate search`; [] when not started by it."""
    found = trial_from_env(environ)
    if found is None:
        return []
    trial, monitor = found
    return [OptunaPruning(trial, monitor)]
