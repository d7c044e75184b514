# SPDX-License-Identifier: MIT
"""The errors cistern raises that Python has no class for, and the sentences
of the C library's result codes."""

from __future__ import annotations


from ._common import _cistern

__all__ = ["EndOfData", "strerror"]


EndOfData = _cistern.EndOfData


def strerror(code: int) -> str:
    """A sentence for a result code of the C library: 0 or a negative errno
    (cistern_strerror())."""
    return _cistern.strerror(int(code))
