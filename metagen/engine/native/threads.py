"""How many threads a native kernel call uses: the ones torch is given.

The kernels split their work across a pool of threads owned by the native library
(``pool.c``): started once per process, sleeping between calls, sized at each call from
:func:`torch.get_num_threads`. Torch's own products do not run during a native call, so the
pool and MKL's threads never compete for the cores. Each output element is computed by the same
instructions whatever the count, so results are the same bit for bit on any number of threads.
"""

from __future__ import annotations

import torch

from metagen.errors import InvalidParameterError


def resolve(threads: int | None) -> int:
    """``threads`` itself (at least 1), or torch's thread count when ``None``. Raises
    :class:`~metagen.errors.InvalidParameterError` naming ``threads`` for a count below 1."""
    if threads is None:
        return max(1, torch.get_num_threads())
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise InvalidParameterError("threads", threads, "must be an int >= 1")
    return threads
