# SPDX-License-Identifier: MIT
"""cistern: ML training samples passed between processes through a named POSIX
shared-memory segment, under one of six sampling policies.

    import cistern
    with cistern.create("demo", policy="fifo", slots=256, slot_size=4096) as seg:
        seg.put(b"hello", sim_id=1, time_step=0)
        seg.close_reception()
        for payload in seg:          # bytes, until end of data
            print(payload)
    cistern.unlink("demo")

Writing:
  put(data)              -> sample id (bytes, a numpy array or any buffer)
  put_batch(array)       -> sample ids of the array's rows, put in one C call
  reserve(dtype, shape)  -> Reservation, a context manager whose value is a
                            writable numpy view of the slot: committed at the
                            end of the with-block, aborted on an exception

Reading:
  get()                  -> bytes (a copy)
  get_array(dtype, shape)-> numpy array (a private copy)
  get_batch(n, dtype, shape) -> numpy array (k, *shape), k <= n, gathered in C
  get_into(out)          -> length: one sample copied into your reused array
  get_batch_into(out)    -> k: up to len(out) samples into your reused array, one call
  acquire()              -> Sample, a context manager whose value is a read-only,
                            zero-copy numpy view valid until release
  acquire_many(n)        -> Group of n samples held until release (or unacquire)

The *_into calls and put_batch are the fast ways to move many samples from
Python: no object made per sample, one C call for many.

Samples that describe themselves: create(..., schema=...) gives a segment a
schema, named fields each of a dtype and a shape, such as an RL transition

    seg = cistern.create("rl", schema={"obs": ("float32", (84, 84)),
                                       "action": ("int64", ()), "reward": "float32"})
    seg.put({"obs": obs, "action": 3, "reward": 0.5})   # checked, written in place
    batch = seg.get_batch(32)      # {"obs": (32, 84, 84), "action": (32,), ...}

Its readers need not restate anything: get(), get_batch() and acquire() give
dicts of numpy arrays (Fields); Segment.schema says what the segment holds.

Watching and managing (as the `cistern` command does): stats(), config(),
occupancy() and procs() of a Segment; list_segments(), inspect(), gc(),
remove(), dump(), restore() and verify_dump() by name. They return typed,
read-only records (which also read like the dicts they replace: st["puts"]).

Errors: a timeout raises TimeoutError, end of data raises cistern.EndOfData (iteration
just stops), bad parameters raise ValueError, anything else OSError (the errno's
subclass: FileExistsError, FileNotFoundError, BrokenPipeError once reception is
closed, ...) with cistern_strerror()'s message; attach() refuses a segment owned by
another user than ours or root with PermissionError unless any_owner=True. Blocking
calls release the GIL and can be interrupted with Ctrl-C.

Timeouts are in seconds: None waits forever, 0 tries once, a positive number waits
at most that long.

A Segment is one attachment (struct cistern): use it from one thread at a time
(a second thread gets RuntimeError), and attach again in a child process.

The package is split by concern, and this module re-exports the public names
of each part: cistern.segment (Segment, create, attach, open_readonly,
unlink), cistern.samples (Sample, Group, Reservation), cistern.schema,
cistern.records, cistern.admin (list, inspect, gc, remove, dump, restore),
cistern.remote (connect, RemoteProducer), cistern.constants and
cistern.errors. Use them through `cistern.X`: the parts' layout may change,
these names do not.
"""

from __future__ import annotations

# The type aliases of the signatures and the extension module are not in
# __all__; `X as X` exports them (cistern.Timeout, cistern._cistern).
from ._common import (DTypeLike as DTypeLike, PathLike as PathLike, Progress as Progress,
                      SchemaLike as SchemaLike, ShapeLike as ShapeLike, Timeout as Timeout,
                      _cistern as _cistern)
from ._common import Fields
from .admin import dump, gc, inspect, list_segments, remove, restore, verify_dump
from .constants import (DEFAULT_SLOT_COUNT, DEFAULT_SLOT_SIZE, DTYPES, META_END_OF_EPISODE,
                        POLICIES, SLOT_CLASSES, VERSION, __version__, name_valid, policy_name,
                        policy_number)
from .errors import EndOfData, strerror
from .records import (Config, DumpInfo, GcReport, Inspection, Meta, Occupancy, ProcInfo,
                      PrioInfo, PrioritizedBatch, RemoteInfo, SegmentInfo, Stats)
from .remote import RemoteProducer, connect, keygen
from .samples import Group, Reservation, Sample
from .schema import Field, Schema
from .segment import (Segment, attach, config_problem, create, open_readonly, segment_bytes,
                      shm_room_problem, unlink)

__all__ = [
    "create", "attach", "open_readonly", "unlink", "remove", "strerror", "name_valid",
    "config_problem", "policy_name", "policy_number", "list_segments", "inspect", "gc",
    "dump", "restore", "verify_dump", "connect", "keygen",
    "Segment", "Sample", "Group", "Reservation", "Meta", "Schema", "Field", "Fields",
    "Config", "Stats", "Occupancy", "ProcInfo", "SegmentInfo", "Inspection", "GcReport",
    "DumpInfo", "RemoteProducer", "RemoteInfo", "PrioInfo",
    "PrioritizedBatch",
    "EndOfData", "POLICIES", "SLOT_CLASSES", "DTYPES", "VERSION", "__version__",
    "segment_bytes", "shm_room_problem",
    "DEFAULT_SLOT_COUNT", "DEFAULT_SLOT_SIZE", "META_END_OF_EPISODE",
]


def _own_names() -> None:
    """Name this package as the home of its public classes and functions, as
    before the split: repr(), help(), pickle and the docs say cistern.Segment,
    not cistern.segment.Segment (pickles of either name load)."""
    for name in __all__:
        obj = globals()[name]
        if (isinstance(obj, type) or callable(obj)) and \
                getattr(obj, "__module__", "").startswith("cistern."):
            obj.__module__ = "cistern"


_own_names()
