"""Layer ``fx``: ``TraceError`` and how a tracing error finds the user's source line.

torch.fx raises ``TraceError`` (a ``ValueError``) when a symbolically traced value is
used where Python needs a concrete one: a condition, a loop. graphgrad keeps torch's
wording as the first line and adds the ``file:line`` of the user's code with the line
shown, found by walking out of graphgrad's own frames.
"""

from __future__ import annotations

import linecache
import sys
from types import FrameType

__all__ = ["TraceError", "UnknownShapeError", "user_location", "trace_error"]

CONTROL_FLOW = "symbolically traced variables cannot be used as inputs to control flow"
ITERATION = ("Proxy object cannot be iterated. This can be attempted when the Proxy is used "
             "in a loop or as a *args or **kwargs function argument. See the torch.fx docs "
             "on pytorch.org for a more detailed explanation of what types of control flow "
             "can be traced, and check out the Proxy docstring for help troubleshooting "
             "Proxy iteration errors")


class TraceError(ValueError):
    """A symbolically traced value was used where a concrete Python value is needed."""


class UnknownShapeError(TraceError):
    """graphgrad code needed the rank (or the sizes) of a Proxy, which the tracer does not
    know: no example inputs were given (or it traced for any size)."""


def in_graphgrad(frame: FrameType) -> bool:
    """Whether ``frame`` runs graphgrad's own code (not the user's)."""
    name = frame.f_globals.get("__name__", "")
    return name == "graphgrad" or name.startswith("graphgrad.")


def user_frame(depth: int = 1) -> FrameType | None:
    """The innermost frame outside graphgrad, starting ``depth`` frames above the caller."""
    frame = sys._getframe(depth + 1)
    while frame is not None and in_graphgrad(frame):
        frame = frame.f_back
    return frame


def user_location(depth: int = 1) -> str:
    """``File "f.py", line 3, in fn`` and the source line, for the user's innermost frame."""
    frame = user_frame(depth + 1)
    if frame is None:
        return ""
    code = frame.f_code
    line = linecache.getline(code.co_filename, frame.f_lineno).strip()
    where = f'  File "{code.co_filename}", line {frame.f_lineno}, in {code.co_name}'
    return where + (f"\n    {line}" if line else "")


def trace_error(message: str, cls: type[TraceError] = TraceError) -> TraceError:
    """A TraceError whose message ends with where in the user's code it happened."""
    where = user_location(2)
    return cls(f"{message}\n{where}" if where else message)
