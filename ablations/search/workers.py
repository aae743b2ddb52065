"""The workers of a search: each asks a trial (under the ask lock), trains it in a process of its own, and tells
the study how it ended; K of them share one study."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from ..launch.processes import LOG_FILE, Slot, child_env, describe_exit, log_tail, stop_group, train_command
from ..records import CONFIG_FILE, blocking_lock, read_metrics, update_metrics, write_config
from .spec import Search, is_number, load_search
from .study import PRUNED_EXIT, STORAGE_ENV, STUDY_ENV, TRIAL_ENV, ask_lock, load_study, make_sampler


@dataclass(frozen=True)
class WorkerPlan:
    """What one worker needs, plain and picklable: the command spawns each worker process with it."""

    search_path: str
    scale: str
    storage: str
    out: str
    trials: int
    sampler: str
    slot: Slot  # the worker's index, and the threads, cores and GPU of its training processes
    sets: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    command: Callable[[Path, Path], list[str]] = train_command
    trial_timeout: Optional[float] = None


def _say(index: int, text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] worker {index}: {text}", flush=True)


def run_trial(search: Search, study, trial, plan: WorkerPlan) -> tuple[str, Optional[float], str]:
    """Train one asked trial in a subprocess; returns (state, value, note). Tells nothing."""
    params = dict(trial.params)
    config = search.config(params)
    run_id = config.run_id()
    run_dir = (Path(plan.out) / search.name / f"trial-{trial.number}-{run_id}").absolute()
    meta = {
        "sweep": search.name,
        "row": f"trial-{trial.number}",
        "group": search.row.id,
        "scale": search.scale.name,
        "run_id": run_id,
        "search": search.name,
        "base_sweep": search.sweep.name,
        "base_row": search.row.id,
        "trial": trial.number,
        "params": params,
    }
    write_config(run_dir, config, meta)
    trial.set_user_attr("run_dir", str(run_dir))
    trial.set_user_attr("run_id", run_id)
    argv = plan.command(run_dir / CONFIG_FILE, run_dir)
    with open(run_dir / LOG_FILE, "ab") as log:
        log.write(
            f"\n=== ablate search {search.name} trial {trial.number} worker {plan.slot.index} pid {os.getpid()} "
            f"{time.strftime('%Y-%m-%d %H:%M:%S')}: {' '.join(argv)}\n".encode()
        )
        log.flush()
        env = child_env(plan.slot, {STORAGE_ENV: plan.storage, STUDY_ENV: search.name, TRIAL_ENV: str(trial.number)})
        process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            code = process.wait(timeout=plan.trial_timeout)
        except subprocess.TimeoutExpired:
            stop_group(process)
            code = None
        except BaseException:  # interrupted: stop the training before leaving
            stop_group(process)
            raise
    record = read_metrics(run_dir) or {}
    if code == PRUNED_EXIT:
        note = next(
            (line for line in reversed(log_tail(run_dir / LOG_FILE)) if line.startswith("pruned by optuna")),
            "pruned by optuna",
        )
        update_metrics(run_dir, status="failed", reason=note, pruned=True, failed_at=time.time())
        return "pruned", None, note
    value = record.get(search.metric)
    if code == 0 and record.get("status") == "done" and is_number(value):
        for key in ("dev_loss", "dev_ppl", "dev_bleu", "test_bleu", "dev_f1", "test_f1", "steps", "wall_seconds"):
            if record.get(key) is not None:
                trial.set_user_attr(key, record[key])
        return "complete", float(value), f"{search.metric} = {value:.4g}"
    if code is None:
        reason = f"timed out after {plan.trial_timeout:g} s"
    elif code < 0:
        reason = describe_exit(code)
    elif record.get("status") == "diverged":
        reason = "diverged (dev loss not finite)"
    elif code == 0:
        reason = f"exit code 0 but status {record.get('status')!r} and {search.metric} = {value!r}"
    else:
        reason = record.get("reason") or describe_exit(code)
    if record.get("status") not in ("failed", "diverged"):
        update_metrics(
            run_dir, status="failed", reason=reason, log_tail=log_tail(run_dir / LOG_FILE), failed_at=time.time()
        )
    return "fail", None, reason


def _tell(study, trial, state: str, value: Optional[float], note: str) -> None:
    from optuna.trial import TrialState

    if state != "complete":
        trial.set_user_attr("reason", note[:500])
    if state == "complete":
        study.tell(trial, value)
    else:
        study.tell(trial, state=TrialState.PRUNED if state == "pruned" else TrialState.FAIL)


def worker_loop(plan: WorkerPlan) -> int:
    """One worker: ask (under the lock, while fewer than N trials exist), train, tell; repeat. Trials run."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    previous = signal.signal(signal.SIGTERM, raise_interrupt) if on_main_thread() else None
    try:
        return _worker_loop(plan)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _worker_loop(plan: WorkerPlan) -> int:
    from optuna.trial import TrialState

    search = load_search(plan.search_path, plan.scale, plan.sets)
    # Each worker its own sampler seed: equal seeds would draw the same startup trials in every worker.
    sampler = make_sampler(plan.sampler, search.sampler_seed + plan.slot.index)
    study = load_study(plan.storage, search.name, sampler=sampler)
    distributions = search.distributions()
    lock = ask_lock(plan.out, search.name)
    ran = 0
    while True:
        with blocking_lock(lock):
            started = sum(t.state != TrialState.WAITING for t in study.get_trials(deepcopy=False))
            if started >= plan.trials:
                break
            trial = study.ask(distributions)
            trial.set_user_attr("host", socket.gethostname())
            trial.set_user_attr("worker_pid", os.getpid())
        _say(plan.slot.index, f"trial {trial.number} started: {json.dumps(trial.params)}")
        try:
            state, value, note = run_trial(search, study, trial, plan)
        except KeyboardInterrupt:
            _tell(study, trial, "fail", None, "interrupted")
            _say(plan.slot.index, f"trial {trial.number} interrupted (FAIL)")
            raise
        except Exception as error:  # e.g. the run folder cannot be written: fail the trial, not the worker
            state, value, note = "fail", None, f"{type(error).__name__}: {error}"
        _tell(study, trial, state, value, note)
        ran += 1
        _say(plan.slot.index, f"trial {trial.number} {state.upper()}: {note}")
    return ran


def raise_interrupt(signum: int, frame: Any) -> None:
    """SIGTERM as Ctrl-C: the worker stops its training process and fails its trial."""
    raise KeyboardInterrupt


def worker_main(plan: WorkerPlan) -> None:
    try:
        worker_loop(plan)
    except KeyboardInterrupt:
        sys.exit(130)


def on_main_thread() -> bool:
    """Signal handlers can be set only there (a search run from a thread, e.g. a notebook's, sets none)."""
    return threading.current_thread() is threading.main_thread()
