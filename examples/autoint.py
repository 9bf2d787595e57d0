"""AutoInt in one dimension: fit a network's derivative, integrate with the network.

What it shows: automatic integration (Lindell, Martel & Wetzstein, "AutoInt:
Automatic Integration for Fast Neural Volume Rendering", CVPR 2021). Take an
*integral network* Phi(x). Its *grad network* dPhi/dx is built by graphgrad's
autodiff (``graphgrad.autograd.grad(Phi(x).sum(), x, create_graph=True)``) and shares
Phi's parameters. Train the grad network to fit a signal f; the loss is a function of
a derivative, so its gradient with respect to the weights is a mixed second derivative,
which graphgrad gets by differentiating the extended graph again. Afterwards, by the
fundamental theorem of calculus,

    integral_a^b f(x) dx  ~=  integral_a^b dPhi/dx dx  =  Phi(b) - Phi(a),

two evaluations of Phi for any interval, instead of the many evaluations of the fitted
network that numerical quadrature needs.

Setup: f is a sum of three Gaussians on [-2, 2] (its exact integral comes from erf);
Phi is a 1-64-1 tanh MLP in float64, so dPhi/dx is a sum of sech^2 bumps; 256 uniform
random samples per step, MSE, Adam (lr 1e-2, cosine-annealed). The script reports the
integral over the whole domain and over random sub-intervals against the exact value
and against composite-Simpson quadrature of f and of the fitted grad network, and
times AutoInt (2 evaluations of Phi per interval) against quadrature of the grad
network. (The paper's 1-D experiment fits a polynomial with a 4x128 swish network;
for volume rendering it reports more than 10x faster rendering.)

    python examples/autoint.py
    python examples/autoint.py --iters 500 --quiet       # small configuration
"""

from __future__ import annotations

import argparse
import math
import os
import time

import numpy as np

import graphgrad
from graphgrad.utils.progress import progress_bar
from graphgrad import nn

DTYPE = graphgrad.float64
DOMAIN = (-2.0, 2.0)
# the target: sum_i A_i exp(-(x - mu_i)^2 / (2 sigma_i^2))
AMPLITUDES = np.array([1.0, 0.6, 0.8])
CENTERS = np.array([-1.0, 0.2, 1.1])
WIDTHS = np.array([0.3, 0.15, 0.4])


def target(x: np.ndarray) -> np.ndarray:
    """f(x), the sum of Gaussians, on a NumPy array."""
    z = (x[..., None] - CENTERS) / WIDTHS
    return (AMPLITUDES * np.exp(-0.5 * z * z)).sum(-1)


def exact_integral(a, b) -> np.ndarray:
    """integral_a^b f exactly: each Gaussian integrates to a difference of erf."""
    erf = np.vectorize(math.erf)
    a, b = np.asarray(a, dtype=np.float64)[..., None], np.asarray(b, dtype=np.float64)[..., None]
    s = WIDTHS * math.sqrt(2.0)
    return (AMPLITUDES * WIDTHS * math.sqrt(math.pi / 2.0)
            * (erf((b - CENTERS) / s) - erf((a - CENTERS) / s))).sum(-1)


def simpson(values: np.ndarray, a, b) -> np.ndarray:
    """Composite Simpson's rule over the last axis (an odd number of equally spaced
    samples from a to b)."""
    n = values.shape[-1]
    if n % 2 == 0 or n < 3:
        raise ValueError(f"Simpson's rule needs an odd number >= 3 of samples, got {n}")
    w = np.ones(n)
    w[1:-1:2], w[2:-1:2] = 4.0, 2.0
    h = (np.asarray(b) - np.asarray(a)) / (n - 1)
    return h * (values * w).sum(-1) / 3.0


