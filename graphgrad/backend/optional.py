"""Layer ``backend``: the optional extras that features load on first use, each with the
error that says which extra to install (DESIGN: a feature whose extra is missing says
so): matplotlib for plots, headless."""

from __future__ import annotations

from typing import Any

__all__ = ["pyplot"]


def pyplot(purpose: str) -> Any:
    """``matplotlib.pyplot`` on the headless Agg backend; ImportError naming ``purpose``
    and the ``plot`` extra when matplotlib is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError(f"{purpose} needs matplotlib: pip install 'graphgrad[plot]'") from e
    return plt
