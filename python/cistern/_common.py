# SPDX-License-Identifier: MIT
"""What the package's modules share: the extension module, numpy if it is
there, the type aliases of the public signatures and the checks of common
arguments."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Callable, Union

if TYPE_CHECKING:
    import numpy as _np
    import numpy.typing as npt

    from . import _cistern

    Array = npt.NDArray[Any]
    #: A sample of a segment with a schema (or a batch of them, along a first
    #: axis): one numpy array per field, by name.
    Fields = dict[str, Array]
else:
    Fields = dict
    try:  # installed: the extension module lives inside the package
        from . import _cistern
    except ImportError:  # build tree: PYTHONPATH=<builddir>/python:<srcdir>/python
        try:
            import _cistern
        except ImportError:
            # The package's sources without the extension module: most often
            # python/ of the source tree, found first (it is the current
            # directory, or on sys.path), shadowing the installed package.
            raise ImportError(
                f"cistern was imported from {os.path.dirname(os.path.abspath(__file__))}, "
                "which has no built extension module (_cistern): a source tree's "
                "python/ directory shadows the installed package when Python starts "
                "there. Run from another directory, or put the build tree's python/ "
                "first: PYTHONPATH=<builddir>/python:<srcdir>/python",
                name="cistern") from None

    try:
        import numpy as _np
    except ImportError:  # bytes-only use works without numpy
        _np = None

# Shared with the package's other modules (explicitly, for mypy --strict).
__all__ = [
    "_cistern", "_np", "Array", "Fields", "DTypeLike", "ShapeLike", "Timeout", "PathLike",
    "Progress", "SchemaLike", "_timeout_ms", "_count", "_batch_metas", "_rate", "_need_numpy",
    "_frombuffer", "_shape_tuple", "_misfit", "_deadline", "_left", "_row_bytes",
    "_check_name_type", "_path",
]

#: A dtype as numpy takes it ("float32", numpy.float32, numpy.dtype(...)).
DTypeLike = Any


#: A shape: an int, a sequence of ints (one may be -1), or None for "flat".
ShapeLike = Union[int, Sequence[int], None]


#: A timeout in seconds: None waits forever, 0 tries once.
Timeout = Union[float, None]


#: A path to a file (dump and restore).
PathLike = Union[str, "os.PathLike[str]"]


#: progress(done, total) of dump() and restore().
Progress = Callable[[int, int], object]


#: What create(schema=...) and Schema.parse() take: the text form
#: ("obs:float32[84,84];action:int64[]"), a dict {name: (dtype, shape)} or
#: {name: dtype} for a scalar, a list of (name, dtype[, shape]), a numpy
#: structured dtype, or a Schema.
SchemaLike = Any


def _timeout_ms(timeout: Timeout) -> int:
    if timeout is None:
        return -1
    try:
        t = float(timeout)
    except (TypeError, ValueError):
        raise TypeError("timeout must be a number of seconds or None") from None
    if not t >= 0:  # also catches NaN
        raise ValueError("timeout must be >= 0 seconds, or None to wait forever")
    if t == 0:
        return 0
    return min(max(1, math.ceil(t * 1000)), 2**31 - 1)


def _count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be a non-negative int, not {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, not {value}")
    return value


def _batch_metas(k: int, sim_id: object, time_step: object) -> Array:
    """put_batch()'s metas for k rows: a (k, 3) uint64 array whose columns 1
    and 2 hold each row's sim_id and time_step (one int for all, or k), and
    whose column 0 the call fills with sample ids."""
    np = _need_numpy()
    metas: Array = np.zeros((k, 3), dtype=np.uint64)
    for col, name, given in ((1, "sim_id", sim_id), (2, "time_step", time_step)):
        v = np.asarray(given)
        if v.dtype.kind not in "iu" or (v.size and int(v.min()) < 0):
            raise ValueError(f"put_batch: {name} must be non-negative ints")
        try:
            metas[:, col] = np.broadcast_to(v, (k,))
        except ValueError:
            raise ValueError(f"put_batch: {name} must be one int or {k} of them") from None
    return metas


def _rate(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a non-negative number, not {value!r}")
    v = float(value)
    if not v >= 0 or math.isinf(v):  # also catches NaN
        raise ValueError(f"{name} must be a finite number >= 0, not {value!r}")
    return v


def _need_numpy() -> Any:
    if _np is None:
        raise ImportError("this call needs numpy")
    return _np


def _frombuffer(obj: object, dtype: Any, count: int = -1) -> Array:
    """numpy.frombuffer(obj): the array keeps obj (a Sample or Slot) as its base.
    Type checkers cannot say "has the buffer protocol" before Python 3.12."""
    np = _need_numpy()
    a: Array = np.frombuffer(obj, dtype=dtype, count=count)
    return a


def _shape_tuple(shape: ShapeLike) -> tuple[int, ...] | None:
    if shape is None:
        return None
    if isinstance(shape, int):
        return (shape,)
    return tuple(int(d) for d in shape)


def _misfit(nbytes: int, dtype: DTypeLike, shape: ShapeLike) -> str | None:
    """Why a payload of nbytes cannot be read as dtype and shape; None if it can."""
    if dtype is None and shape is None:
        return None
    np = _need_numpy()
    dt = np.dtype(dtype if dtype is not None else np.uint8)
    shape = _shape_tuple(shape)
    if nbytes % dt.itemsize == 0:
        if shape is None:
            return None
        count = nbytes // dt.itemsize
        known = 1
        for d in shape:
            known *= d if d != -1 else 1
        if (count % known == 0) if (known and shape.count(-1) == 1) else known == count:
            return None
    what = f"dtype {dt}" + ("" if shape is None else f" and shape {shape}")
    return f"a sample of {nbytes} bytes does not fit {what}"


def _deadline(timeout_ms: int) -> float:
    """When a read of timeout_ms that may start over must end (time.monotonic())."""
    return time.monotonic() + timeout_ms / 1000 if timeout_ms > 0 else 0.0


def _left(deadline: float, timeout_ms: int) -> int:
    """The timeout_ms left of a read begun with timeout_ms, ending at deadline."""
    if timeout_ms <= 0:
        return timeout_ms
    return max(0, math.ceil((deadline - time.monotonic()) * 1000)) or 0


def _row_bytes(out: Any) -> int:
    """Bytes of one row of `out`, a C-contiguous array (or 2-D memoryview) whose
    first dimension counts samples."""
    n = len(out)
    if n == 0:
        raise ValueError("the output array has no rows")
    return int(out.nbytes // n)


def _check_name_type(name: object) -> str:
    if not isinstance(name, str):
        raise ValueError("segment name must be a str")
    return name


def _path(path: PathLike) -> str:
    return os.fspath(path)
