"""Layer ``lecture``: the topics whose demonstrations are the project's examples (Newton,
MAML and the PINN for higher-order derivatives; AutoInt): each runs the example's own
``main`` in a smaller configuration with ``quick``, and passes on the numbers it returns.
The examples are examples/ next to the package in a clone of the project; an installed
wheel carries the same scripts as ``graphgrad.examples`` (setup.py maps the folder)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

__all__ = ["higher_order", "autoint", "example", "example_path", "EXAMPLES"]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def example_path(name: str) -> Path:
    """Where examples/<name>.py is: the clone's folder, else the installed package's."""
    path = EXAMPLES / f"{name}.py"
    if path.is_file():
        return path
    spec = importlib.util.find_spec("graphgrad.examples")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        if (Path(folder) / f"{name}.py").is_file():
            return Path(folder) / f"{name}.py"
    raise FileNotFoundError(f"this topic runs examples/{name}.py, which comes with a clone "
                            f"of the graphgrad repository and with its wheel (graphgrad."
                            f"examples); found in neither ({path})")


def example(name: str) -> ModuleType:
    """examples/<name>.py as a module (examples/ is a folder of scripts, not a package)."""
    path = example_path(name)
    key = f"graphgrad_example_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


def higher_order(out: Path, quick: bool) -> dict:
    common = ["--quiet"]
    print("---- Newton's method on Rosenbrock (func.hessian, forward over reverse)")
    newton = example("newton_rosenbrock").main(
        common + ["--out", str(out)] + (["--max-gd-iters", "2000"] if quick else []))
    print()
    print("---- MAML on sinusoid regression (autograd.grad(..., create_graph=True) through "
          "the inner step)")
    maml = example("maml_sinusoid").main(
        common + ["--out", str(out)] + (["--iters", "400", "--meta-lr", "3e-3",
                                         "--test-tasks", "200", "--test-steps", "1"]
                                        if quick else []))
    print()
    print("---- a physics-informed network for u'' = -pi^2 sin(pi x) (u'' by autograd.grad "
          "twice)")
    pinn = example("pinn_poisson").main(common + ["--out", str(out)]
                                        + (["--iters", "150"] if quick else []))
    print()
    print(f"Newton: {newton['newton_iters']} iterations; gradient descent: "
          f"{newton['gd_iters']}{'' if newton['gd_converged'] else ' (not converged)'}")
    print(f"MAML after one step: MSE {maml['maml_mse']:.3f}; pre-trained: "
          f"{maml['pretrained_mse']:.3f}")
    print(f"PINN: relative L2 error {pinn['relative_l2_error']:.1e}")
    return {"newton_iters": newton["newton_iters"], "gd_iters": newton["gd_iters"],
            "gd_converged": newton["gd_converged"], "maml_mse": maml["maml_mse"],
            "pretrained_mse": maml["pretrained_mse"],
            "pinn_error": pinn["relative_l2_error"]}


def autoint(out: Path, quick: bool) -> dict:
    r = example("autoint").main(["--quiet", "--out", str(out)]
                                + (["--iters", "500", "--intervals", "200"] if quick else []))
    print()
    print(f"AutoInt: integral {r['autoint']:.8f} against the exact {r['exact']:.8f} "
          f"(relative error {r['relative_error']:.1e}), from two evaluations of the primal "
          f"network")
    return {"relative_error": r["relative_error"], "autoint": r["autoint"],
            "exact": r["exact"]}
