#!/usr/bin/python3
"""A tiny GPT-style language model trained on token shards through stoker.

Quick start (well under a minute on 2 CPU cores; makes and packs a synthetic stream):

    PYTHONPATH=build/python /usr/bin/python3 examples/train_gpt.py --make-sample /tmp/gpt --steps 50

With a nanoGPT train.bin packed by `stoker pack tokens train.bin DIR --dtype uint16 --seq-len 256`:

    PYTHONPATH=build/python /usr/bin/python3 examples/train_gpt.py --data DIR --vocab 50304 \
        --d-model 384 --layers 6 --batch-size 32

stoker delivers `tokens` and next-token `targets` ([B, seq_len] int64) per batch,
shuffled within windows of compressed records (see include/stoker/order.h); a
checkpoint holds `loader.state_dict()` so a resumed run continues with the next batch.
"""

import argparse
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import stoker


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab, seq_len, d=128, layers=2, heads=4):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(1, seq_len, d))
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied
        nn.init.normal_(self.tok.weight, std=0.02)
        mask = torch.full((seq_len, seq_len), float("-inf")).triu(1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos[:, :t]
        for b in self.blocks:
            x = b(x, self.mask[:t, :t])
        return self.head(self.ln(x))


def make_sample(root, tokens, vocab, seq_len):
    out = os.path.join(root, "tokens")
    if not os.path.exists(os.path.join(out, "MANIFEST")):
        os.makedirs(root, exist_ok=True)
        raw = os.path.join(root, "train.bin")
        print(f"making a {tokens}-token synthetic stream (vocab {vocab}) and packing it ...", flush=True)
        stoker.make_sample_tokens(raw, tokens=tokens, vocab=vocab, dtype="uint16")
        stoker.pack_tokens(raw, out, dtype="uint16", seq_len=seq_len, zstd=3, overwrite=True)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", help="stoker token dataset")
    ap.add_argument("--make-sample", metavar="DIR", help="make and pack a synthetic token stream under DIR")
    ap.add_argument("--tokens", type=int, default=1 << 18, help="--make-sample: stream length")
    ap.add_argument("--vocab", type=int, default=512, help="vocabulary size (tokens must be below it)")
    ap.add_argument("--seq-len", type=int, default=64, help="--make-sample: sequence length")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--checkpoint", help="save model + optimizer + loader state here at the end; resume from it")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    if a.make_sample:
        a.data = make_sample(a.make_sample, a.tokens, a.vocab, a.seq_len)
    if not a.data:
        ap.error("give --data DIR or --make-sample DIR")
    torch.manual_seed(a.seed)
    device = torch.device(a.device)

    loader_device = str(device) if device.type == "cuda" and stoker.has_cuda else "cpu"
    loader = stoker.Loader(a.data, batch_size=a.batch_size, targets=True, seed=a.seed, threads=a.threads,
                           drop_last=True, device=loader_device)
    seq_len = int(stoker.read_manifest(a.data)["meta"].get("seq_len", a.seq_len))
    model = TinyGPT(a.vocab, seq_len, d=a.d_model, layers=a.layers).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01)
    step, epoch = 0, 0
    if a.checkpoint and os.path.exists(a.checkpoint):
        ck = torch.load(a.checkpoint)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        loader.load_state_dict(ck["loader"])
        step, epoch = ck["step"], loader.epoch
        print(f"resumed at step {step}, epoch {epoch}, {len(loader)} batches left in the epoch")
    params = sum(p.numel() for p in model.parameters())
    print(f"{loader}: {loader.epoch_samples} rows of {seq_len} tokens; model {params / 1e6:.2f}M params "
          f"on {device}", flush=True)

    t0, tokens_seen, first = time.perf_counter(), 0, step
    done = False
    while not done:
        for batch in loader:
            x = batch["tokens"].to(device, non_blocking=True)
            y = batch["targets"].to(device, non_blocking=True)
            del batch
            logits = model(x)
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            step += 1
            tokens_seen += x.numel()
            if step % 10 == 0 or step == first + 1:
                print(f"step {step:5d} loss {loss.item():.3f} (ppl {math.exp(min(loss.item(), 20)):.1f})",
                      flush=True)
            if step - first >= a.steps:
                done = True
                break
        else:
            epoch += 1
            loader.set_epoch(epoch)
    dt = time.perf_counter() - t0
    print(f"{step - first} steps, {tokens_seen / dt:.0f} tokens/s; loader: {loader.summary()}")
    if a.checkpoint:
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "loader": loader.state_dict(),
                    "step": step}, a.checkpoint)
        print(f"saved {a.checkpoint}")


if __name__ == "__main__":
    main()
