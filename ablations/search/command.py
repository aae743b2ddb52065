"""`ablate search`: create or continue the study, run its workers, and write the best trial as a sweep file."""

from __future__ import annotations

import json
import multiprocessing
import shutil
import signal
import sys
from pathlib import Path
from typing import Any, Mapping, Optional

import yaml

from ..launch.processes import GRACE_SECONDS, make_slots, oversubscription_warning, train_command
from ..records import blocking_lock, write_atomic
from ..sweep import canonical_key, load_sweep, resolve, scales_for
from .spec import Search, load_search
from .study import (
    ask_lock,
    create_study,
    enqueue_grid,
    fail_stale_trials,
    grid_space,
    load_study,
    mask_url,
    redact,
    storage_spec,
)
from .workers import WorkerPlan, on_main_thread, raise_interrupt, worker_loop, worker_main


def best_sweep(search: Search, params: Mapping[str, Any]) -> dict[str, Any]:
    """A sweep document: the sweep's base, the row's overrides and the best params (paper units), row `best`."""
    base = {}
    for layer in (search.sweep.base, search.row.overrides):
        for key, value in layer.items():
            target = canonical_key(str(key), "base")
            for existing in [k for k in base if canonical_key(str(k), "base") == target]:
                del base[existing]
            base[key] = value
    for key, value in {**search.sets, **params}.items():
        for existing in [k for k in base if canonical_key(str(k), "base") == canonical_key(str(key), "params")]:
            del base[existing]
        base[key] = search.scale.in_paper_units(canonical_key(str(key), "params"), value)
    return {
        "name": f"{search.name}_best",
        "description": f"Best trial of search {search.name}: {search.sweep.name} row {search.row.id} at scale "
        f"{search.scale.name}, searched {', '.join(params)}",
        "seeds": list(search.sweep.seeds),
        "base": base,
        "rows": [{"id": "best", "group": "best", "overrides": {}}],
    }


def write_best(search: Search, study, out: Path) -> Optional[Path]:
    try:
        best = study.best_trial
    except ValueError:
        return None
    document = best_sweep(search, best.params)
    path = Path(out) / f"{search.name}_best.yaml"
    header = (
        f"# Written by `ablate search` from trial {best.number} of study {search.name!r}: "
        f"{search.metric} = {best.value:.6g} ({search.direction}).\n"
        f"# Params (run units at scale {search.scale.name}): {json.dumps(best.params)}\n"
        f"# Train it: ablate sweep {path} --scale {search.scale.name}\n"
    )
    write_atomic(path, header + yaml.safe_dump(document, sort_keys=False))
    scales_src = search.sweep.path.parent / "scales.yaml"
    scales_dst = path.parent / "scales.yaml"
    if not scales_dst.exists():
        shutil.copyfile(scales_src, scales_dst)
    elif scales_dst.read_bytes() != scales_src.read_bytes():
        print(f"note: {scales_dst} differs from {scales_src}; `ablate sweep {path}` uses the former", file=sys.stderr)
    # The sweep file must train exactly the best trial's config.
    sweep = load_sweep(path)
    scales = scales_for(path)
    if search.scale.name in scales:
        again = resolve(sweep, sweep.row("best"), scales[search.scale.name], search.seed)
        expected = best.user_attrs.get("run_id") or search.config(best.params).run_id()
        if again.run_id() != expected:
            print(
                f"warning: {path} at scale {search.scale.name} resolves to run {again.run_id()}, not the best "
                f"trial's {expected} (a value did not convert to paper units exactly)",
                file=sys.stderr,
            )
    return path


def summary(study) -> dict[str, int]:
    counts: dict[str, int] = {}
    for trial in study.get_trials(deepcopy=False):
        counts[trial.state.name] = counts.get(trial.state.name, 0) + 1
    return counts


