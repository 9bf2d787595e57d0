"""Layer ``utils``: ``torch_randperm(n, seed)``, the permutation that
``torch.randperm(n, generator=torch.Generator().manual_seed(seed))`` gives on CPU, computed
with NumPy, so that ``DistributedSampler`` shards a dataset exactly as PyTorch's does.

graphgrad's own ``randperm`` draws from NumPy's PCG64 (its global stream does not mirror
torch's), so the sampler needs this separate, bit-exact copy of torch's two pieces:

- the generator: ``at::mt19937``, standard MT19937 seeded by ``init_genrand`` with the low
  32 bits of the 64-bit seed; ``random()`` is one 32-bit output and ``random64()`` joins
  two, the first drawn as the high word. NumPy's ``MT19937`` with its legacy seeding is the
  same engine.
- ``randperm_cpu`` (aten/src/ATen/native/TensorFactories.cpp): below ``n = 2**32 // 20``
  a forward Fisher-Yates over ``0 .. n-1`` that swaps ``i`` with ``i + random() % (n - i)``
  for ``i < n - 1``; from there on the "inside-out" variant with ``random64() % (i + 1)``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["torch_randperm"]

# torch switches algorithm at uint32 max / 20: past it, 32-bit draws modulo n would be
# visibly skewed, so it draws 64 bits.
SMALL_N_LIMIT = (2**32 - 1) // 20


def _mt19937(seed: int) -> np.random.MT19937:
    engine = np.random.MT19937(0)
    # torch accepts seeds in [-2**63, 2**64) and reads them as uint64; mt19937 keeps 32 bits.
    engine._legacy_seeding(seed & 0xFFFFFFFF)
    return engine


def torch_randperm(n: int, seed: int, small_n_limit: int = SMALL_N_LIMIT) -> list[int]:
    """``torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()`` on CPU.

    ``small_n_limit`` is torch's switch point; it is a parameter only so that the large-n
    algorithm can be exercised at a size a test can afford."""
    if n < 0:
        # torch's wording, missing space included.
        raise RuntimeError(f"n must be non-negative, got{n}")
    engine = _mt19937(seed)
    if n < small_n_limit:
        indices = list(range(n))
        if n > 1:
            # Draws do not depend on the swaps, so take them all at once.
            offsets = (engine.random_raw(n - 1) % np.arange(n, 1, -1, dtype=np.uint64)).tolist()
            for i, offset in enumerate(offsets):
                j = i + offset
                indices[i], indices[j] = indices[j], indices[i]
        return indices
    pairs = engine.random_raw(2 * n).reshape(n, 2)
    draws = (pairs[:, 0] << np.uint64(32)) | pairs[:, 1]
    picks = (draws % np.arange(1, n + 1, dtype=np.uint64)).tolist()
    out = [0] * n
    for i, z in enumerate(picks):
        out[i] = out[z]
        out[z] = i
    return out
