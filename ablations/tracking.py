"""wandb as a view of runs, never the store: offline by default, never blocking a run.

In `WANDB_MODE=online` the server is tried before training starts: a TCP probe of WANDB_BASE_URL (a couple of
seconds at most, skipped behind an HTTP proxy), then `wandb.init` with a short `init_timeout`. If either fails (no
server, no API key, a refused login) the run logs offline instead, under the same wandb id, and says so on stderr;
`ablate sync` uploads it later.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any, Optional
from urllib.parse import urlsplit

from lightning_modules.config import RunConfig

PROJECT = "attention-ablations"  # the default; WANDB_PROJECT or --wandb-project choose another
PROJECT_ENV, ENTITY_ENV, TAGS_ENV = "WANDB_PROJECT", "WANDB_ENTITY", "ABLATE_WANDB_TAGS"
DEFAULT_BASE_URL = "https://api.wandb.ai"
PROBE_SECONDS = 2.0  # a reachable server answers a TCP connect in far less
INIT_TIMEOUT_SECONDS = 5.0  # a server that accepts connections but does not answer: wandb.init gives up after this
PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")
log = logging.getLogger("ablate")


def flat_config(config: RunConfig) -> dict[str, Any]:
    """Row hyperparameters as flat keys (model.d_k, train.eps_ls) so the wandb UI can group and compare them."""
    return {
        f"{section}.{key}": value
        for section, values in config.to_dict().items()
        if isinstance(values, dict)
        for key, value in values.items()
    } | {"seed": config.seed}


def _make_logger(run_dir: Path, config: RunConfig, meta: dict[str, Any], mode: str):
    import wandb
    from lightning.pytorch.loggers import WandbLogger

    sweep, scale, row = meta.get("sweep", "adhoc"), meta.get("scale", "custom"), meta.get("row", "run")
    return WandbLogger(
        project=os.environ.get(PROJECT_ENV) or PROJECT,
        entity=os.environ.get(ENTITY_ENV) or None,
        save_dir=str(run_dir),
        id=config.run_id(),
        resume="allow",
        group=f"{sweep}-{scale}",
        name=f"{row}-s{config.seed}",
        tags=[
            t.strip()
            for t in (sweep, scale, meta.get("group"), *os.environ.get(TAGS_ENV, "").split(","))
            if t and t.strip()
        ],
        config=flat_config(config) | {"meta." + k: v for k, v in meta.items()},
        mode=mode,
        settings=wandb.Settings(init_timeout=INIT_TIMEOUT_SECONDS, silent=True),
    )


def base_url() -> str:
    """The wandb server: WANDB_BASE_URL, else wandb's own."""
    return os.environ.get("WANDB_BASE_URL", "").strip() or DEFAULT_BASE_URL


def probe(url: str, timeout: float) -> Optional[str]:
    """None if a TCP connection to the server opens within `timeout`; else why not."""
    parts = urlsplit(url)
    host = parts.hostname
    if not host:
        return f"cannot parse the server address {url!r}"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as error:  # refused, unreachable, DNS failure, timeout
        return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def online_problem() -> str | None:
    """None if the wandb server accepts a TCP connection (or a proxy stands between); else why not."""
    if any(os.environ.get(name) for name in PROXY_VARIABLES):
        return None  # the proxy decides; wandb.init's own timeout bounds the wait
    problem = probe(base_url(), timeout=PROBE_SECONDS)
    return None if problem is None else f"{base_url()} unreachable ({problem})"


def wandb_logger(run_dir: Path, config: RunConfig, meta: dict[str, Any], mode: str):
    """A WandbLogger for one run. The wandb id is the run id, so a resumed run continues its wandb run.

    Online, the run is started here (not lazily inside training) so that a server that cannot be reached costs a
    few seconds and an offline logger rather than a failed run.
    """
    if mode != "online":
        return _make_logger(run_dir, config, meta, mode)
    started = time.monotonic()
    problem = online_problem()
    if problem is None:
        logger = _make_logger(run_dir, config, meta, mode)
        try:
            logger.experiment  # noqa: B018  (starts the wandb run now)
            return logger
        except Exception as error:  # wandb raises CommError, UsageError, AuthenticationError, timeouts...
            problem = f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"
            _reset_wandb()
    message = (
        f"wandb online: {problem}; logging offline instead after {time.monotonic() - started:.1f} s "
        "(upload later with `ablate sync`)"
    )
    log.warning(message)
    print(f"ablate train: warning: {message}", file=sys.stderr, flush=True)
    return _make_logger(run_dir, config, meta, "offline")


def _reset_wandb() -> None:
    """Shut down the wandb service a failed online init leaves behind: it still holds the run id ("run ID ... is in
    use"), which would refuse the offline run of the same id. The next wandb.init starts a fresh service."""
    import wandb

    try:
        wandb.teardown()
    except Exception:  # already broken: nothing more to release
        pass