def run_search(
    search_path: str | Path,
    trials: Optional[int] = None,
    storage: Optional[str] = None,
    workers: int = 1,
    scale: Optional[str] = None,
    out: str | Path = "runs/search",
    sampler: str = "tpe",
    trial_timeout: Optional[float] = None,
    sets: Optional[Mapping[str, Any]] = None,
) -> int:
    """`ablate search`: 0 when the study holds N finished trials and a best one; 1 otherwise; 130 if stopped."""
    import optuna
    from optuna.trial import TrialState

    if sampler not in ("tpe", "grid"):
        raise ValueError(f"--sampler {sampler!r}: expected tpe or grid")
    if workers < 1:
        raise ValueError(f"--workers {workers}: expected a positive integer")
    search = load_search(search_path, scale, sets)
    trials = trials if trials is not None else search.budget
    if trials is None or trials < 1:
        raise ValueError(f"--trials {trials}: expected a positive number of trials (or `budget:` in {search_path})")
    if sampler == "grid":
        grid_space(search)
    out = Path(out).absolute()
    spec = storage_spec(storage, out, search.name)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    out.mkdir(parents=True, exist_ok=True)
    try:
        study = create_study(search, spec, sampler)
    except ValueError:
        raise
    except Exception as error:  # e.g. the database cannot be reached: say so without its password
        reason = redact(f"{type(error).__name__}: {error}", spec)
        raise ValueError(f"storage {mask_url(spec)}: cannot create or load the study ({reason})") from None
    with blocking_lock(ask_lock(out, search.name)):
        stale = fail_stale_trials(study, spec)
        if sampler == "grid":
            allowed = enqueue_grid(study, search, trials)
            if allowed < trials:
                print(f"the grid has room for {allowed} trials in all; running {allowed}, not {trials}", flush=True)
                trials = allowed
    if stale:
        print(f"marked stale trial(s) {', '.join(map(str, stale))} failed (their worker is gone)", flush=True)
    before = sum(t.state != TrialState.WAITING for t in study.get_trials(deepcopy=False))
    print(
        f"search {search.name}: {search.sweep.name} row {search.row.id} at scale {search.scale.name}, "
        f"{search.metric} ({search.direction}), {trials} trials ({before} already in the study), {workers} worker(s), "
        f"sampler {sampler}, storage {mask_url(spec)}",
        flush=True,
    )
    slots = make_slots(workers)
    warning = oversubscription_warning(slots[:trials])
    if warning:
        print(warning, file=sys.stderr, flush=True)
    plans = [
        WorkerPlan(
            str(search.path),
            search.scale.name,
            spec,
            str(out),
            trials,
            sampler,
            s,
            dict(search.sets),
            train_command,
            trial_timeout,
        )
        for s in slots
    ]
    stopped = False
    if workers == 1:
        try:
            worker_loop(plans[0])
        except KeyboardInterrupt:
            stopped = True
    else:
        context = multiprocessing.get_context("spawn")
        processes = [
            context.Process(target=worker_main, args=(plan,), name=f"ablate-search-worker-{plan.slot.index}")
            for plan in plans
        ]
        previous = signal.signal(signal.SIGTERM, raise_interrupt) if on_main_thread() else None
        try:
            for process in processes:
                process.start()
            for process in processes:
                process.join()
        except KeyboardInterrupt:
            stopped = True
            for process in processes:
                if process.is_alive():
                    process.terminate()  # SIGTERM: the worker stops its training and fails its trial
            for process in processes:
                process.join(GRACE_SECONDS + 10)
                if process.is_alive():
                    process.kill()
                    process.join()
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
        crashed = [p.name for p in processes if p.exitcode not in (0, 130, -signal.SIGTERM)]
        if crashed:
            print(f"worker(s) {', '.join(crashed)} ended abnormally", file=sys.stderr)
    study = load_study(spec, search.name)
    with blocking_lock(ask_lock(out, search.name)):
        fail_stale_trials(study, spec)  # a worker that died mid-trial
    counts = summary(study)
    finished = sum(counts.get(s, 0) for s in ("COMPLETE", "PRUNED", "FAIL"))
    print(
        f"search {search.name}: {finished} finished trials ({', '.join(f'{n} {s.lower()}' for s, n in sorted(counts.items()))})",
        flush=True,
    )
    path = write_best(search, study, out)
    if path is None:
        print("no trial completed: no best trial", flush=True)
    else:
        best = study.best_trial
        print(
            f"best: trial {best.number}, {search.metric} = {best.value:.6g}, params {json.dumps(best.params)}",
            flush=True,
        )
        print(f"      run {best.user_attrs.get('run_dir')}", flush=True)
        print(f"      sweep file: {path} (ablate sweep {path} --scale {search.scale.name})", flush=True)
    if stopped:
        return 130
    return 0 if path is not None and finished >= trials else 1
