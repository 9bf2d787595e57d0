"""Races between threads on grad mode and the dispatch stack (issue 14's measure).

Free-running threads, as users write them (no barriers: this measures how often the race
bites, so counts vary from run to run; the tests in tests/test_threads.py force each
interleaving instead). Three races:
- ``train_beside_inference``: one thread trains (1,000 steps) while another loops over
  ``no_grad`` inference; a step whose parameters got no gradient, silently or with an
  error, is a failure;
- ``two_no_grads``: two threads enter and leave ``no_grad`` repeatedly; a failure is a
  main thread whose grad mode is False afterwards (out of 10 trials);
- ``vmap_beside_randn``: one thread runs ``vmap`` while another calls ``randn``; a
  failure is a trial where ``randn`` raised or the stack kept a level (out of 10).

``python bench/thread_races.py`` prints JSON. PyTorch's answer for all three is 0.
"""

from __future__ import annotations

import json
import sys
import threading

import graphgrad as gg


def _run(*fns) -> None:
    threads = [threading.Thread(target=f) for f in fns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def train_beside_inference(steps: int = 1000) -> dict:
    model = gg.nn.Linear(8, 1)
    x = gg.randn(16, 8)
    stop = threading.Event()
    silent = raised = 0

    def infer():
        while not stop.is_set():
            with gg.no_grad():
                model(x).sum()

    def train():
        nonlocal silent, raised
        for _ in range(steps):
            model.zero_grad()
            try:
                model(x).pow(2).mean().backward()
            except RuntimeError:
                raised += 1
                continue
            if model.weight.grad is None:
                silent += 1
        stop.set()
    _run(infer, train)
    return {"steps": steps, "silent": silent, "raised": raised}


def two_no_grads(trials: int = 10, loops: int = 2000) -> dict:
    failures = 0
    for _ in range(trials):
        def toggle():
            for _ in range(loops):
                with gg.no_grad():
                    gg.ones(2) * 2  # some work inside, as real code has
        _run(toggle, toggle)
        if not gg.is_grad_enabled():
            failures += 1
            gg.set_grad_enabled(True)
    return {"trials": trials, "failures": failures}


def vmap_beside_randn(trials: int = 10, loops: int = 300) -> dict:
    failures = 0
    errors: list = []
    for _ in range(trials):
        errors.clear()

        def batched():
            for _ in range(loops):
                gg.func.vmap(lambda v: v * 2)(gg.ones(4, 3))

        def draws():
            for _ in range(loops):
                try:
                    gg.randn(3)
                except RuntimeError as e:
                    errors.append(e)
        _run(batched, draws)
        try:
            gg.randn(3)
        except RuntimeError as e:
            errors.append(e)
        failures += bool(errors)
    return {"trials": trials, "failures": failures}


def main() -> None:
    sys.setswitchinterval(1e-5)  # switch threads often, as a loaded machine does
    print(json.dumps({"train_beside_inference": train_beside_inference(),
                      "two_no_grads": two_no_grads(),
                      "vmap_beside_randn": vmap_beside_randn()}, indent=1))


if __name__ == "__main__":
    main()
