"""`ablate sweep --launcher slurm`: the runs still to train as one submitit job array, one task per run.

The same selection as the local launcher (`plan.select` / `plan.claim`: skip finished runs and runs locked or
queued elsewhere, reset failed ones on --retry-failed); each task runs `TrainJob` (train_run in-process, taking
the run's lock itself when it starts). The launcher prints the job ids and returns, or with --wait waits and
reports like the local launcher.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from ..records import CONFIG_FILE, RunLock, lock_holder, read_config, read_metrics, update_metrics
from .plan import Run, claim, print_skipped, report, select
from .processes import log_tail, pid_alive

SUBMITIT_FOLDER = ".submitit"
ALIVE_STATES = (
    "PENDING",
    "CONFIGURING",
    "RUNNING",
    "COMPLETING",
    "REQUEUED",
    "REQUEUE_HOLD",
    "REQUEUE_FED",
    "RESIZING",
    "SUSPENDED",
    "STOPPED",
    "SIGNALING",
    "STAGE_OUT",
)


@dataclass(frozen=True)
class SlurmOptions:
    partition: Optional[str] = None
    time_min: int = 24 * 60
    gpus_per_run: int = 1  # GPUs (and DDP ranks: SLURM tasks) per node and run; 0 for a CPU-only job with one rank
    nodes: int = 1  # nodes per run: a run has nodes x gpus_per_run ranks
    cpus_per_task: Optional[int] = None
    array_parallelism: Optional[int] = None
    signal_delay_s: int = 120  # the warning signal (USR2) before the time limit: time to stop and requeue
    cluster: Optional[str] = None  # submitit's cluster: None = slurm; "local" runs the jobs on this machine (tests)


class TrainJob:
    """What each array task runs: `train_run` of one run folder, in-process, with `devices` DDP ranks.

    With G > 1 the job has G SLURM tasks, each calling this; Lightning's SLURMEnvironment gives each its rank and
    only rank 0 takes the run's lock and writes records. The task re-checks the run under its lock, as the local
    launcher does, since the run may have been trained or started elsewhere while the job was queued.

    Requeue: submitit sends USR2 `signal_delay_s` before the time limit (and on preemption). Its handler would requeue
    at once, losing the steps since the last periodic checkpoint, so during training train_run's own handler takes
    the signal, checkpoints at the end of the step and raises Preempted; the task then calls submitit's handler, which
    calls `checkpoint` (a resubmission training the same folder, which resumes from `checkpoints/last.ckpt`) and
    requeues. Lightning's SIGUSR1 auto-requeue is off in every SLURM job (train.cluster_plugins), and train_run
    requeues nothing itself under ABLATE_REQUEUE=submitit, so a job is never requeued twice.
    """

    def __init__(self, devices: int = 1, accelerator: str = "auto", nodes: int = 1) -> None:
        self.devices = devices  # per node
        self.accelerator = accelerator
        self.nodes = nodes

    def __call__(self, run_dir: str) -> str:
        from ..train import Preempted

        requeue = signal.getsignal(self.requeue_signal())  # submitit's handler, before training replaces it
        try:
            return self.train(Path(run_dir))
        except Preempted as stop:
            if stop.signum == self.requeue_signal() and callable(requeue):
                requeue(stop.signum, None)  # rank 0: checkpoint() and requeue, then exit; other ranks: nothing
            return f"preempted: {stop}"

    @staticmethod
    def requeue_signal() -> signal.Signals:
        import submitit

        return submitit.JobEnvironment._usr_sig()  # USR2, or $SUBMITIT_PREEMPT_SIGNAL

    def train(self, run_dir: Path) -> str:
        from ..train import REQUEUE_ENV, is_rank_zero, train_run  # lazily: torch and Lightning

        os.environ.setdefault("WANDB_MODE", "offline")
        os.environ[REQUEUE_ENV] = "submitit"
        config, meta = read_config(run_dir / CONFIG_FILE)
        if not is_rank_zero():
            train_run(config, run_dir, meta, **self.placement())
            return "rank > 0"
        lock = RunLock(run_dir)
        if not lock.acquire(tries=50):  # patient: the submitter may be recording the job id under the lock
            return f"skipped: being trained elsewhere ({lock_holder(run_dir) or 'another process'})"
        with lock:
            job = job_environment()
            lock.note(f"submitit job {job.get('submitit_job', '?')} pid {os.getpid()} on {socket.gethostname()}\n")
            status = (read_metrics(run_dir) or {}).get("status")
            if status in ("done", "diverged"):
                return f"skipped: {status} meanwhile"
            update_metrics(run_dir, status=status or "pending", **job)
            return train_run(config, run_dir, meta, **self.placement())["status"]

    def placement(self) -> dict[str, Any]:
        return {"progress": False, "devices": self.devices, "accelerator": self.accelerator, "nodes": self.nodes}

    def checkpoint(self, run_dir: str):
        import submitit

        return submitit.helpers.DelayedSubmission(self, run_dir)


def job_environment() -> dict[str, Any]:
    """This submitit job's id and log, as recorded in metrics.json ({} outside a submitit job)."""
    import submitit

    try:
        env = submitit.JobEnvironment()
        return {"submitit_job": env.job_id, "submitit_cluster": env.cluster, "submitit_log": str(env.paths.stdout)}
    except (RuntimeError, KeyError):  # not inside a submitit job
        return {}


