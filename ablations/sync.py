"""`ablate sync`: upload the offline wandb runs of run folders with `wandb sync`.

Training logs to wandb offline (`<run>/wandb/offline-run-<time>-<run id>/run-<run id>.wandb`); this uploads them
later, from a machine that can reach the server. A run directory whose `.wandb` file has wandb's marker beside
it (`run-<id>.wandb.synced`, written by `wandb sync` on success) is skipped. Before syncing anything the server
(WANDB_BASE_URL, else https://api.wandb.ai) is probed with a short TCP connect, so that an unreachable server is
reported at once instead of after wandb's own retries. `timeout` bounds the whole sync, not each run: each
`wandb sync` gets what is left of it, and the sync stops at the first run that times out (a server that accepts
and never answers would make every later run wait as long) or once the budget is spent, saying how many runs it
did not try. The address of each
uploaded run, as `wandb sync` prints it, is recorded as `wandb_url` in the run's metrics.json, where tables and
the dashboard find it.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from .records import lock_holder, read_metrics, update_metrics
from .tracking import base_url, probe

PROBE_SECONDS = 5.0  # before uploading: more patient than the probe before a run (tracking.PROBE_SECONDS)
RUN_URL = re.compile(r"https?://\S+/runs/[\w-]+")


def offline_runs(root: Path) -> list[Path]:
    """Offline wandb run directories under the run folders of `root`, oldest first within a run folder."""
    return sorted(Path(root).glob("**/wandb/offline-run-*"), key=lambda p: (p.parent.parent, p.name))


def is_synced(run: Path) -> bool:
    """wandb writes `<file>.wandb.synced` beside each `.wandb` file it uploaded."""
    files = list(run.glob("*.wandb"))
    return bool(files) and all(f.with_suffix(".wandb.synced").exists() for f in files)


def wandb_command() -> list[str]:
    beside = Path(sys.executable).parent / "wandb"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("wandb")
    return [found] if found else [sys.executable, "-m", "wandb"]


def sync_one(run: Path, timeout: float) -> tuple[bool, str, Optional[str]]:
    """`wandb sync RUN` (an argv list, no shell), stopped after `timeout` seconds; (success, last output lines, run URL)."""
    env = dict(os.environ)
    env.pop("WANDB_MODE", None)  # uploading is online by definition; an offline/disabled mode is for training
    env["WANDB_SILENT"] = "false"
    argv = [*wandb_command(), "sync", str(run)]
    process = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
        text=True,
        errors="replace",
    )
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(process.pid, signal.SIGKILL)  # wandb sync starts wandb-core: stop the whole group
        except ProcessLookupError:
            pass
        output, _ = process.communicate()
        return False, f"timed out after {timeout:.3g} s" + tail(output), None
    ok = process.returncode == 0 and is_synced(run)
    urls = RUN_URL.findall(output or "")
    return ok, ("" if ok else f"exit code {process.returncode}") + tail(output), urls[-1] if ok and urls else None


def tail(output: Optional[str], lines: int = 5) -> str:
    rows = [row for row in (output or "").splitlines() if row.strip()][-lines:]
    return "".join(f"\n    {row}" for row in rows)


def sync_runs(root: str | Path = "runs", timeout: float = 600.0, dry_run: bool = False) -> int:
    """0 when every offline run under `root` is synced (or there is none); 1 when a sync failed, one was not tried
    (the `timeout` seconds of the whole sync spent) or no server answers."""
    if timeout <= 0:
        raise ValueError(f"--timeout {timeout:g}: expected a positive number of seconds")
    deadline = time.monotonic() + timeout
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"{root}: no such directory")
    runs = offline_runs(root)
    pending = [run for run in runs if not is_synced(run)]
    training = [run for run in pending if lock_holder(run.parent.parent) is not None]  # its .wandb file still grows
    todo = [run for run in pending if run not in training]
    print(
        f"{len(runs)} offline wandb run(s) under {root}: {len(runs) - len(pending)} synced already, "
        f"{len(training)} still training (skipped), {len(todo)} to sync",
        flush=True,
    )
    if dry_run:
        for run in todo:
            print(f"  would sync {run}", flush=True)
        return 0
    if not todo:
        return 0
    url = base_url()
    problem = probe(url, PROBE_SECONDS)
    if problem is not None:
        print(
            f"ablate sync: error: the wandb server {url} cannot be reached ({problem}); nothing synced. Sync from a "
            "machine with network access, or set WANDB_BASE_URL to your server.",
            file=sys.stderr,
            flush=True,
        )
        return 1
    failed = tried = 0
    timed_out = False
    for run in todo:
        left = deadline - time.monotonic()
        if left <= 0 or timed_out:
            break
        tried += 1
        started = time.time()
        ok, detail, url = sync_one(run, left)
        timed_out = not ok and detail.startswith("timed out")
        print(
            f"{'synced' if ok else 'FAILED'} {run} ({time.time() - started:.1f} s)"
            + (f": {url}" if url else "")
            + ("" if ok else f": {detail}"),
            flush=True,
        )
        if url and read_metrics(run.parent.parent) is not None:
            update_metrics(run.parent.parent, wandb_url=url)
        failed += not ok
    untried = len(todo) - tried
    why = "a run timed out" if timed_out else f"the --timeout of {timeout:g} s for the whole sync was spent"
    print(
        f"{tried - failed} synced, {failed} failed" + (f", {untried} not tried ({why})" if untried else ""), flush=True
    )
    return 1 if failed or untried else 0
