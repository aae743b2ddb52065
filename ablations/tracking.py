"""wandb as a view of runs, never the store: offline by default, never blocking a run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning_modules.config import RunConfig

PROJECT = "attention-ablations"


def flat_config(config: RunConfig) -> dict[str, Any]:
    """Row hyperparameters as flat keys (model.d_k, train.eps_ls) so the wandb UI can group and compare them."""
    return {f"{section}.{key}": value for section, values in config.to_dict().items() if isinstance(values, dict) for key, value in values.items()} | {"seed": config.seed}


def wandb_logger(run_dir: Path, config: RunConfig, meta: dict[str, Any], mode: str):
    """A WandbLogger for one run. The wandb id is the run id, so a resumed run continues its wandb run."""
    import wandb
    from lightning.pytorch.loggers import WandbLogger

    sweep, scale, row = meta.get("sweep", "adhoc"), meta.get("scale", "custom"), meta.get("row", "run")
    return WandbLogger(
        project=PROJECT, save_dir=str(run_dir), id=config.run_id(), resume="allow",
        group=f"{sweep}-{scale}", name=f"{row}-s{config.seed}", tags=[t for t in (sweep, scale, meta.get("group")) if t],
        config=flat_config(config) | {"meta." + k: v for k, v in meta.items()},
        mode=mode, settings=wandb.Settings(init_timeout=15, silent=True),
    )
