"""Layer ``utils``: the progress bar of long loops (training, the examples): tqdm on a
terminal, otherwise a stand-in with the same methods, so that loops update it
unconditionally. tqdm is an optional extra."""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["progress_bar"]


class _NoBar:
    """What ``progress_bar`` gives when there is nothing to draw on."""

    def update(self, n: int = 1) -> None:
        pass

    def set_postfix(self, **kw) -> None:
        pass

    def set_description(self, desc: str) -> None:
        pass

    def close(self) -> None:
        pass


def progress_bar(total: int, desc: str | None = None, *, disable: bool = False,
                 **tqdm_kwargs) -> Any:
    """A tqdm bar of ``total`` steps on stderr; the stand-in when ``disable`` (``--quiet``),
    when stderr is not a terminal (logs, CI, pipes) or when tqdm is not installed."""
    if disable or not sys.stderr.isatty():
        return _NoBar()
    try:
        from tqdm import tqdm
    except ImportError:
        return _NoBar()
    return tqdm(total=total, desc=desc, dynamic_ncols=True, **tqdm_kwargs)
