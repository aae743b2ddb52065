"""Parameter counts of a sweep's rows, built on the meta device (no memory, no initialisation cost)."""

from __future__ import annotations

from typing import Any, Optional

from lightning_modules.flops import parameter_count

from .sweep import load_sweep, paper_units, resolve, scale_named


def within_tolerance(params: int, paper_params_m: float) -> bool:
    """The paper's counts are rounded and approximate: within 3M or 4%, whichever is larger."""
    paper = paper_params_m * 1e6
    return abs(params - paper) <= max(3e6, 0.04 * paper)


def parameter_table(sweep_path: str, vocab_size: int = 37000, scale: Optional[str] = None) -> list[dict[str, Any]]:
    sweep = load_sweep(sweep_path)
    preset = scale_named(sweep_path, scale) if scale else None
    rows = []
    for row in sweep.rows:
        config = resolve(sweep, row, preset, 0) if preset else paper_units(sweep, row)
        model = config.model
        params = parameter_count(model, vocab_size or config.data.vocab_size)
        paper = row.paper.params_m
        rows.append(
            {
                "row": row.id,
                "group": row.group,
                "params": params,
                "paper_params_m": paper,
                "within_tolerance": None if paper is None or scale else within_tolerance(params, paper),
                "N": model.N,
                "d_model": model.d_model,
                "d_ff": model.d_ff,
                "h": model.h,
                "d_k": model.head_dim_k,
                "d_v": model.head_dim_v,
            }
        )
    return rows
