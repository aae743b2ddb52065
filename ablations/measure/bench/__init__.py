"""`ablate bench`: our training step and decoder measured side by side with their peers, in one process.

Every contender gets the same model dimensions, the same batches (TokenBudgetBatchSampler on the built-in
corpus), the same thread count, the same precision, the same loss (label-smoothed cross entropy) and the
same optimiser algorithm (Adam(0.9, 0.98, 1e-9) with the inverse-square-root schedule). Contenders run
interleaved, one after another in every round, and each figure is the median over rounds, so a burst of load
from other processes hits them all alike.

Training contenders:
* ``ours``: TranslationModule.training_step and its optimiser driven by a Lightning Trainer (logger,
  checkpoints, progress bar and validation off, as far as Lightning allows);
* ``bare_loop``: the same Transformer, loss and optimiser in a plain PyTorch loop (the cost of Lightning);
* ``marian``: Hugging Face MarianMTModel at the same dimensions (post-norm, ReLU, tied embeddings);
* ``torch_transformer``: torch.nn.Transformer at the same dimensions, with our embeddings and tied output.

Each round a contender trains on a warm-up batch and then on the timed batches; throughput is non-pad target
tokens of the timed batches over their wall time (the Trainer's start-up in each round is not timed: it is a
one-off cost of a run, not of a step).

Decoding: beam 4 on dev sentences with our cached decoder, our decoder without the key/value cache (outputs
must be identical) and Hugging Face ``generate(num_beams=4)`` on a MarianMTModel holding our weights (the
residual-stream dimensions permuted so that Marian's half-split sinusoids equal our interleaved ones; the
teacher-forced logits are checked to agree). Length penalty 0 for all three: HF normalises by |Y|^alpha,
GNMT by ((5+|Y|)/6)^alpha, and only at alpha = 0 do both rank hypotheses alike, so outputs can be compared.

The package, top to bottom: run.py (the bench, phase by phase, and the levers), contenders.py (what is timed) and
marian.py (Hugging Face at our dimensions, and our weights in it), batches.py (the corpus and its batches),
timing.py (clocks, interleaving, FLOPs, memory), options.py (what to measure and on what machine); report.py
writes results/bench.md from a result. The levers are switched as values (the attention kernel is set on the
model's attention modules; the native kernels through `native.switched`), never by patching another module.
"""
