"""Layer ``torch_compat``: ``torch.utils.benchmark``'s ``Timer`` and ``Measurement`` for
Python statements, following PyTorch's timing procedure: ``timeit(number)`` warms up
with number // 100 runs then times one block of ``number``; ``blocked_autorange()``
grows the block size tenfold until the timer's overhead is negligible, then times
blocks until ``min_run_time`` has passed. Statistics are per run (raw time / number)."""

from __future__ import annotations

import statistics
import timeit as _timeit
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Timer", "Measurement"]


@dataclass(repr=False)
class Measurement:
    """``number_per_run`` runs per entry of ``raw_times`` (seconds per block)."""

    number_per_run: int
    raw_times: list[float]
    label: str | None = None
    sub_label: str | None = None
    description: str | None = None
    stmt: str = ""
    metadata: dict[Any, Any] | None = field(default=None)

    @property
    def times(self) -> list[float]:
        return [t / self.number_per_run for t in self.raw_times]

    @property
    def median(self) -> float:
        # PyTorch's quantile(.5) with linear interpolation, like np.quantile's default
        return float(np.quantile(self.times, 0.5))

    @property
    def mean(self) -> float:
        return statistics.fmean(self.times)

    @property
    def iqr(self) -> float:
        return float(np.quantile(self.times, 0.75) - np.quantile(self.times, 0.25))

    def __repr__(self) -> str:
        unit, scale = next(((u, s) for u, s in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6))
                            if self.median >= s), ("ns", 1e-9))
        head = "\n".join(x for x in (self.label, self.sub_label or self.description,
                                     self.stmt) if x)
        return (f"<Measurement object at {hex(id(self))}>\n{head}\n"
                f"  Median: {self.median / scale:.2f} {unit}\n"
                f"  {len(self.raw_times)} measurement{'s' * (len(self.raw_times) != 1)}, "
                f"{self.number_per_run} runs per measurement")


class Timer:
    """``Timer(stmt="pass", setup="pass", global_setup="", timer=timeit.default_timer,
    globals=None, label=None, sub_label=None, description=None, env=None,
    num_threads=1)``: ``stmt`` is a Python statement (graphgrad has no C++ timing)."""

    def __init__(self, stmt: str = "pass", setup: str = "pass", global_setup: str = "",
                 timer: Callable[[], float] = _timeit.default_timer,
                 globals: dict[str, Any] | None = None,  # noqa: A002 - PyTorch's name
                 label: str | None = None, sub_label: str | None = None,
                 description: str | None = None, env: str | None = None,
                 num_threads: int = 1, language: str = "python") -> None:
        if language not in ("python", "py"):
            raise NotImplementedError("graphgrad's benchmark Timer times Python statements "
                                      "only; C++ timing is not in graphgrad")
        if global_setup:
            raise ValueError("global_setup is C++ only")
        self._timer = _timeit.Timer(stmt=stmt, setup=setup, timer=timer,
                                    globals=dict(globals or {}))
        self._spec = {"label": label, "sub_label": sub_label, "description": description,
                      "stmt": stmt}

    def _time(self, number: int) -> float:
        return max(self._timer.timeit(number), 1e-9)

    def timeit(self, number: int = 1000000) -> Measurement:
        self._time(max(int(number // 100), 2))  # warm-up, as PyTorch
        return Measurement(number, [self._time(number)], **self._spec)

    def _estimate_block_size(self, min_run_time: float) -> int:
        overhead = statistics.median(self._time(0) for _ in range(5))
        number = 1
        while True:
            taken = self._time(number)
            if overhead / taken <= 1e-4 and taken >= min_run_time / 1000:
                break
            if taken > min_run_time or number * 10 > 2147483647:
                break
            number *= 10
        return number

    def blocked_autorange(self, callback: Callable[[int, float], None] | None = None,
                          min_run_time: float = 0.2) -> Measurement:
        number = self._estimate_block_size(min_run_time)
        times: list[float] = []
        while sum(times) < min_run_time:
            times.append(self._time(number))
            if callback:
                callback(number, times[-1])
        return Measurement(number, times, **self._spec)
