"""Layer ``capture``: the side-by-side capture report (the lecture's comparison of the
ways of turning a Python function into a graph): ``report(fn, *example_inputs)`` runs
it eagerly and through each method and checks every capture against eager
(report.py); views.py explains the table's columns and shows the whole messages with
the user's line (``--full``), a picture per graph (``--draw``) and each graph before
and after ``graphgrad.passes.optimize`` (``--optimize``)."""

from .report import (METHODS, REWRITTEN, CaptureReport, MethodResult, Where, other_inputs,
                     report)
from .views import draw, explain, full_text, optimize_text

__all__ = ["report", "CaptureReport", "MethodResult", "METHODS", "REWRITTEN", "Where",
           "other_inputs", "explain", "full_text", "draw", "optimize_text"]
