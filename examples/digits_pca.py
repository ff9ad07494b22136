"""How many negatives does InfoNCE need on PCA embeddings of the scikit-learn digits?

The 1797 digit images are embedded by a 16-component PCA; the positives of an image are the other
images of the same digit (supervised-contrastive pairs). ``simkit.diagnose`` answers with the exact
finite-k bias of InfoNCE on this set: the k from which |bias| stays within eps, and the bias at the
k of a SimCLR-style batch (symmetric NT-Xent: k = 2B - 2). See docs/diagnose.md.

Run from the repository root::

    python examples/digits_pca.py [--report digits_pca.pdf]
"""

from __future__ import annotations

import argparse

from sklearn.datasets import load_digits
from sklearn.decomposition import PCA

import simkit


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", help="write the PDF report here")
    parser.add_argument("--tau", type=float, default=0.2, help="temperature (default 0.2)")
    args = parser.parse_args(argv)

    x, y = load_digits(return_X_y=True)
    emb = PCA(n_components=16, random_state=0).fit_transform(x / 16.0)
    dg = simkit.diagnose(emb, labels=y, tau=args.tau, batch_size=128, symmetric=True)
    print(dg.summary())
    print()
    for eps in (0.1, 0.01, 0.001):
        print(f"negatives needed for |bias| <= {eps:g} nats: {dg.k_needed(eps)}")
    print(f"a batch of 128 pairs with NT-Xent (k = 254): bias {dg.bias_at(254)}")
    if args.report:
        dg.to_pdf(args.report)
        print(f"wrote {args.report}")
    return dg


if __name__ == "__main__":
    main()
