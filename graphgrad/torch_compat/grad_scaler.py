"""Layer ``torch_compat``: ``torch.amp.GradScaler``, PyTorch's loss scaling, on graphgrad's
CPU tensors. Device ``"cuda"`` (the default) is disabled with PyTorch's warning, as on a
CPU-only build: scale() returns the loss unchanged and step() just calls
optimizer.step(). Device ``"cpu"`` scales for real, as PyTorch does there: the loss is
multiplied by the scale, step() unscales the gradients, skips the step if any is inf/NaN,
and update() backs the scale off (after a skip) or grows it (after ``growth_interval``
clean steps)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable
from typing import Any

import numpy as np

from graphgrad.autograd import no_grad
from graphgrad.backend import float16, float32
from graphgrad.tensor import Tensor
from graphgrad.tensor.creation import tensor

__all__ = ["GradScaler"]

_READY, _UNSCALED, _STEPPED = "ready", "unscaled", "stepped"


class GradScaler:
    """``GradScaler(device="cuda", init_scale=2.**16, growth_factor=2.0,
    backoff_factor=0.5, growth_interval=2000, enabled=True)``."""

    def __init__(self, device: str = "cuda", init_scale: float = 2.0**16,
                 growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True) -> None:
        self._device = device
        self._enabled = enabled
        if device == "cuda" and enabled:
            warnings.warn("torch.cuda.amp.GradScaler is enabled, but CUDA is not available.  "
                          "Disabling.", stacklevel=2)
            self._enabled = False
        if self._enabled:
            if growth_factor <= 1.0:
                raise AssertionError("The growth factor must be > 1.0.")
            if backoff_factor >= 1.0:
                raise AssertionError("The backoff factor must be < 1.0.")
            self._init_scale = init_scale
            self._scale: float | None = None  # set by the first scale(), as in PyTorch
            self._growth_factor = growth_factor
            self._backoff_factor = backoff_factor
            self._growth_interval = growth_interval
            self._init_growth_tracker = 0
            self._growth_tracker: int | None = None
            self._stage: dict[int, str] = {}
            self._found_inf: dict[int, bool] = {}

    def _check_started(self, funcname: str) -> None:
        if self._scale is None:
            raise AssertionError(f"Attempted {funcname} but _scale is None.  This may indicate "
                                 "your script did not use scaler.scale(loss or outputs) earlier "
                                 "in the iteration.")

    def scale(self, outputs: Tensor | Iterable[Tensor]) -> Tensor | Iterable[Tensor]:
        """``outputs`` times the current scale (a float32 scalar); unchanged if disabled."""
        if not self._enabled:
            return outputs
        if self._scale is None:
            self._scale = float(np.float32(self._init_scale))
            self._growth_tracker = self._init_growth_tracker
        if isinstance(outputs, Tensor):
            return outputs * tensor(self._scale, dtype=float32)
        if isinstance(outputs, Iterable):
            scaled = map(self.scale, outputs)
            return type(outputs)(scaled) if isinstance(outputs, (list, tuple)) else scaled
        raise ValueError("outputs must be a Tensor or an iterable of Tensors")

    def unscale_(self, optimizer) -> None:  # noqa: ANN001 - any graphgrad optimizer
        """Divide the optimizer's gradients by the scale, in place, noting any inf/NaN."""
        if not self._enabled:
            return
        self._check_started("unscale_")
        stage = self._stage.get(id(optimizer), _READY)
        if stage == _UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since the "
                               "last update().")
        if stage == _STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        # PyTorch: the reciprocal in float64, then rounded to float32
        inv_scale = float(np.float32(1.0 / self._scale))
        found_inf = False
        with no_grad():
            for group in optimizer.param_groups:
                for param in group["params"]:
                    if param.grad is None:
                        continue
                    if param.grad.dtype == float16:
                        raise ValueError("Attempting to unscale FP16 gradients.")
                    param.grad.mul_(inv_scale)
                    found_inf = found_inf or not bool(param.grad.isfinite().all())
        self._found_inf[id(optimizer)] = found_inf
        self._stage[id(optimizer)] = _UNSCALED

    def step(self, optimizer, *args: Any, **kwargs: Any) -> Any:  # noqa: ANN001
        """Unscale (unless done), then ``optimizer.step()`` unless a gradient is inf/NaN."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is "
                               "enabled.")
        self._check_started("step")
        if self._stage.get(id(optimizer), _READY) == _STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if self._stage.get(id(optimizer), _READY) == _READY:
            self.unscale_(optimizer)
        result = None if self._found_inf[id(optimizer)] else optimizer.step(*args, **kwargs)
        self._stage[id(optimizer)] = _STEPPED
        return result

    def update(self, new_scale: float | Tensor | None = None) -> None:
        """Back off after a skipped step, grow after ``growth_interval`` clean ones."""
        if not self._enabled:
            return
        self._check_started("update")
        if new_scale is not None:
            if not isinstance(new_scale, float) and (
                    new_scale.numel() != 1 or new_scale.requires_grad):
                raise AssertionError("new_scale should be a float or a 1-element "
                                     "torch.cuda.FloatTensor or torch.FloatTensor with "
                                     "requires_grad=False.")
            self._scale = float(np.float32(float(new_scale)))
        else:
            if not self._found_inf:
                raise AssertionError("No inf checks were recorded prior to update.")
            if any(self._found_inf.values()):
                self._scale = float(np.float32(self._scale * self._backoff_factor))
                self._growth_tracker = 0
            else:
                successful = self._growth_tracker + 1
                if successful == self._growth_interval:
                    grown = float(np.float32(self._scale * self._growth_factor))
                    if math.isfinite(grown):
                        self._scale = grown
                    successful = 0
                self._growth_tracker = successful
        self._stage.clear()
        self._found_inf.clear()

    def get_scale(self) -> float:
        if not self._enabled:
            return 1.0
        return self._init_scale if self._scale is None else self._scale

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def set_growth_factor(self, new_factor: float) -> None:
        self._growth_factor = new_factor

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def set_backoff_factor(self, new_factor: float) -> None:
        self._backoff_factor = new_factor

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def set_growth_interval(self, new_interval: int) -> None:
        self._growth_interval = new_interval

    def _get_growth_tracker(self) -> int:
        if not self._enabled:
            return 0
        return self._init_growth_tracker if self._growth_tracker is None else self._growth_tracker

    def is_enabled(self) -> bool:
        return self._enabled

    def state_dict(self) -> dict[str, Any]:
        """PyTorch's five entries; ``{}`` when disabled."""
        if not self._enabled:
            return {}
        return {"scale": self.get_scale(), "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor,
                "growth_interval": self._growth_interval,
                "_growth_tracker": self._get_growth_tracker()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was saved "
                               "from a disabled instance of GradScaler.")
        self._init_scale = state_dict["scale"]
        if self._scale is not None:
            self._scale = float(np.float32(state_dict["scale"]))
        self._growth_factor = state_dict["growth_factor"]
        self._backoff_factor = state_dict["backoff_factor"]
        self._growth_interval = state_dict["growth_interval"]
        self._init_growth_tracker = state_dict["_growth_tracker"]
        if self._growth_tracker is not None:
            self._growth_tracker = state_dict["_growth_tracker"]
