"""Fixtures shared by several test files."""

from __future__ import annotations

import pytest

from graphgrad.backends import fused as fused_mod


@pytest.fixture(params=["numba", "numpy"])
def lowering(request, monkeypatch, tmp_path):
    """The fused-kernel tests run with the Numba path on (where installed) and switched
    off; kernels generated in the test's own cache directory."""
    if request.param == "numba" and not fused_mod.fused_numba.numba_available():
        pytest.skip("numba is not installed")
    monkeypatch.setattr(fused_mod.config, "numba", request.param == "numba")
    monkeypatch.setenv("GRAPHGRAD_KERNEL_CACHE", str(tmp_path / "kernels"))
    return request.param
