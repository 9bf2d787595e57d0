"""Layer ``torch_compat``: the import hook that lets an unmodified PyTorch program import
graphgrad: ``import torch``, ``import torch.nn.functional as F``, ``from torch.utils.data
import DataLoader`` all resolve to graphgrad's own module objects (``torch.nn is
graphgrad.nn``), so a program sees one framework whichever way it imports it.

``torch.X.Y`` is ``graphgrad.X.Y`` where graphgrad has that module; otherwise the CPU-only
stand-in of this package named in ``STAND_INS`` (``torch.backends.cudnn``, ``torch.amp``,
``torch.cuda``...); otherwise a ModuleNotFoundError saying it is not in graphgrad yet.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

__all__ = ["install_as_torch", "uninstall_as_torch", "graphgrad_name", "STAND_INS"]

# torch paths graphgrad serves under another name: its own module where only the name
# differs (torch._dynamo), else a stand-in of this package because graphgrad has no module
# of that name (or, for torch.backends.*, because graphgrad.backends is the graph backends).
# A child of an entry maps under the entry's target (torch._dynamo.config).
STAND_INS = {
    "torch._dynamo": "graphgrad.dynamo",
    "torch.accelerator": "graphgrad.torch_compat.accelerator",
    "torch.amp": "graphgrad.torch_compat.amp",
    "torch.cuda": "graphgrad.torch_compat.cuda",
    "torch.cuda.amp": "graphgrad.torch_compat.cuda.amp",
    "torch.backends.cuda": "graphgrad.torch_compat.backends.cuda",
    "torch.backends.cudnn": "graphgrad.torch_compat.backends.cudnn",
    "torch.backends.mps": "graphgrad.torch_compat.backends.mps",
    "torch.backends.mkldnn": "graphgrad.torch_compat.backends.mkldnn",
    "torch.utils.benchmark": "graphgrad.torch_compat.benchmark",
}


def _exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a parent is missing
        return False


def graphgrad_name(torch_name: str) -> str:
    """The graphgrad module that serves the torch module ``torch_name``; raises
    ModuleNotFoundError naming it when graphgrad has none."""
    parts = torch_name.split(".")
    own = ".".join(["graphgrad", *parts[1:]])
    # graphgrad's own module wins once it exists (e.g. a real graphgrad.onnx), except where
    # graphgrad's module of that name is something else (graphgrad.backends.cuda)
    if not torch_name.startswith("torch.backends.") and _exists(own):
        return own
    if torch_name in STAND_INS:
        return STAND_INS[torch_name]
    parent, _, leaf = torch_name.rpartition(".")
    served = "graphgrad" if parent == "torch" else graphgrad_name(parent)
    if parent in STAND_INS and _exists(f"{served}.{leaf}"):
        return f"{served}.{leaf}"
    raise ModuleNotFoundError(f"{torch_name} is not in graphgrad yet ({served} has no "
                              f"{leaf!r} module)", name=torch_name)


class _AliasLoader(importlib.abc.Loader):
    """Puts the already-imported graphgrad module in sys.modules under the torch name.
    create_module returns None, so the import system builds a throwaway module and
    leaves the graphgrad module's own __spec__ and __name__ alone; _load_unlocked then
    returns whatever exec_module left in sys.modules."""

    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec):
        return None

    def exec_module(self, module) -> None:
        sys.modules[module.__name__] = importlib.import_module(self.target)


class TorchAliasFinder(importlib.abc.MetaPathFinder):
    """``sys.meta_path`` entry answering every ``torch`` and ``torch.*`` import."""

    def find_spec(self, fullname: str, path=None, target=None):
        if fullname != "torch" and not fullname.startswith("torch."):
            return None
        name = "graphgrad" if fullname == "torch" else graphgrad_name(fullname)
        return importlib.util.spec_from_loader(fullname, _AliasLoader(name))


def _installed() -> TorchAliasFinder | None:
    return next((f for f in sys.meta_path if isinstance(f, TorchAliasFinder)), None)


def install_as_torch() -> None:
    """Make ``import torch`` (and every ``torch.*`` import) give graphgrad, for notebooks
    and scripts that cannot be started with ``graphgrad run``. Idempotent. Call it before
    the first ``import torch``: a real PyTorch already imported stays what it is, and
    this raises rather than mix the two frameworks."""
    if _installed() is not None:
        return
    torch = sys.modules.get("torch")
    if torch is not None and torch is not sys.modules.get("graphgrad"):
        raise RuntimeError("install_as_torch(): the real PyTorch is already imported; call "
                           "graphgrad.install_as_torch() before the first `import torch`")
    sys.meta_path.insert(0, TorchAliasFinder())


def uninstall_as_torch() -> None:
    """Undo install_as_torch: remove the finder and every ``torch`` alias it made."""
    finder = _installed()
    if finder is not None:
        sys.meta_path.remove(finder)
    for name in [n for n in sys.modules if n == "torch" or n.startswith("torch.")]:
        if sys.modules[name].__name__.startswith("graphgrad"):
            del sys.modules[name]
