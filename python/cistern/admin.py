# SPDX-License-Identifier: MIT
"""Watching and managing segments by name, as the `cistern` command does:
listing, inspection, gc, removal, dump and restore."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._common import _check_name_type, _cistern, _path
from .records import DumpInfo, GcReport, Inspection, SegmentInfo
from .segment import open_readonly

if TYPE_CHECKING:
    from ._common import PathLike, Progress

__all__ = ["remove", "list_segments", "inspect", "gc", "dump", "restore", "verify_dump"]


def remove(name: str, force: bool = False, any_owner: bool = False) -> None:
    """Remove a segment's name as `cistern rm` does (cistern_remove()): refused
    with OSError(EBUSY) while live processes are attached, unless force=True,
    which also removes damaged or foreign objects named cistern.NAME. A segment
    owned by another user than ours or root is refused with PermissionError
    unless any_owner=True."""
    _cistern.remove(_check_name_type(name), force=bool(force), any_owner=bool(any_owner))


def list_segments() -> list[SegmentInfo]:
    """Every cistern segment on the machine, sorted by name, read without
    disturbing any (cistern_list(); `cistern ls`)."""
    return [SegmentInfo._from(d) for d in _cistern.list_segments()]


def inspect(name: str) -> Inspection:
    """Read segment `name`'s config, statistics, occupancy and attached
    processes through a read-only mapping that disturbs nobody (`cistern
    inspect`)."""
    with open_readonly(name) as seg:
        return Inspection(name=name, config=seg.config(), stats=seg.stats(),
                          occupancy=seg.occupancy(), procs=tuple(seg.procs()))


def gc(name: str, dry_run: bool = False, any_owner: bool = False,
       dump_to: PathLike | None = None, discard: bool = False) -> GcReport:
    """Collect segment `name`'s garbage (cistern_gc_dump_to(); `cistern gc NAME`):
    reclaim what its dead processes left (reservations, samples they held,
    pins), and remove it if every process attached to it died. A stale segment
    that still holds unread samples is kept (report.kept, report.unread), unless
    dump_to names a directory (it is dumped to DIR/NAME.dump, then removed) or
    discard=True (removed with its samples). dry_run says what would be done
    and does nothing. A segment owned by another user than ours or root is
    refused with PermissionError unless any_owner=True."""
    return GcReport._from(_cistern.gc(_check_name_type(name), dry_run=bool(dry_run),
                                      any_owner=bool(any_owner),
                                      dump_to=None if dump_to is None else _path(dump_to),
                                      discard=bool(discard)))


def dump(name: str, path: PathLike, progress: Progress | None = None) -> DumpInfo:
    """Write a snapshot of segment `name` (config, statistics and every held
    sample) to the file `path`, replaced atomically, without disturbing the
    segment (cistern_dump(); `cistern dump`). progress(done, total), if given,
    is called now and then with slots scanned; an exception it raises is
    printed as unraisable and the dump goes on. Returns what was written."""
    return DumpInfo._from(_cistern.dump(_check_name_type(name), _path(path), progress))


def restore(path: PathLike, name: str | None = None,
            progress: Progress | None = None) -> DumpInfo:
    """Restore the dump at `path` as segment `name` (None: the name stored in
    the dump), which must not exist (cistern_restore(); `cistern restore`).
    The whole file is checked first: a damaged dump raises OSError(EBADMSG) and
    creates nothing. progress(done, total) gets bytes read. Returns what the
    dump holds."""
    return DumpInfo._from(_cistern.restore(_path(path), name, progress))


def verify_dump(path: PathLike) -> DumpInfo:
    """Check the dump at `path` whole, as restore() would, without restoring it
    (cistern_dump_verify(); `cistern restore --check`). Returns what it holds;
    raises OSError(EBADMSG) for a damaged dump."""
    return DumpInfo._from(_cistern.dump_verify(_path(path)))
