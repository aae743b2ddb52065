"""The study: its storage, sampler and pruner, created once by the command and loaded by every process; and
how a training process finds its trial (ABLATE_OPTUNA_*)."""

from __future__ import annotations

import itertools
import socket
import sys
from pathlib import Path
from typing import Any, Mapping, Optional

from ..launch.processes import pid_alive
from .spec import Search

STORAGE_ENV = "ABLATE_OPTUNA_STORAGE"
STUDY_ENV = "ABLATE_OPTUNA_STUDY"
TRIAL_ENV = "ABLATE_OPTUNA_TRIAL"
PRUNED_EXIT = 77  # a training process stopped by the pruner exits with this
ATTR = "ablate."  # prefix of the study's user attributes written here


def mask_url(url: Optional[str]) -> Optional[str]:
    """A storage URL as it may be shown (console, logs, errors, records): its password replaced by `***`.

    SQLAlchemy's own rendering (`make_url(...).render_as_string(hide_password=True)`, optuna depends on
    SQLAlchemy); a string it cannot parse (journal:PATH, a path) is shown as given when it has no `user:pw@`, else
    with what lies between `:` and `@` masked."""
    if not url or "://" not in url:
        return url
    try:
        from sqlalchemy.engine import make_url

        parsed = make_url(url)
    except Exception:  # not installed, or not an SQLAlchemy URL: mask the userinfo's password by hand
        scheme, _, rest = url.partition("://")
        userinfo, at, host = rest.rpartition("@")
        if not at or ":" not in userinfo:
            return url
        return f"{scheme}://{userinfo.split(':', 1)[0]}:***@{host}"
    return parsed.render_as_string(hide_password=True) if parsed.password is not None else url


def redact(text: str, url: Optional[str]) -> str:
    """`text` (an error message, a log line) with `url`, and its password, masked wherever they appear."""
    if not url:
        return text
    masked = mask_url(url) or url
    text = text.replace(url, masked)
    try:
        from sqlalchemy.engine import make_url

        password = make_url(url).password
    except Exception:
        password = None
    return text.replace(str(password), "***") if password else text


def storage_spec(storage: Optional[str], out: Path, name: str) -> str:
    """A normalised storage string: `journal:/abs/path` or an SQLAlchemy URL (sqlite paths made absolute)."""
    if not storage:
        return f"sqlite:///{(Path(out) / f'{name}.db').absolute()}"
    if storage.startswith("journal:"):
        return "journal:" + str(Path(storage[len("journal:") :]).absolute())
    if storage.endswith(".journal") and "://" not in storage:
        return "journal:" + str(Path(storage).absolute())
    if storage.startswith("sqlite:///") and not storage.startswith("sqlite:////") and storage != "sqlite:///:memory:":
        return "sqlite:///" + str(Path(storage[len("sqlite:///") :]).absolute())
    if "://" in storage:
        return storage
    raise ValueError(
        f"--storage {mask_url(storage)!r}: expected an SQLAlchemy URL (sqlite:///F.db, postgresql://...), "
        "journal:PATH or a PATH ending in .journal"
    )


