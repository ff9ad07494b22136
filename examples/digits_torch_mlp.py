"""Diagnose the embeddings of a small PyTorch MLP trained with InfoNCE on the scikit-learn digits.

A two-layer MLP (64 -> 128 -> 32) is trained for a few hundred steps with a one-directional
in-batch InfoNCE loss (CLIP-style: each anchor's positive is another image of the same digit, its
negatives the other B - 1 positives of the batch, so k = B - 1). The trained embeddings, a
``torch.Tensor``, go to ``simkit.diagnose`` as they are (it detaches them). The answer says how far
the loss at this batch size is from its k -> infinity limit, and how many negatives would bring the
bias within eps. Needs PyTorch (CPU is enough). See docs/diagnose.md.

Run from the repository root::

    python examples/digits_torch_mlp.py [--steps 150] [--report mlp.pdf]
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from sklearn.datasets import load_digits

import simkit


def train(x: torch.Tensor, y: np.ndarray, *, tau: float, batch: int, steps: int, seed: int) -> torch.nn.Module:
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 32))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    by_label = [np.flatnonzero(y == c) for c in range(10)]
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        anchors = torch.randperm(x.shape[0], generator=gen)[:batch].numpy()
        partners = np.array([rng.choice(by_label[y[a]]) for a in anchors])
        za = torch.nn.functional.normalize(model(x[anchors]), dim=1)
        zp = torch.nn.functional.normalize(model(x[partners]), dim=1)
        logits = za @ zp.T / tau  # row i: its positive on the diagonal, the other B - 1 as negatives
        loss = torch.nn.functional.cross_entropy(logits, torch.arange(batch))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=150, help="training steps (default 150)")
    parser.add_argument("--batch", type=int, default=64, help="batch size B (default 64)")
    parser.add_argument("--tau", type=float, default=0.2, help="temperature (default 0.2)")
    parser.add_argument("--report", help="write the PDF report here")
    args = parser.parse_args(argv)

    x_np, y = load_digits(return_X_y=True)
    x = torch.tensor(x_np / 16.0, dtype=torch.float32)
    model = train(x, y, tau=args.tau, batch=args.batch, steps=args.steps, seed=0)
    emb = model(x)  # requires grad: simkit.diagnose detaches it
    dg = simkit.diagnose(emb, labels=torch.tensor(y), tau=args.tau, batch_size=args.batch)
    print(dg.summary())
    print()
    print(f"negatives needed for |bias| <= 0.01 nats: {dg.k_needed(0.01)}")
    if args.report:
        dg.to_pdf(args.report)
        print(f"wrote {args.report}")
    return dg


if __name__ == "__main__":
    main()
