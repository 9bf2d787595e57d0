"""Train a classifier on scikit-learn's 8x8 digits with graphgrad: what ``graphgrad train``
runs, usable from Python.

    python examples/digits_train.py                      # MLP, Adam, 20 epochs
    python examples/digits_train.py --model cnn --epochs 10
"""

from __future__ import annotations

import argparse

from graphgrad.train import DEFAULTS, train_digits


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=["mlp", "cnn"], default=DEFAULTS["model"])
    ap.add_argument("--epochs", type=int, default=DEFAULTS["epochs"])
    ap.add_argument("--batch-size", type=int, default=DEFAULTS["batch_size"])
    ap.add_argument("--lr", type=float, default=DEFAULTS["lr"])
    ap.add_argument("--optimizer", choices=["sgd", "adam", "adamw"],
                    default=DEFAULTS["optimizer"])
    ap.add_argument("--seed", type=int, default=DEFAULTS["seed"])
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    ap.add_argument("--no-plot", action="store_true", help="no loss-curve PNG")
    ap.add_argument("--out", default=DEFAULTS["out_dir"], help="checkpoint folder")
    args = ap.parse_args(argv)
    return train_digits(model=args.model, epochs=args.epochs, batch_size=args.batch_size,
                        lr=args.lr, optimizer=args.optimizer, seed=args.seed,
                        quiet=args.quiet, out_dir=args.out, plot=not args.no_plot)


if __name__ == "__main__":
    main()
