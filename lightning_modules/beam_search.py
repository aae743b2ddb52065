"""Batched beam search and greedy decoding over the Transformer's incremental decoder (section 6).

The paper: beam size 4, length penalty alpha = 0.6, maximum output length = input length + 50, early stop.

Scoring. A hypothesis Y (tokens y_1..y_n, then EOS) scores  log P(Y | X) / lp(|Y|)  with the GNMT penalty
lp(m) = ((5 + m) / 6)^alpha, where |Y| = n + 1 counts the EOS, as in tensor2tensor and fairseq.

Search. All sentences and beams are decoded as one batch of B*K rows. Each step takes the 2K best
(beam, token) candidates of each sentence (on CPU in one native pass, native.beam_candidates); EOS candidates
that rank among the first K are finished hypotheses (as in fairseq); the K best non-EOS candidates are the live
beams of the next step. PAD never is a candidate, nor BOS when it differs from EOS. When a sentence has produced
its maximum number of tokens, only EOS is allowed, so every sentence ends with a finished hypothesis.

Finished hypotheses. Only the best finished hypothesis of each sentence (normalised score and tokens) and the
number finished are kept, as tensors: the API returns the best one, and both stopping rules only need these.

Early stopping (`stop`):
* "bound" (default): a sentence is done when its best finished score cannot be beaten by any continuation of
  its live beams. A live beam with log-probability s <= 0 can only lose probability, so any hypothesis grown
  from it scores at most s / max(lp(m)) over the lengths m it can still reach; with alpha >= 0 that is
  s / lp(max_len + 1). The result is therefore exactly what the same beam search returns when run to the
  maximum length (tested), while stopping as soon as the answer is settled. tensor2tensor, which the paper
  used, bounds the alive beams the same way (best alive log-probability / lp(max length)).
* "count": done when K hypotheses have finished (fairseq's rule); cheaper, but with alpha > 0 a longer
  hypothesis that would have won can be cut off. Greedy search is K = 1 with this rule: it stops at the
  first EOS, which is exactly the argmax loop.
* "none": every sentence runs to its maximum length (for checking the other rules).

Cost. One host sync per step (whether any sentence is done). Done sentences leave the batch: their rows of the
memory, mask and cache are dropped, so the remaining sentences decode faster. The encoder's memory is kept once
per sentence, not per beam, and the decoder's cache never copies a beam's history when beams are reordered (see
DecoderCache). At the end the cache goes back to the model (`recycle`), which keeps its buffers for the next search
while it is in eval mode: the pages stay mapped, where fresh ones would fault on their first write.
"""

from __future__ import annotations

from typing import Literal, Optional

import torch
from torch import Tensor

from . import native

NEG_INF = float("-inf")


def length_penalty_factor(length: Tensor | int, alpha: float) -> Tensor | float:
    """GNMT length penalty ((5 + |Y|) / 6)^alpha, |Y| counting the EOS: float32 for a tensor, a float for a number."""
    if isinstance(length, Tensor):
        length = length.float()
    return ((5.0 + length) / 6.0) ** alpha


@torch.no_grad()
def beam_search(
    model,
    src: Tensor,
    bos_id: int,
    eos_id: int,
    beam_size: int = 4,
    length_penalty: float = 0.6,
    max_len_offset: int = 50,
    max_len: Optional[int] = None,
    *,
    use_cache: bool = True,
    stop: Literal["bound", "count", "none"] = "bound",
    return_scores: bool = False,
):
    """Best hypothesis per source sentence as token ids (without BOS and EOS).

    `model` is a Transformer, or anything with its decoding API: `encode`, `decode`, `new_cache` (optionally
    `recycle`) and the attributes `pad_id`, `vocab_size` and `max_length`. src [B, S] (padded with model.pad_id).
    Source length per sentence = its number of non-pad tokens; max output length (tokens before EOS) = that +
    max_len_offset, capped by `max_len` when given and by the model's positions (max_length - 1, if any).
    use_cache=False re-decodes the whole prefix every step (same outputs, for speed comparisons). With
    return_scores=True also returns the normalised scores [B] (log-probability / lp(|Y|), float32) of the returned
    hypotheses.
    """
    if beam_size < 1:
        raise ValueError(f"beam_size = {beam_size}: expected a positive integer")
    if stop not in ("bound", "count", "none"):
        raise ValueError(f"stop = {stop!r}: expected 'bound', 'count' or 'none'")
    was_training = model.training
    model.eval()
    try:
        tokens, scores = _search(
            model, src, bos_id, eos_id, beam_size, float(length_penalty), max_len_offset, max_len, use_cache, stop
        )
    finally:
        model.train(was_training)
    return (tokens, scores) if return_scores else tokens


