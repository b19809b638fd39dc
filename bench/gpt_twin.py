#!/usr/bin/env python3
"""examples/gpt's default run in PyTorch (Debian's python3-torch): the same model, data, tokens and
hyperparameters, to compare the held-out loss each reaches and the time a step takes.

    build/release/examples/gpt/gpt --steps 0 --sample-len 0 --write-tokens /tmp/jargon   # the tokens
    /usr/bin/python3 bench/gpt_twin.py --tokens /tmp/jargon --seed 0 --threads 2

(scripts/bench --gpt-quality runs both over 3 seeds and prints the table.)

The same as `gpt` with its defaults: gpt2 `--size small` (4 pre-norm blocks, d_model 128, 4 heads,
ff 512, GELU's tanh form, learned positions over 128, a final LayerNorm, the output tied to the
token embedding), initialised N(0, 0.02) with the residual projections N(0, 0.02/sqrt(2*4)) and
biases 0; AdamW (betas 0.9, 0.99, eps 1e-8) with weight decay 0.1 on the 2-D weights only;
the rate rising linearly to 3e-3 over 60 steps, then cosine to 3e-4 at step 600; gradients
clipped to norm 1; batches of 16 windows of 128 tokens, every start in the training tokens, in
a fresh random order each epoch; the held-out loss on the same 32 windows spread evenly over the
held-out tokens. What differs is only the random stream (weights, order) for a seed.
Prints one line: the seed, the held-out loss at the end, the median and mean time a step.
"""
import argparse
import math
import os
import statistics
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from bench_gpt_torch import limit_openblas


class Gpt2(nn.Module):
    def __init__(self, vocab, layers, d, heads, ff, positions):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(positions, d)
        gelu_tanh = lambda x: F.gelu(x, approximate="tanh")  # noqa: E731
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(d, heads, ff, 0.0, activation=gelu_tanh, batch_first=True, norm_first=True)
            for _ in range(layers))
        self.norm = nn.LayerNorm(d)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() >= 2:
                residual = name.endswith("out_proj.weight") or name.endswith("linear2.weight")
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers) if residual else 0.02)

    def forward(self, tokens):
        T = tokens.shape[1]
        h = self.wte(tokens) + self.wpe(torch.arange(T))
        mask = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)
        for block in self.blocks:
            h = block(h, src_mask=mask)
        return self.norm(h) @ self.wte.weight.t()  # tied


def windows(tokens, T, starts):
    idx = torch.as_tensor(starts)[:, None] + torch.arange(T + 1)[None, :]
    w = tokens[idx]
    return w[:, :T], w[:, 1:]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", required=True, help="the PREFIX gpt --write-tokens wrote")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=600)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    limit_openblas(a.threads)
    train = torch.from_numpy(np.load(a.tokens + ".train.npy"))
    held = torch.from_numpy(np.load(a.tokens + ".held_out.npy"))
    vocab, layers, d, heads, ff, T, batch = 512, 4, 128, 4, 512, 128, 16
    # gpt's defaults: the warm-up is 100 steps but at most a tenth of the decay (60 of 600 steps)
    lr, min_lr, decay_steps, clip = 3e-3, 3e-4, a.steps, 1.0
    warmup = min(100, decay_steps // 10)
    vocab = max(vocab, int(max(train.max(), held.max())) + 1)

    torch.manual_seed(a.seed)
    model = Gpt2(vocab, layers, d, heads, ff, T)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.99), eps=1e-8)

    def rate(step):  # optim::WarmupCosineLR
        if step < warmup:
            return lr * (step + 1) / (warmup + 1)  # nanoGPT's get_lr
        progress = min(1.0, (step - warmup) / (decay_steps - warmup))
        return min_lr + (lr - min_lr) * 0.5 * (1 + math.cos(math.pi * progress))

    n_windows = train.numel() - T  # every start s with s + T + 1 <= n
    held_count = (held.numel() - T - 1) // T + 1  # back-to-back windows, as data::TextDataset(held, T)
    count = min(held_count, 32)
    held_x, held_y = windows(held, T, [(k * held_count // count) * T for k in range(count)])

    def held_out_loss():
        model.eval()
        with torch.no_grad():
            total = sum(F.cross_entropy(model(held_x[i:i + 8]).reshape(-1, vocab), held_y[i:i + 8].reshape(-1)).item()
                        * len(held_x[i:i + 8]) for i in range(0, count, 8))
        model.train()
        return total / count

    gen = torch.Generator().manual_seed(a.seed + 1)
    order, used = torch.randperm(n_windows, generator=gen), 0
    times = []
    model.train()
    for step in range(a.steps):
        start = time.perf_counter()
        if used + batch > n_windows:  # drop_last: a fresh order each epoch
            order, used = torch.randperm(n_windows, generator=gen), 0
        x, y = windows(train, T, order[used:used + batch].tolist())
        used += batch
        for g in opt.param_groups:
            g["lr"] = rate(step)
        loss = F.cross_entropy(model(x).reshape(-1, vocab), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        times.append(time.perf_counter() - start)
    print(f"PyTorch {torch.__version__}\tseed {a.seed}\theld-out loss {held_out_loss():.4f}\t"
          f"{statistics.median(times) * 1e3:.0f} ms a step (median)\t{statistics.mean(times) * 1e3:.0f} ms (mean)\t"
          f"{a.threads} threads\tload {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
