#!/usr/bin/python3
"""The inner-step loop of tests/bench/inner_step_bench.cpp in PyTorch Python, as the baseline.

Same GPT as src/models/gpt.cpp (pre-norm blocks, fused qkv, attention written out with a
lower-triangular mask, GELU MLP, tied head, nanoGPT init), same step: zero grads, forward on a
random byte batch, backward, clip_grad_norm_(1.0), torch.optim.AdamW (default implementation,
lr 1e-3, betas 0.9/0.95, wd 0.1). Run with Debian's /usr/bin/python3 + python3-torch (the same
libtorch 1.13 as the C++ build). Prints one JSON line.
"""
import argparse
import json
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, dim, heads, dropout, seq_len):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.register_buffer("future", torch.ones(seq_len, seq_len, dtype=torch.bool).triu(1))

    def forward(self, x):  # x [B, T, C]
        B, T, C = x.shape
        hd = C // self.heads
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.heads, hd).transpose(1, 2)  # [B, H, T, hd]
        k = k.view(B, T, self.heads, hd).transpose(1, 2)
        v = v.view(B, T, self.heads, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(self.future[:T, :T], float("-inf"))
        att = F.dropout(torch.softmax(att, dim=-1), self.dropout, self.training)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return F.dropout(self.proj(y), self.dropout, self.training)


class Block(nn.Module):
    def __init__(self, dim, heads, dropout, seq_len):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, dropout, seq_len)
        self.ln2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.fc_proj = nn.Linear(4 * dim, dim)
        self.dropout = dropout

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        h = self.fc_proj(F.gelu(self.fc(self.ln2(x))))
        return x + F.dropout(h, self.dropout, self.training)


class Gpt(nn.Module):
    def __init__(self, layers, heads, dim, seq_len, vocab, dropout):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, dim)
        self.pos_emb = nn.Embedding(seq_len, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, dropout, seq_len) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.dropout = dropout
        # nanoGPT init: N(0, 0.02), residual projections N(0, 0.02 / sqrt(2 layers)), zero biases.
        for name, p in self.named_parameters():
            if name.endswith("bias") or ".ln" in name or name.startswith("ln_f"):
                continue
            std = 0.02 / math.sqrt(2 * layers) if name.endswith("proj.weight") else 0.02
            nn.init.normal_(p, 0.0, std)

    def forward(self, tokens):  # [B, T] -> logits [B, T, vocab]
        T = tokens.shape[1]
        x = self.tok_emb(tokens) + self.pos_emb.weight[:T]
        x = F.dropout(x, self.dropout, self.training)
        for block in self.blocks:
            x = block(x)
        return F.linear(self.ln_f(x), self.tok_emb.weight)  # tied head


class ConvNet(nn.Module):
    """src/models/convnet.h: cnn (the FedAvg paper's MNIST CNN) or lenet5, on 28x28 images."""

    def __init__(self, kind, classes=10, side=28):
        super().__init__()
        if kind == "cnn":
            self.conv1, self.conv2, hidden = nn.Conv2d(1, 32, 5, padding=2), nn.Conv2d(32, 64, 5, padding=2), [512]
        else:
            self.conv1, self.conv2, hidden = nn.Conv2d(1, 6, 5, padding=2), nn.Conv2d(6, 16, 5), [120, 84]
        with torch.no_grad():
            flat = self.features(torch.zeros(1, 1, side, side)).numel()
        widths = [flat] + hidden
        self.fc = nn.ModuleList(nn.Linear(widths[i], widths[i + 1]) for i in range(len(hidden)))
        self.out = nn.Linear(widths[-1], classes)

    def features(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        return F.max_pool2d(F.relu(self.conv2(x)), 2).flatten(1)

    def forward(self, x):  # [B, 784] -> logits [B, classes]
        x = self.features(x.view(-1, 1, 28, 28))
        for f in self.fc:
            x = F.relu(f(x))
        return self.out(x)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gpt", help="gpt, cnn or lenet5")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=0, help="0 = all cores")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    threads = a.threads if a.threads > 0 else os.cpu_count()
    torch.set_num_threads(threads)
    torch.manual_seed(a.seed)
    device = torch.device(a.device)
    image = a.model != "gpt"
    if image:
        a.seq_len = 1
    model = (ConvNet(a.model) if image else Gpt(a.layers, a.heads, a.dim, a.seq_len, a.vocab, 0.0)).to(device)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.1)
    gen = torch.Generator().manual_seed(a.seed + 1)
    params = sum(p.numel() for p in model.parameters())

    start = time.perf_counter()
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            sum(p.sum() for p in model.parameters()).item()  # drain queued device work
            start = time.perf_counter()
        if image:
            x = torch.randn(a.batch, 784, generator=gen).to(device, non_blocking=True)
            y = torch.randint(10, (a.batch,), generator=gen).to(device, non_blocking=True)
        else:
            tokens = torch.randint(a.vocab, (a.batch, a.seq_len + 1), generator=gen)
            x = tokens[:, :-1].to(device, non_blocking=True)
            y = tokens[:, 1:].to(device, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    final_loss = loss.item()  # also a device sync
    seconds = time.perf_counter() - start
    tokens_done = a.steps * a.batch * a.seq_len
    print(json.dumps({
        "impl": "pytorch", "model": a.model, "threads": threads, "device": a.device, "params": params,
        "batch": a.batch, "seq_len": a.seq_len, "steps": a.steps, "seconds": round(seconds, 4),
        "ms_per_step": round(1e3 * seconds / a.steps, 3),
        "tokens_per_s": round(tokens_done / seconds, 1), "final_loss": round(final_loss, 4),
        "torch": torch.__version__,
    }))


if __name__ == "__main__":
    main()