def make_phi(width: int, depth: int, scale: float, seed: int) -> nn.Module:
    """The integral network Phi: 1 -> width (x depth hidden layers, tanh) -> 1.

    nn.Linear's default initialisation draws first-layer slopes from U(-1, 1), so every
    sech^2 bump of dPhi/dx starts about as wide as the domain. Like SIREN's w0 (which
    the paper's code uses), scale multiplies the first layer: slopes in U(-scale,
    scale) and bump centres -bias/slope spread over the domain."""
    graphgrad.manual_seed(seed)
    layers, fan_in = [], 1
    for _ in range(depth):
        layers += [nn.Linear(fan_in, width), nn.Tanh()]
        fan_in = width
    layers.append(nn.Linear(fan_in, 1))
    phi = nn.Sequential(*layers).to(DTYPE)
    half_width = 0.5 * (DOMAIN[1] - DOMAIN[0])
    with graphgrad.no_grad():
        phi[0].weight.mul_(scale)
        phi[0].bias.mul_(scale * half_width)
    return phi


def grad_network(phi, x, create_graph: bool = True):
    """dPhi/dx at every row of x (n, 1): the grad network, sharing Phi's parameters.
    Each output row depends only on its own input row, so the gradient of the sum is
    the column of pointwise derivatives."""
    x = x.detach().requires_grad_(True)
    (d,) = graphgrad.autograd.grad(phi(x).sum(), x, create_graph=create_graph)
    return d


