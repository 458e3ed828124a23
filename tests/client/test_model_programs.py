"""Whole programs in the shape of what people write with torch.nn and torch.optim, run through gradserve.torch
on a real server and, when torch is installed, through torch from the same seed: a small CNN with BatchNorm and
Dropout in train and eval mode, a character-level LSTM, a transformer block with scaled_dot_product_attention,
a scheduler-driven loop, and a state dict saved and restored. The losses and parameters must agree."""

from __future__ import annotations

import io

import numpy as np
import pytest

import gradserve.torch as torch


def _cnn_program(mod):
    nn, F = mod.nn, mod.nn.functional

    class SmallCNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                nn.Conv2d(4, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d((1, 1)))
            self.drop = nn.Dropout(0.25)
            self.head = nn.Linear(8, 3)

        def forward(self, x):
            x = self.features(x).flatten(1)
            return self.head(self.drop(x))

    mod.manual_seed(0)
    model = SmallCNN()
    opt = mod.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    images = mod.randn(6, 1, 8, 8)
    labels = mod.tensor([0, 1, 2, 0, 1, 2])
    losses = []
    for _ in range(3):
        model.train()
        opt.zero_grad()
        loss = F.cross_entropy(model(images), labels)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    with mod.no_grad():
        eval_logits = model(images)
    return losses, eval_logits.tolist(), model.state_dict()["features.1.running_var"].tolist()


def _char_lstm_program(mod):
    nn = mod.nn
    text = "hello gradserve, hello torch"
    vocab = sorted(set(text))
    ids = mod.tensor([vocab.index(c) for c in text])

    class CharLSTM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(len(vocab), 8)
            self.lstm = nn.LSTM(8, 16, batch_first=True)
            self.out = nn.Linear(16, len(vocab))

        def forward(self, x):
            h, _ = self.lstm(self.embed(x))
            return self.out(h)

    mod.manual_seed(3)
    model = CharLSTM()
    opt = mod.optim.Adam(model.parameters(), lr=0.01)
    x, y = ids[:-1].unsqueeze(0), ids[1:].unsqueeze(0)
    losses = []
    for _ in range(3):
        opt.zero_grad()
        logits = model(x)
        loss = nn.functional.cross_entropy(logits.reshape(-1, len(vocab)), y.reshape(-1))
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    return losses


def _transformer_program(mod):
    nn, F = mod.nn, mod.nn.functional

    class Block(nn.Module):
        def __init__(self, d=16, heads=2):
            super().__init__()
            self.heads = heads
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
            q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
            return x + self.mlp(self.ln2(x))

    mod.manual_seed(5)
    block = Block()
    opt = mod.optim.AdamW(block.parameters(), lr=1e-3)
    sched = mod.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=3)
    x = mod.randn(2, 5, 16)
    losses, lrs = [], []
    for _ in range(3):
        opt.zero_grad()
        loss = block(x).pow(2).mean()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
        lrs.append(sched.get_last_lr()[0])
    return losses, lrs


@pytest.mark.parametrize("program", [_cnn_program, _char_lstm_program, _transformer_program],
                         ids=["cnn", "char_lstm", "transformer"])
def test_model_program_runs_and_matches_torch(ctx, program):
    got = program(torch)
    assert np.isfinite(np.array(got[0] if isinstance(got, tuple) else got, dtype=float)).all()
    real = pytest.importorskip("torch")
    ref = program(real)
    if isinstance(ref, tuple):
        for g, r in zip(got, ref):
            np.testing.assert_allclose(np.array(g, dtype=float), np.array(r, dtype=float), rtol=1e-4, atol=1e-5)
    else:
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


def test_state_dict_saved_and_restored_resumes_the_same_training(ctx):
    nn = torch.nn
    torch.manual_seed(2)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 4), torch.randn(16, 1)

    def step(m, o):
        o.zero_grad()
        loss = ((m(x) - y) ** 2).mean()
        loss.backward()
        o.step()
        return loss.item()

    step(model, opt)
    buffer = io.BytesIO()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer)
    clone = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 1))
    clone.load_state_dict(saved["model"])
    clone_opt = torch.optim.Adam(clone.parameters(), lr=0.01)
    clone_opt.load_state_dict(saved["opt"])
    assert int(clone[1].num_batches_tracked) == 1
    assert step(clone, clone_opt) == pytest.approx(step(model, opt), rel=1e-6)
    for a, b in zip(model.state_dict().values(), clone.state_dict().values()):
        np.testing.assert_allclose(np.array(a.tolist(), dtype=float), np.array(b.tolist(), dtype=float), rtol=1e-6)
