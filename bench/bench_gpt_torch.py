#!/usr/bin/env python3
"""bench_gpt.cpp's twin in PyTorch (Debian's python3-torch): the same GPT, the same step.

    /usr/bin/python3 bench/bench_gpt_torch.py --model gpt-M --threads 1 [--steps 5] [--bf16]

(Debian's interpreter, which python3-torch is installed for.)

The blocks are nn.TransformerEncoderLayer(norm_first=True, activation="gelu", batch_first=True)
with a causal mask, learned positions, a final LayerNorm, logits tied to the token embedding;
AdamW(lr 3e-4, weight_decay 0.1). Debian's torch runs its matrix products in OpenBLAS, whose
thread pool torch.set_num_threads does not govern: it is limited through
openblas_set_num_threads (ctypes). --bf16 runs the step under
torch.autocast("cpu", dtype=torch.bfloat16); --flush-denormal calls torch.set_flush_denormal(True).
Prints one line like bench_gpt's: median step,
tokens/s, the share of the step in matrix products (torch.profiler's self CPU time of aten::mm,
addmm, bmm, baddbmm, matmul's kernels), peak memory (ru_maxrss) and the parameter count.
"""
import argparse
import ctypes
import ctypes.util
import glob
import os
import resource
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

SHAPES = {  # layers, d_model, heads, ff, positions, vocab, T, batch, dropout
    "gpt-M": (6, 384, 6, 1536, 256, 256, 256, 8, 0.1),
    "gpt2-124M": (12, 768, 12, 3072, 1024, 50257, 64, 4, 0.0),
}


def limit_openblas(threads):
    """openblas_set_num_threads in whichever OpenBLAS torch loaded; the library's name, or None."""
    candidates = [ctypes.util.find_library("openblas")] + glob.glob("/usr/lib/x86_64-linux-gnu/openblas*/libopenblas*.so*")
    for name in candidates + glob.glob("/usr/lib/x86_64-linux-gnu/openblas*/libblas.so.3"):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
            lib.openblas_set_num_threads(threads)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            return f"{os.path.basename(name)} {lib.openblas_get_corename().decode()}"
        except (OSError, AttributeError):
            continue
    return None


class Gpt(nn.Module):
    def __init__(self, layers, d, heads, ff, positions, vocab, dropout):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(positions, d)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(d, heads, ff, dropout, activation="gelu", batch_first=True, norm_first=True)
            for _ in range(layers))
        self.norm = nn.LayerNorm(d)

    def forward(self, tokens):
        T = tokens.shape[1]
        h = self.drop(self.tok(tokens) + self.pos(torch.arange(T)))
        mask = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)
        for block in self.blocks:
            h = block(h, src_mask=mask)
        return self.norm(h) @ self.tok.weight.t()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="gpt-M", choices=SHAPES)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--flush-denormal", action="store_true", help="torch.set_flush_denormal(True)")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.set_flush_denormal(a.flush_denormal)
    blas = limit_openblas(a.threads)
    layers, d, heads, ff, positions, vocab, T, batch, dropout = SHAPES[a.model]
    torch.manual_seed(0)
    gpt = Gpt(layers, d, heads, ff, positions, vocab, dropout)
    gpt.train()
    opt = torch.optim.AdamW(gpt.parameters(), lr=3e-4, weight_decay=0.1)
    gen = torch.Generator().manual_seed(1)

    def step():
        tokens = torch.randint(0, vocab, (batch, T + 1), generator=gen)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
            logits = gpt(tokens[:, :T])
            loss = F.cross_entropy(logits.reshape(-1, vocab).float(), tokens[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()

    step()  # warm-up
    times = []
    for _ in range(a.steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        step()
        wall = time.perf_counter() - start
    products = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"}
    gemm_us = sum(e.self_cpu_time_total for e in prof.key_averages() if e.key in products)
    share = gemm_us * 1e-6 / wall
    params = sum(t.numel() for t in gpt.parameters())
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{a.model}\tPyTorch {torch.__version__} {'bf16 autocast' if a.bf16 else 'fp32'}\t{a.threads} threads\t"
          f"{blas or 'OpenBLAS not found'}\t{median * 1e3:.1f} ms\t{batch * T / median:.0f} tokens/s\t"
          f"{share * 100:.0f}% in matrix products\t{peak_mb:.0f} MB peak\t{params} parameters\t"
          f"load {os.getloadavg()[0]:.2f}{chr(9) + 'subnormals flushed' if a.flush_denormal else ''}")


if __name__ == "__main__":
    main()