def fit(phi, args) -> list[float]:
    """Train the grad network dPhi/dx to fit f; returns the loss per step."""
    from graphgrad.optim import Adam
    from graphgrad.optim.lr_scheduler import CosineAnnealingLR

    opt = Adam(phi.parameters(), lr=args.lr)
    sched = CosineAnnealingLR(opt, T_max=args.iters)
    rng = np.random.default_rng(args.seed)
    losses = []
    bar = progress_bar(args.iters, "AutoInt fit", disable=args.quiet, leave=False)
    for it in range(args.iters):
        xn = rng.uniform(*DOMAIN, (args.batch, 1))
        x, y = graphgrad.tensor(xn, dtype=DTYPE), graphgrad.tensor(target(xn), dtype=DTYPE)
        loss = ((grad_network(phi, x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(float(loss))
        bar.update(1)
        if it % 50 == 0:
            bar.set_postfix(loss=f"{loss.item():.2e}")
    bar.close()
    return losses


def autoint(phi, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """integral_a^b dPhi/dx = Phi(b) - Phi(a), for arrays of interval ends."""
    ends = graphgrad.tensor(np.concatenate([a, b]).reshape(-1, 1), dtype=DTYPE)
    with graphgrad.no_grad():
        values = phi(ends).numpy().ravel()
    return values[len(a):] - values[:len(a)]


def quadrature_of_grad_network(phi, a: np.ndarray, b: np.ndarray, points: int) -> np.ndarray:
    """Simpson's rule applied to the fitted grad network: points evaluations of dPhi/dx
    per interval (all intervals in one batch)."""
    t = np.linspace(0.0, 1.0, points)
    xs = a[:, None] + (b - a)[:, None] * t
    d = grad_network(phi, graphgrad.tensor(xs.reshape(-1, 1), dtype=DTYPE),
                     create_graph=False)
    return simpson(d.numpy().reshape(xs.shape), a, b)


def _best_time(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def plot(phi, losses, out: str) -> list[str]:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    os.makedirs(out, exist_ok=True)
    xn = np.linspace(*DOMAIN, 401)
    x = graphgrad.tensor(xn.reshape(-1, 1), dtype=DTYPE)
    d = grad_network(phi, x, create_graph=False).numpy().ravel()
    with graphgrad.no_grad():
        p = phi(x).numpy().ravel()
    exact_cumulative = exact_integral(np.full_like(xn, DOMAIN[0]), xn)
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(15, 4))
    ax1.plot(xn, target(xn), "k-", lw=3, alpha=0.4, label="f (sum of Gaussians)")
    ax1.plot(xn, d, "r--", label="grad network dPhi/dx")
    ax1.set(xlabel="x", title="fit of the grad network")
    ax1.legend()
    ax2.plot(xn, exact_cumulative, "k-", lw=3, alpha=0.4, label="exact integral from -2")
    ax2.plot(xn, p - p[0], "b--", label="Phi(x) - Phi(-2)")
    ax2.set(xlabel="x", title="integral network")
    ax2.legend()
    ax3.semilogy(losses)
    ax3.set(xlabel="step", ylabel="MSE of dPhi/dx against f", title="training")
    path = os.path.join(out, "autoint.png")
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return [path]


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iters", type=int, default=3000, help="Adam steps")
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--batch", type=int, default=256, help="samples of f per step")
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--depth", type=int, default=1, help="hidden layers of Phi")
    parser.add_argument("--scale", type=float, default=5.0,
                        help="first-layer initialisation scale (like SIREN's w0)")
    parser.add_argument("--intervals", type=int, default=1000,
                        help="random sub-intervals to integrate")
    parser.add_argument("--quad-points", type=int, default=101,
                        help="Simpson points per interval for quadrature (odd)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="out/autoint", help="folder for PNG plots")
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)

    phi = make_phi(args.width, args.depth, args.scale, args.seed)
    start = time.perf_counter()
    losses = fit(phi, args)
    fit_seconds = time.perf_counter() - start

    # the whole domain
    a0, b0 = np.array([DOMAIN[0]]), np.array([DOMAIN[1]])
    exact = float(exact_integral(a0, b0)[0])
    fine = np.linspace(*DOMAIN, 10_001)
    quad_f = float(simpson(target(fine), *DOMAIN))
    auto = float(autoint(phi, a0, b0)[0])
    quad_net = float(quadrature_of_grad_network(phi, a0, b0, 10_001)[0])

    # many random sub-intervals
    rng = np.random.default_rng(args.seed + 1)
    ends = np.sort(rng.uniform(*DOMAIN, (args.intervals, 2)), axis=1)
    a, b = ends[:, 0], ends[:, 1]
    exact_ab = exact_integral(a, b)
    auto_ab = autoint(phi, a, b)
    quad_ab = quadrature_of_grad_network(phi, a, b, args.quad_points)
    auto_err = np.abs(auto_ab - exact_ab)
    quad_err = np.abs(quad_ab - exact_ab)
    auto_time = _best_time(lambda: autoint(phi, a, b), 5)
    quad_time = _best_time(lambda: quadrature_of_grad_network(phi, a, b, args.quad_points), 3)

    rel = abs(auto - exact) / abs(exact)
    print(f"fit: 1-{args.width}x{args.depth}-1 tanh Phi, {args.iters} Adam steps, "
          f"final MSE of dPhi/dx {losses[-1]:.2e}, {fit_seconds:.1f} s")
    print(f"integral of f over [{DOMAIN[0]:g}, {DOMAIN[1]:g}]: exact (erf) {exact:.8f}, "
          f"Simpson on f (10001 points) {quad_f:.8f}")
    print(f"  AutoInt Phi(b) - Phi(a) {auto:.8f} (relative error {rel:.1e}); "
          f"Simpson on dPhi/dx {quad_net:.8f} (relative error "
          f"{abs(quad_net - exact) / abs(exact):.1e})")
    print(f"{args.intervals} random sub-intervals: AutoInt max |error| {auto_err.max():.1e} "
          f"(mean {auto_err.mean():.1e}); Simpson on dPhi/dx ({args.quad_points} points each) "
          f"max |error| {quad_err.max():.1e}")
    print(f"  time: AutoInt {1e3 * auto_time:.2f} ms ({2 * args.intervals} evaluations of "
          f"Phi), quadrature {1e3 * quad_time:.2f} ms ({args.quad_points * args.intervals} "
          f"evaluations of dPhi/dx): {quad_time / auto_time:.0f}x faster")

    plots = [] if args.no_plot else plot(phi, losses, args.out)
    for p in plots:
        print(f"wrote {p}")
    return {"exact": exact, "quadrature_f": quad_f, "autoint": auto,
            "relative_error": rel, "quadrature_grad_network": quad_net,
            "interval_max_error": float(auto_err.max()),
            "interval_mean_error": float(auto_err.mean()),
            "quadrature_interval_max_error": float(quad_err.max()),
            "autoint_seconds": auto_time, "quadrature_seconds": quad_time,
            "speedup": quad_time / auto_time, "final_loss": losses[-1],
            "fit_seconds": fit_seconds, "plots": plots}


if __name__ == "__main__":
    main()
