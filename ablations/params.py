"""Parameter counts of a sweep's rows, built on the meta device (no memory, no initialisation cost)."""

from __future__ import annotations

from typing import Any, Optional

from lightning_modules.flops import parameter_count

from .sweep import load_sweep, paper_units, resolve, scale_named


def within_tolerance(params: int, paper_params_m: float) -> bool:
    """The paper's counts are rounded and approximate: within 3M or 4%, whichever is larger."""
    paper = paper_params_m * 1e6
    return abs(params - paper) <= max(3e6, 0.04 * paper)


PAPER_VOCAB = 37000  # the paper's shared BPE vocabulary (WMT14 En-De)


def table_vocab(vocab_size: Optional[int], preset: Any) -> Optional[int]:
    """The vocabulary to count with: the one given; else, at a scale, None (each row's own `data.vocab_size`, the
    scale's); else the paper's 37000."""
    if vocab_size is not None:
        return vocab_size
    return None if preset is not None else PAPER_VOCAB


def parameter_table(
    sweep_path: str, vocab_size: Optional[int] = None, scale: Optional[str] = None
) -> list[dict[str, Any]]:
    """One row per sweep row: its parameters with `vocab_size` if given, else with the scale's own vocabulary at a
    scale, else with the paper's 37000 (paper units)."""
    sweep = load_sweep(sweep_path)
    preset = scale_named(sweep_path, scale) if scale else None
    rows = []
    for row in sweep.rows:
        config = resolve(sweep, row, preset, 0) if preset else paper_units(sweep, row)
        model = config.model
        vocab = table_vocab(vocab_size, preset) or config.data.vocab_size
        params = parameter_count(model, vocab)
        paper = row.paper.params_m
        rows.append(
            {
                "row": row.id,
                "group": row.group,
                "params": params,
                "vocab": vocab,
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
