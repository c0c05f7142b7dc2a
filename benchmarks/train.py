"""Training speed: llmkit's Transformer next to Hugging Face's GPT2LMHeadModel, in one run.

    python benchmarks/train.py                # ~3 minutes on 2 CPU cores
    python benchmarks/train.py --threads 1 --rounds 3

Both models have the same shape and settings (GPT-2 family, 6 layers x 384 wide, 6 heads, vocab
4096, context 256, batch 8, dropout 0, float32), start from the same weights (llmkit imports the
Hugging Face model's), and take AdamW steps on the same batches of course text through the same
loss. The script prints training tokens/s of each and their ratio, the losses after the last step
(they should agree: it is the same computation), then bfloat16 autocast against float32 for
llmkit: speed-up and what it does to the loss.

The two sides take turns, a few steps each, so both see the same load on a shared machine; the
figure is the median round. Expect 10-30 % drift between runs on a busy machine.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from llmkit.training.data import load_tokens, random_batch  # noqa: E402
from llmkit.model.weights import from_hf  # noqa: E402
from llmkit.paths import data_path  # noqa: E402
from llmkit.training.loop import autocast, lm_loss  # noqa: E402

SHAPE = dict(n_layers=6, d_model=384, n_heads=6, vocab_size=4096, context=256)
BATCH = 8


def hf_gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=SHAPE["vocab_size"], n_positions=SHAPE["context"], n_embd=SHAPE["d_model"],
                        n_layer=SHAPE["n_layers"], n_head=SHAPE["n_heads"], resid_pdrop=0.0, embd_pdrop=0.0,
                        attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(config)


class Trainer:
    """One model, its AdamW, and a step over the shared batches; logits come out of ``forward``."""

    def __init__(self, model: torch.nn.Module, forward, dtype: str = "float32"):
        self.model, self.forward, self.dtype = model.train(), forward, dtype
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1, betas=(0.9, 0.95))
        self.losses: list[float] = []
        self.seconds: list[float] = []

    def run(self, batches) -> None:
        start = time.perf_counter()
        for batch in batches:
            with autocast(torch.device("cpu"), self.dtype):
                logits = self.forward(self.model, batch.inputs)
            loss = lm_loss(logits, batch.targets)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.optimizer.step()
            self.losses.append(loss.item())
        self.seconds.append(time.perf_counter() - start)

    def tokens_per_s(self, steps_per_round: int) -> float:
        return steps_per_round * BATCH * SHAPE["context"] / statistics.median(self.seconds[1:])  # round 0: warm-up


def race(trainers: dict[str, Trainer], tokens, rounds: int, steps: int) -> None:
    """Every trainer takes the same ``steps`` batches in turn, round after round."""
    for r in range(rounds + 1):
        batches = [random_batch(tokens, BATCH, SHAPE["context"], seed=0, step=r * steps + i) for i in range(steps)]
        for trainer in trainers.values():
            trainer.run(batches)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (after one warm-up round)")
    parser.add_argument("--steps", type=int, default=3, help="optimizer steps per round")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    text = load_tokens(data_path("corpus", "train.txt"), data_path("models", "base", "tokenizer.json"))

    hf = hf_gpt2()
    ours = from_hf(hf)  # same weights, so the losses must match step for step
    print(f"GPT-2 shape {SHAPE}, batch {BATCH}, {ours.num_params() / 1e6:.1f}M parameters, "
          f"{args.threads} threads, torch {torch.__version__}")

    trainers = {"llmkit": Trainer(ours, lambda m, ids: m(ids)),
                "hf": Trainer(hf, lambda m, ids: m(ids).logits)}
    race(trainers, text.tokens, args.rounds, args.steps)
    speed = {name: t.tokens_per_s(args.steps) for name, t in trainers.items()}
    print(f"training tokens/s   llmkit {speed['llmkit']:8,.0f}   HF GPT2LMHeadModel {speed['hf']:8,.0f}   "
          f"ratio llmkit/HF {speed['llmkit'] / speed['hf']:.2f}x")
    last = {name: t.losses[-1] for name, t in trainers.items()}
    print(f"loss after {len(trainers['hf'].losses)} steps   llmkit {last['llmkit']:.4f}   HF {last['hf']:.4f}")

    fp32, bf16 = (from_hf(hf_gpt2()) for _ in range(2))  # a fresh pair, same start
    trainers = {"float32": Trainer(fp32, lambda m, ids: m(ids)),
                "bfloat16": Trainer(bf16, lambda m, ids: m(ids), dtype="bfloat16")}
    race(trainers, text.tokens, args.rounds, args.steps)
    speed = {name: t.tokens_per_s(args.steps) for name, t in trainers.items()}
    last = {name: t.losses[-1] for name, t in trainers.items()}
    print(f"llmkit autocast     float32 {speed['float32']:8,.0f} tok/s   bfloat16 {speed['bfloat16']:8,.0f} tok/s   "
          f"speed-up {speed['bfloat16'] / speed['float32']:.2f}x")
    print(f"loss after {len(trainers['float32'].losses)} steps   float32 {last['float32']:.4f}   "
          f"bfloat16 {last['bfloat16']:.4f}   difference {last['bfloat16'] - last['float32']:+.4f} nats/token")


if __name__ == "__main__":
    main()