def open_storage(spec: str):
    import optuna

    if spec.startswith("journal:"):
        from optuna.storages.journal import JournalFileBackend

        path = Path(spec[len("journal:") :])
        path.parent.mkdir(parents=True, exist_ok=True)
        return optuna.storages.JournalStorage(JournalFileBackend(str(path)))
    if spec.startswith("sqlite:"):
        Path(spec[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
        # Several processes write (workers, training processes reporting): wait for the lock, not fail at once.
        return optuna.storages.RDBStorage(spec, engine_kwargs={"connect_args": {"timeout": 60}})
    return optuna.storages.RDBStorage(postgres_driver(spec), engine_kwargs={"pool_pre_ping": True})


def postgres_driver(url: str) -> str:
    """`postgresql://` with the driver that is installed: SQLAlchemy 2.1 defaults to psycopg (3), many installs
    have psycopg2 (psycopg2-binary). An explicit `postgresql+driver://` is kept."""
    if not url.startswith("postgresql://"):
        return url
    import importlib.util

    if importlib.util.find_spec("psycopg") is None and importlib.util.find_spec("psycopg2") is not None:
        return "postgresql+psycopg2://" + url[len("postgresql://") :]
    return url


def make_pruner(spec: Mapping[str, Any]):
    import optuna

    if spec.get("type") == "none":
        return optuna.pruners.NopPruner()
    return optuna.pruners.MedianPruner(**{k: v for k, v in spec.items() if k != "type"})


def make_sampler(kind: str, seed: int):
    import optuna

    if kind == "grid":
        # Every grid trial is enqueued with all its params (enqueue_grid), so the sampler is never consulted;
        # optuna's GridSampler itself duplicated a point with two workers, and raises on a one-point grid
        # when trials are enqueued.
        return optuna.samplers.RandomSampler(seed=seed)
    # constant_liar: trials running in other workers count as bad guesses, so parallel workers spread out.
    return optuna.samplers.TPESampler(seed=seed, constant_liar=True)


def grid_space(search: Search) -> dict[str, list]:
    bad = [p.key for p in search.params if p.spec["type"] != "categorical"]
    if bad:
        raise ValueError(
            f"--sampler grid searches categorical params only (explicit lists); "
            f"params.{bad[0]} is of type {search.params[[p.key for p in search.params].index(bad[0])].spec['type']}"
        )
    return {p.key: list(p.spec["choices"]) for p in search.params}


def load_study(spec: str, name: str, sampler=None):
    """Load a study with the pruner its creator stored (optuna does not store pruners)."""
    import optuna

    storage = open_storage(spec)
    plain = optuna.load_study(study_name=name, storage=storage)
    pruner = make_pruner(plain.user_attrs.get(ATTR + "pruner", {"type": "median"}))
    return optuna.load_study(study_name=name, storage=storage, sampler=sampler, pruner=pruner)


def numbered_trial(spec: str, study, number: int):
    """Trial `number` of `study` as an optuna Trial, to report to or set attributes on from any process.

    By number, through the storage's public lookups: optuna has no public trial id (`Trial._trial_id` is private).
    """
    import optuna

    storage = open_storage(spec)
    study_id = storage.get_study_id_from_name(study.study_name)
    return optuna.trial.Trial(study, storage.get_trial_id_from_study_id_trial_number(study_id, number))


def _identity(search: Search, sampler: str) -> dict[str, Any]:
    """What must not change when a study is continued."""
    return {
        "params": {p.key: dict(p.spec) for p in search.params},
        "metric": search.metric,
        "sweep": search.sweep.name,
        "row": search.row.id,
        "scale": search.scale.name,
        "seed": search.seed,
        "sampler": sampler,
        "sets": {str(k): v for k, v in search.sets.items()},
    }


def create_study(search: Search, spec: str, sampler: str):
    """Create the study (or continue it after checking it is the same search); only the command does this."""
    import optuna

    storage = open_storage(spec)
    study = optuna.create_study(
        study_name=search.name,
        storage=storage,
        direction=search.direction,
        pruner=make_pruner(search.pruner),
        load_if_exists=True,
    )
    if study.direction.name.lower() != search.direction:
        raise ValueError(
            f"study {search.name!r} in {mask_url(spec)} exists with direction {study.direction.name.lower()}, "
            f"not {search.direction}; use another name or --storage"
        )
    identity = _identity(search, sampler)
    previous = study.user_attrs.get(ATTR + "identity")
    if previous is not None and previous != identity:
        changed = sorted(k for k in identity if previous.get(k) != identity.get(k))
        raise ValueError(
            f"study {search.name!r} in {mask_url(spec)} exists with a different {', '.join(changed)}; "
            "use another name or --storage to start a new study"
        )
    if previous is None:
        study.set_user_attr(ATTR + "identity", identity)
        study.set_user_attr(ATTR + "pruner", dict(search.pruner))
        study.set_user_attr(ATTR + "monitor", search.monitor)
        study.set_user_attr(ATTR + "search_file", str(search.path))
    return study


def fail_stale_trials(study, spec: str) -> list[int]:
    """RUNNING trials whose worker ran on this host and is gone: FAIL (so that the trial count is right)."""
    from optuna.trial import TrialState

    failed = []
    host = socket.gethostname()
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        attrs = trial.user_attrs
        pid = attrs.get("worker_pid")
        if attrs.get("host") == host and isinstance(pid, int) and not pid_alive(pid):
            try:
                numbered_trial(spec, study, trial.number).set_user_attr(
                    "reason", f"stale: its worker (pid {attrs['worker_pid']}) is gone"
                )
                study.tell(trial.number, state=TrialState.FAIL)
                failed.append(trial.number)
            except Exception as error:  # finished meanwhile
                print(f"could not mark stale trial {trial.number} failed: {error}", file=sys.stderr)
    return failed


def enqueue_grid(study, search: Search, trials: int) -> int:
    """Grid search: enqueue the grid points (product order) not yet in the study, up to `trials` trials in all.

    Enqueued (WAITING) trials are popped atomically by `ask`, so parallel workers never run a point twice (a
    GridSampler with two workers did). Returns how many trials the study can hold in all (at most the grid).
    """
    space = grid_space(search)
    keys = list(space)
    points = [dict(zip(keys, values)) for values in itertools.product(*(space[k] for k in keys))]
    existing = study.get_trials(deepcopy=False)
    # An enqueued trial's params are known only from optuna's own system attribute until it runs: no public API.
    seen = [t.system_attrs.get("fixed_params") or t.params for t in existing]
    remaining = [p for p in points if p not in seen]
    allowed = min(trials, len(existing) + len(remaining))
    for point in remaining[: max(0, allowed - len(existing))]:
        study.enqueue_trial(point)
    return allowed


def ask_lock(out: str | Path, name: str) -> Path:
    """`<out>/.<name>.lock`, held (records.blocking_lock) around counting and asking: exactly N trials, no
    duplicates. It covers the workers of every search sharing `out` (one host, or a filesystem with working flock)."""
    return Path(out) / f".{name}.lock"