def job_alive(record: dict[str, Any]) -> bool:
    """Whether the job a run was submitted to (recorded in metrics.json) is still queued or running."""
    job, cluster = record.get("submitit_job"), record.get("submitit_cluster")
    if not job:
        return False
    if cluster == "local":  # submitit's local jobs are processes: the job id is the controller's pid
        try:
            return pid_alive(int(job))
        except ValueError:
            return False
    try:
        out = subprocess.run(["squeue", "-h", "-j", str(job), "-o", "%T"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False  # cannot tell: resubmit; the job re-checks the run under its lock anyway
    return any(state.strip() in ALIVE_STATES for state in out.stdout.splitlines())


def make_executor(folder: Path, options: SlurmOptions, name: str):
    import submitit

    try:  # never fall back silently to submitit's local executor: that would train every run here at once
        executor = submitit.AutoExecutor(folder=folder, cluster=options.cluster or "slurm")
    except RuntimeError as error:  # no srun here
        raise ValueError(f"--launcher slurm: no SLURM found on this machine ({error}); use --launcher local") from None
    gpus = options.gpus_per_run
    params: dict[str, Any] = dict(
        name=name,
        timeout_min=options.time_min,
        gpus_per_node=gpus,
        tasks_per_node=max(1, gpus),
        nodes=options.nodes,
        cpus_per_task=options.cpus_per_task,
        slurm_partition=options.partition,
        slurm_array_parallelism=options.array_parallelism,
        slurm_signal_delay_s=options.signal_delay_s,
    )
    if executor.cluster == "local":
        params["tasks_per_node"] = 1  # the local executor does not set ranks up the way SLURM does
    executor.update_parameters(**{k: v for k, v in params.items() if v is not None})
    return executor


def submit_sweep(
    runs: list[Run], options: SlurmOptions, out: Path, retry_failed: bool = False, wait: bool = False
) -> int:
    """Submit one job array for the runs still to train; with `wait`, wait for it and report like the local launcher."""
    todo = []
    for run in select(runs, retry_failed):
        record = read_metrics(run.dir) or {}
        if job_alive(record):
            run.state, run.note = "elsewhere", f"queued as job {record['submitit_job']}"
            print(f"{run.label} ({run.spec.run_id}) skipped: already {run.note}", flush=True)
            continue
        lock = claim(run, retry_failed)
        if lock is None:
            print(
                f"{run.label} ({run.spec.run_id}) skipped: "
                + (f"running elsewhere ({run.note})" if run.state == "elsewhere" else run.state),
                flush=True,
            )
            continue
        lock.release()  # the job takes it when it starts
        todo.append(run)
    print_skipped(runs, retry_failed)
    name = f"{runs[0].spec.sweep} at {runs[0].spec.scale}" if runs else ""
    if not todo:
        print(f"sweep {name}: nothing to submit", flush=True)
        return report(runs, name, 0, "by this submission") if wait else 0
    executor = make_executor(Path(out) / SUBMITIT_FOLDER, options, f"ablate-{runs[0].spec.sweep}-{runs[0].spec.scale}")
    devices = max(1, options.gpus_per_run)
    accelerator = "auto" if options.gpus_per_run else "cpu"
    jobs = executor.map_array(TrainJob(devices, accelerator, options.nodes), [str(run.dir) for run in todo])
    wait = wait or executor.cluster == "local"  # submitit's local jobs are cancelled when this process lets go of them
    for run, job in zip(todo, jobs):
        run.state = "pending"
        with RunLock(run.dir) as lock:  # a job that has started already holds it (and records `running` itself)
            if lock.acquire(tries=1):
                update_metrics(
                    run.dir,
                    submitit_job=job.job_id,
                    submitit_cluster=executor.cluster,
                    submitted_at=time.time(),
                    submitit_log=str(job.paths.stdout),
                )
    arrays = sorted({str(job.job_id).split("_")[0] for job in jobs})
    print(
        f"submitted {len(jobs)} run(s) of {name} to {executor.cluster} as job(s) {', '.join(arrays)}"
        + f" (logs: {Path(out) / SUBMITIT_FOLDER})",
        flush=True,
    )
    for run, job in zip(todo, jobs):
        print(f"  {job.job_id}: {run.label} ({run.spec.run_id}) -> {run.dir}", flush=True)
    if not wait:
        return 0
    for run, job in zip(todo, jobs):
        try:
            result = job.result()
            print(
                f"[{time.strftime('%H:%M:%S')}] {run.label} ({run.spec.run_id}) job {job.job_id}: {result}", flush=True
            )
        except Exception as error:  # the job failed: make sure the folder says so, as the local launcher does
            reason = f"job {job.job_id} failed: {str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__}"
            record = read_metrics(run.dir) or {}
            if record.get("status") not in ("done", "diverged", "failed"):
                update_metrics(
                    run.dir,
                    status="failed",
                    reason=reason,
                    exit=reason,
                    failed_at=time.time(),
                    log_tail=log_tail(Path(job.paths.stderr)),
                )
            print(f"[{time.strftime('%H:%M:%S')}] {run.label} ({run.spec.run_id}) {reason}", flush=True)
    return report(runs, name, len(todo), "by this submission")