@torch.no_grad()
def greedy_search(
    model,
    src: Tensor,
    bos_id: int,
    eos_id: int,
    max_len_offset: int = 50,
    max_len: Optional[int] = None,
    *,
    use_cache: bool = True,
) -> list[list[int]]:
    """Argmax decoding until EOS or the maximum length: beam search with one beam, stopping at the first EOS."""
    return beam_search(model, src, bos_id, eos_id, 1, 0.0, max_len_offset, max_len, use_cache=use_cache, stop="count")


def _search(
    model,
    src: Tensor,
    bos_id: int,
    eos_id: int,
    K: int,
    alpha: float,
    max_len_offset: int,
    max_len: Optional[int],
    use_cache: bool,
    stop: str,
) -> tuple[list[list[int]], Tensor]:
    device = src.device
    B_all = src.shape[0]
    if B_all == 0:
        return [], torch.empty(0)

    # Per-sentence maximum number of output tokens (EOS excluded).
    limit = (src != model.pad_id).sum(dim=1) + max_len_offset  # [B]
    if max_len is not None:
        limit = limit.clamp(max=max_len)
    if model.max_length is not None:
        limit = limit.clamp(max=model.max_length - 1)  # BOS at position 0, the last token at position `limit`
    limit = limit.clamp(min=0)
    first_limit, L_cap = (int(x) for x in limit.aminmax())  # one sync, before the loop

    memory, src_mask = model.encode(src)  # [B, S, D], [B, 1, 1, S]: once per sentence; its K beams are adjacent rows
    cache = model.new_cache(capacity=L_cap + 1) if use_cache else None  # BOS, then up to L_cap tokens

    # Banned tokens: pad always, BOS unless it doubles as EOS.
    V = model.vocab_size
    banned = {model.pad_id} | ({bos_id} if bos_id != eos_id else set())
    banned = torch.tensor(sorted(banned - {eos_id}), dtype=torch.long, device=device)
    only_eos = torch.full((V,), NEG_INF, device=device)
    only_eos[eos_id] = 0.0
    native_candidates = device.type == "cpu" and native.available()  # see native.beam_candidates: one pass, not topk

    # Outputs, by original sentence: a sentence's best finished hypothesis, written when it leaves the batch.
    out_score = torch.full((B_all,), NEG_INF, device=device)
    out_tokens = torch.full((B_all, max(L_cap, 1)), model.pad_id, dtype=torch.long, device=device)
    out_len = torch.zeros(B_all, dtype=torch.long, device=device)

    # State of the active sentences (B of them), K beams each.
    ids = torch.arange(B_all, device=device)  # original index of each active sentence
    lim = limit  # [B]
    lp_limit = length_penalty_factor(lim + 1, alpha)  # [B]: the penalty of the longest hypothesis each may reach
    best_score = torch.full((B_all,), NEG_INF, device=device)  # best finished hypothesis so far
    best_tokens = torch.full((B_all, max(L_cap, 1)), model.pad_id, dtype=torch.long, device=device)
    best_len = torch.zeros(B_all, dtype=torch.long, device=device)
    n_finished = torch.zeros(B_all, dtype=torch.long, device=device)
    first_rows = torch.arange(B_all, device=device) * K  # [B]: each sentence's first row of B*K
    scores = torch.full((B_all, K), NEG_INF, device=device)
    scores[:, 0] = 0.0  # one live beam at the start, so the K beams do not duplicate it
    hist = torch.empty(B_all * K, 0, dtype=torch.long, device=device)  # generated tokens [B*K, t]
    last = torch.full((B_all * K, 1), bos_id, dtype=torch.long, device=device)

    t = 0  # tokens generated so far by every live beam
    while True:
        B = ids.shape[0]
        if use_cache:
            logits = model.decode(last, memory, src_mask, cache)[:, -1]  # [B*K, V]
        else:
            prefix = torch.cat([torch.full((B * K, 1), bos_id, dtype=torch.long, device=device), hist], dim=1)
            logits = model.decode(prefix, memory, src_mask)[:, -1]
        logp = logits.float().log_softmax(dim=-1).view(B, K, V)
        at_limit = lim <= t  # [B]: only EOS may follow
        if native_candidates:
            cand_scores, cand_idx = native.beam_candidates(
                logp, scores, banned, eos_id, at_limit if t >= first_limit else None, 2 * K
            )
        else:
            logp.index_fill_(2, banned, NEG_INF)
            if t >= first_limit:
                logp = torch.where(at_limit[:, None, None], logp + only_eos, logp)
            cand = logp.add_(scores.unsqueeze(-1)).view(B, K * V)  # in place: logp is not needed again
            cand_scores, cand_idx = cand.topk(2 * K, dim=1)  # sorted, best first
        cand_beam, cand_tok = cand_idx // V, cand_idx % V
        is_eos = cand_tok == eos_id

        # Finished: EOS candidates among the first K, with a finite score. |Y| = t + 1 (EOS included).
        fin = is_eos[:, :K] & torch.isfinite(cand_scores[:, :K])
        if stop == "count":
            n_finished += fin.sum(dim=1)
        fin_norm = torch.where(fin, cand_scores[:, :K] / length_penalty_factor(t + 1, alpha), NEG_INF)
        top_norm, top_pos = fin_norm.max(dim=1)  # [B]
        improved = top_norm > best_score
        if t > 0:
            parent_rows = first_rows + cand_beam.gather(1, top_pos[:, None]).squeeze(1)
            best_tokens[:, :t] = torch.where(improved[:, None], hist[parent_rows], best_tokens[:, :t])
        best_len = torch.where(improved, t, best_len)
        best_score = torch.where(improved, top_norm, best_score)

        # Live beams: the K best non-EOS candidates.
        live_scores, live_pos = cand_scores.masked_fill(is_eos, NEG_INF).topk(K, dim=1)  # [B, K]
        live_beam = cand_beam.gather(1, live_pos)
        live_tok = cand_tok.gather(1, live_pos)
        t += 1

        # Done sentences: at the limit (all live beams are dead), or by the stopping rule.
        if stop == "none":
            done = at_limit
        elif stop == "count":
            done = (n_finished >= K) | at_limit
        else:
            # Longest reachable |Y| is lim + 1, the shortest t + 1; take the larger penalty of the two ends.
            bound = live_scores[:, 0] / lp_limit.clamp(min=length_penalty_factor(t + 1, alpha))
            done = (best_score >= bound) | at_limit

        # Reorder rows to the live beams' parents, dropping done sentences.
        rows = (first_rows[:, None] + live_beam).view(-1)
        keep = None
        if bool(done.any()):  # the one host sync per step
            # Every active sentence's result so far: those that stay are written again when they leave.
            out_score[ids], out_len[ids], out_tokens[ids] = best_score, best_len, best_tokens
            keep = (~done).nonzero().squeeze(1)
            if keep.numel() == 0:
                break
            memory, src_mask, ids, lim, lp_limit = memory[keep], src_mask[keep], ids[keep], lim[keep], lp_limit[keep]
            best_score, best_len, best_tokens, n_finished = (
                best_score[keep],
                best_len[keep],
                best_tokens[keep],
                n_finished[keep],
            )
            live_scores, live_tok, live_beam = live_scores[keep], live_tok[keep], live_beam[keep]
            rows = rows.view(B, K)[keep].view(-1)
            first_rows = first_rows[: keep.numel()]
        scores = live_scores
        hist = torch.cat([hist[rows], live_tok.reshape(-1, 1)], dim=1)
        last = live_tok.reshape(-1, 1)
        if cache is not None:
            cache.reorder(live_beam, keep)

    if cache is not None and hasattr(
        model, "recycle"
    ):  # a model without it (any object with encode/decode) keeps nothing
        model.recycle(cache)
    lengths = out_len.tolist()
    tokens = out_tokens.tolist()
    return [row[:n] for row, n in zip(tokens, lengths)], out_score.cpu()
