"""Every module imports only from its own layer or the layers below it
(docs/design.md, "Layers"), except the documented upward edges."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "graphgrad"

# Lowest first. Layers on one rank may not import each other either way round.
RANKS = [
    ["backend"],
    ["tensor"],
    ["ops"],
    ["sparse"],
    ["autograd"],
    ["func"],
    ["numdiff"],
    ["graph"],
    ["passes"],
    ["backends"],
    ["distributed"],     # below nn and utils: DDP (nn.parallel) and DistributedSampler use it
    ["nn", "optim", "data", "utils"],
    ["serialization"],     # reads safetensors through utils, builds nn.Parameter
    ["static"],
    ["fx"],
    ["jit"],             # jit.trace/script hand out fx GraphModules, as every frontend does
    ["dynamo"],          # hands backends fx GraphModules, as torch._dynamo builds on fx
    ["capture", "compiler", "onnx"],  # onnx: export from jit.trace's graph
    ["torch_compat"],
    ["train", "run"],
    ["lecture"],         # demonstrates every feature; the cli's `lecture` command runs it
    ["cli"],
]
RANK = {layer: i for i, names in enumerate(RANKS) for layer in names}

# The upward edges DESIGN.md allows, each in one place: Tensor.backward reaches autograd
# lazily; autograd.functional(vectorize=True) reaches func.vmap lazily. (Op rules calling
# ops go through dispatch in `tensor`, which is downward.)
ALLOWED_UPWARD = {("tensor/tensor.py", "autograd"),
                  # autograd.functional's vectorize=True batches its passes with vmap
                  ("autograd/functional.py", "func"),
                  # a custom Function's generate_vmap_rule=True runs its forward under vmap
                  ("autograd/function.py", "func")}


def _layer_of_module(dotted: str) -> str | None:
    parts = dotted.split(".")
    if parts[0] != "graphgrad":
        return None
    if len(parts) == 1:
        return "graphgrad"  # the package root re-exports everything
    return parts[1]


def _modules():
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in ("__init__.py", "__main__.py"):
            continue  # the package root sits above every layer
        layer = rel.split("/")[0].removesuffix(".py")
        yield rel, layer, path


def _imports(path: Path, root: Path = ROOT):
    """(line, dotted module) of every import in ``path``, a file of the package ``root``;
    relative imports resolved."""
    tree = ast.parse(path.read_text())
    rel_pkg = path.relative_to(root.parent).with_suffix("").parts
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = rel_pkg[:len(rel_pkg) - node.level]
                if path.name == "__init__.py":
                    base = rel_pkg[:len(rel_pkg) - node.level + 1]
                mod = ".".join(base + ((node.module,) if node.module else ()))
            else:
                mod = node.module or ""
            if mod == "graphgrad":  # from graphgrad import ops: the names are layers
                for alias in node.names:
                    yield node.lineno, f"graphgrad.{alias.name}"
                continue
            yield node.lineno, mod


def test_every_layer_is_known():
    unknown = {layer for _, layer, _ in _modules() if layer not in RANK}
    assert not unknown, f"add these folders to the layer list in DESIGN.md and here: {unknown}"


def _violations(path: Path, root: Path = ROOT) -> list[str]:
    """The imports of ``path`` (a file of the package ``root``) that break the layer order,
    one message each."""
    rel = path.relative_to(root).as_posix()
    layer = rel.split("/")[0].removesuffix(".py")
    bad = []
    for lineno, mod in _imports(path, root):
        target = _layer_of_module(mod)
        if target is None or target == layer:
            continue
        if target == "graphgrad":
            if layer != "cli":
                bad.append(f"{rel}:{lineno} imports the package root ({mod})")
            continue
        if target not in RANK:
            continue  # a plain module at the root, e.g. graphgrad.cli: checked by its own rank
        if RANK[target] >= RANK[layer] and (rel, target) not in ALLOWED_UPWARD:
            bad.append(f"{rel}:{lineno} imports {mod} (layer {target!r} is not below "
                       f"{layer!r})")
    return bad


@pytest.mark.parametrize("rel,layer,path", list(_modules()), ids=lambda v: str(v))
def test_imports_respect_layers(rel, layer, path):
    bad = _violations(path)
    assert not bad, "\n".join(bad)


def test_detects_a_violation(tmp_path):
    """The checker itself catches upward imports, absolute and relative, and lets through
    what is allowed: its own layer, lower layers, the documented upward edges. The probe
    package is a copy of the layout in ``tmp_path``, never a file in graphgrad/."""
    root = tmp_path / "graphgrad"
    probe = root / "backend" / "probe.py"
    probe.parent.mkdir(parents=True)
    probe.write_text("from graphgrad.autograd import grad\n"
                     "from . import promotion\n"
                     "from ..tensor import Tensor\n"
                     "import numpy\n"
                     "from graphgrad import backends\n")
    assert _violations(probe, root) == [
        "backend/probe.py:1 imports graphgrad.autograd (layer 'autograd' is not below "
        "'backend')",
        "backend/probe.py:3 imports graphgrad.tensor (layer 'tensor' is not below 'backend')",
        "backend/probe.py:5 imports graphgrad.backends (layer 'backends' is not below "
        "'backend')"]
    upper = root / "backends" / "probe.py"
    upper.parent.mkdir()
    upper.write_text("from graphgrad.passes import optimize\nfrom ..graph import Graph\n"
                     "from graphgrad.nn import Module\n")
    assert _violations(upper, root) == [
        "backends/probe.py:3 imports graphgrad.nn (layer 'nn' is not below 'backends')"]
    allowed = root / "tensor" / "tensor.py"
    allowed.parent.mkdir()
    allowed.write_text("from graphgrad.autograd import backward\n")
    assert _violations(allowed, root) == []
