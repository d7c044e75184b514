# SPDX-License-Identifier: MIT
"""What a read or a reservation holds: a Sample, a Group of samples, a
Reservation of a slot being written."""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from ._common import _count, _frombuffer, _need_numpy, _row_bytes, _shape_tuple
from .records import Meta

if TYPE_CHECKING:
    from ._common import Array, _cistern, DTypeLike, Fields, ShapeLike
    from .schema import Schema
    from .segment import Segment

__all__ = ["Sample", "Group", "Reservation"]


#: What a Sample or Group gives in a with-block: an array, or Fields.
_V = TypeVar("_V")


class Sample(Generic[_V]):
    """An acquired sample (Segment.acquire()).

    As a context manager its value is `array`: a read-only numpy view of the
    payload in the shared segment (no copy), valid until release(), which the
    with-block does on exit; for a segment with a schema (acquired without a
    dtype or shape) it is `fields` instead, a dict of such views, one per field.
    After release, `array`, `fields`, `view`, `tobytes()` and `copy()` raise
    ValueError. A numpy array taken before the release stays
    memory-safe (the mapping lives as long as any view of it) but its contents are
    undefined from then on: the slot may already hold another sample. Copy what
    must outlive the block (`copy()` or `array.copy()`).

    While the sample is held, under FIFO and FIRO it belongs to this reader; under
    the reservoirs it is pinned (not evicted). If the Sample and every view of it
    are dropped without release(), the sample is released when collected.
    """

    __slots__ = ("_s", "_dtype", "_shape", "_schema", "_array", "_fields", "_view",
                 "__weakref__")

    def __init__(self, csample: _cistern.Sample, dtype: DTypeLike = None,
                 shape: ShapeLike = None, schema: Schema | None = None) -> None:
        self._s = csample
        self._dtype = dtype
        self._shape = _shape_tuple(shape)
        self._schema = schema
        self._array: Array | None = None
        self._fields: Fields | None = None
        self._view: memoryview | None = None

    @property
    def meta(self) -> Meta:
        """Meta(sample_id, sim_id, time_step)."""
        m = self._s.meta
        assert isinstance(m, tuple)
        return Meta(*m)

    @property
    def held(self) -> bool:
        """Whether the sample is still acquired (not yet released or handed back)."""
        return self._s.held

    def __len__(self) -> int:
        return len(self._s)

    def _check(self) -> None:
        if not self._s.held:
            raise ValueError("sample already released")

    @property
    def view(self) -> memoryview:
        """A read-only memoryview of the payload; released (raises on use) on release()."""
        self._check()
        if self._view is None:
            self._view = memoryview(self._s)  # type: ignore[arg-type]
        return self._view

    @property
    def array(self) -> Array:
        """The payload as a read-only numpy view with the dtype and shape asked for."""
        self._check()
        if self._array is None:
            np = _need_numpy()
            dtype = np.dtype(self._dtype if self._dtype is not None else np.uint8)
            a = _frombuffer(self._s, dtype)  # base is the Sample: keeps the mapping
            if self._shape is not None:
                a = a.reshape(self._shape)
            self._array = a
        return self._array

    @property
    def fields(self) -> Fields:
        """The payload as read-only, zero-copy numpy views, one per field of the
        segment's schema (ValueError if it has none)."""
        self._check()
        if self._schema is None:
            raise ValueError("this sample was not read by a schema (the segment has none, "
                             "or a dtype or shape was given)")
        if self._fields is None:
            self._fields = self._schema._views(self._s)  # based on the Sample: keeps the mapping
        return self._fields

    def tobytes(self) -> bytes:
        """A copy of the payload as bytes."""
        self._check()
        return bytes(self.view)

    def copy(self) -> Array:
        """A private, writable numpy copy of the payload."""
        return self.array.copy()

    def release(self) -> None:
        """Hand the sample back (idempotent)."""
        self._drop_views()
        self._s.release()

    def unacquire(self) -> None:
        """Hand the sample back unread, as if it had not been acquired: FIFO hands
        it out again first, FIRO and the reservoirs take back the read. Raises
        ValueError if it was released already."""
        self._drop_views()
        self._s.unacquire()

    def _drop_views(self) -> None:
        self._array = None
        self._fields = None
        if self._view is not None:
            try:
                self._view.release()
            except BufferError:  # the user exported it further; the mapping stays valid
                pass
            self._view = None

    def __enter__(self) -> _V:
        return cast(_V, self.fields if self._schema is not None else self.array)

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "held" if self._s.held else "released"
        return f"<cistern.Sample {self.meta} {len(self)} bytes {state}>"


class Group(Generic[_V]):
    """An acquired pair (Segment.acquire_pair()), batch (Segment.acquire_batch())
    or run of samples (Segment.acquire_many()).

    As a context manager its value is `arrays`: a tuple of read-only, zero-copy
    numpy views, one per member (for a pair: (x_t, x_t+1)); for a segment with a
    schema (acquired without a dtype or shape) it is `fields`, a tuple of dicts
    of such views, one dict per member. All members are pinned
    together until release(), which the with-block does on exit; the same rules as
    for Sample apply after release (accessors raise, old views are undefined but
    safe).
    """

    __slots__ = ("_g", "_dtype", "_shape", "_schema", "_arrays", "_fields", "__weakref__")

    def __init__(self, cgroup: _cistern.Sample, dtype: DTypeLike = None,
                 shape: ShapeLike = None, schema: Schema | None = None) -> None:
        self._g = cgroup
        self._dtype = dtype
        self._shape = _shape_tuple(shape)
        self._schema = schema
        self._arrays: tuple[Array, ...] | None = None
        self._fields: tuple[Fields, ...] | None = None

    @property
    def metas(self) -> list[Meta]:
        """[Meta(sample_id, sim_id, time_step), ...], one per member."""
        ms = self._g.meta
        assert isinstance(ms, list)
        return [Meta(*m) for m in ms]

    @property
    def held(self) -> bool:
        """Whether the members are still acquired (not yet released or handed back)."""
        return self._g.held

    def __len__(self) -> int:
        return len(self._g)

    @property
    def arrays(self) -> tuple[Array, ...]:
        """One read-only, zero-copy numpy view per member, with the dtype and
        shape asked for."""
        if not self._g.held:
            raise ValueError("sample already released")
        if self._arrays is None:
            np = _need_numpy()
            dtype = np.dtype(self._dtype if self._dtype is not None else np.uint8)
            out = []
            for i in range(len(self._g)):
                a = _frombuffer(self._g.member(i), dtype)
                out.append(a.reshape(self._shape) if self._shape is not None else a)
            self._arrays = tuple(out)
        return self._arrays

    @property
    def fields(self) -> tuple[Fields, ...]:
        """One dict of read-only, zero-copy numpy views per member, by field of the
        segment's schema (ValueError if it has none)."""
        if not self._g.held:
            raise ValueError("sample already released")
        if self._schema is None:
            raise ValueError("these samples were not read by a schema (the segment has none, "
                             "or a dtype or shape was given)")
        if self._fields is None:
            sch = self._schema
            self._fields = tuple(sch._views(self._g.member(i)) for i in range(len(self._g)))
        return self._fields

    def stack(self) -> Array:
        """The members copied into one new array of shape (len, *shape)."""
        a: Array = _need_numpy().stack(self.arrays)
        return a

    def stack_fields(self) -> Fields:
        """The members' fields copied into one new array per field, the members
        along a first axis."""
        np = _need_numpy()
        members = self.fields
        assert self._schema is not None
        return {name: np.stack([m[name] for m in members]) for name in self._schema.names}

    def copy_into(self, out: Any, metas: Any = None) -> int:
        """Copy every member into `out`, an array whose first dimension has room
        for them all (member i goes to out[i]), in one C call; `metas`, a (len, 3)
        uint64 array, receives their (sample_id, sim_id, time_step). Every member
        must be exactly out[0].nbytes long, else ValueError with nothing copied
        (the group stays held). Returns the number of members copied."""
        if len(out) < len(self._g):
            raise ValueError(f"copy_into: out has room for {len(out)} members, "
                             f"not {len(self._g)}")
        return self._g.copy_into(out, _row_bytes(out), metas)

    def release(self) -> None:
        """Hand every member back (idempotent)."""
        self._arrays = None
        self._fields = None
        self._g.release()

    def unacquire(self) -> None:
        """Hand every member back unread, as if the group had not been acquired.
        Raises ValueError if it was released already."""
        self._arrays = None
        self._fields = None
        self._g.unacquire()

    def __enter__(self) -> _V:
        return cast(_V, self.fields if self._schema is not None else self.arrays)

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "held" if self._g.held else "released"
        return f"<cistern.Group {self._g.kind} of {len(self)} {state}>"


class Reservation:
    """A slot reserved for writing in place (Segment.reserve()): the zero-copy put.

        with seg.reserve("float32", (32, 32), sim_id=3, time_step=t) as out:
            out[...] = field          # written straight into the shared segment
        sid = seg.last_meta.sample_id

    As a context manager its value is `array`, a writable numpy view of the
    slot with the dtype and shape asked for. Leaving the block normally commits
    the sample (its payload is the array's bytes); leaving it by an exception
    aborts it (the sample never existed) and lets the exception go on. Without
    the with-block, write through `array` or `view` and call commit() or
    abort(); a Reservation dropped while open is aborted.

    Readers see nothing of the slot before the commit. Once the reservation has
    ended, `array` is made read-only and new views are refused; a view taken
    before stays memory-safe, but writing through it would change a published
    sample (or a slot another producer has taken), so keep none past the block.
    """

    __slots__ = {"_seg": "", "_slot": "", "_dtype": "", "_shape": "", "_nbytes": "",
                 "_array": "", "_view": "", "__weakref__": "",
                 "sim_id": "The sim_id the sample gets at commit (may be changed before).",
                 "time_step": "The time_step the sample gets at commit (may be changed before).",
                 "sample_id": "The sample id, once committed; None before."}

    def __init__(self, seg: Segment, cslot: _cistern.Slot, dtype: DTypeLike,
                 shape: tuple[int, ...] | None, nbytes: int, sim_id: int,
                 time_step: int) -> None:
        self._seg = seg
        self._slot = cslot
        self._dtype = dtype
        self._shape = shape
        self._nbytes = nbytes
        self._array: Array | None = None
        self._view: memoryview | None = None
        self.sim_id = sim_id
        self.time_step = time_step
        self.sample_id: int | None = None

    @property
    def live(self) -> bool:
        """Whether the slot is still reserved (not yet committed or aborted)."""
        return self._slot.live

    @property
    def capacity(self) -> int:
        """Bytes the slot can hold: the segment's slot_size."""
        return self._slot.capacity

    @property
    def nbytes(self) -> int:
        """Bytes that commit() publishes by default: those of `array`."""
        return self._nbytes

    def _check(self) -> None:
        if not self._slot.live:
            raise ValueError("reservation already committed or aborted")

    @property
    def array(self) -> Array:
        """A writable numpy view of the slot with the dtype and shape asked for
        (dtype None: bytes, as uint8; shape None: as many items as fit)."""
        self._check()
        if self._array is None:
            np = _need_numpy()
            dtype = np.dtype(self._dtype if self._dtype is not None else np.uint8)
            a = _frombuffer(self._slot, dtype, self._nbytes // dtype.itemsize)
            self._array = a.reshape(self._shape) if self._shape is not None else a
        return self._array

    @property
    def view(self) -> memoryview:
        """A writable memoryview of the whole slot (capacity bytes)."""
        self._check()
        if self._view is None:
            self._view = memoryview(self._slot)  # type: ignore[arg-type]
        return self._view

    def commit(self, nbytes: int | None = None, sim_id: int | None = None,
               time_step: int | None = None, end_of_episode: bool = False) -> int:
        """Publish the slot's first nbytes (default: those of `array`) as a
        sample with this sim_id and time_step (default: those given to
        reserve()); returns its sample id (cistern_commit()). end_of_episode
        marks the last step of an episode, as put() does. ValueError if
        nbytes exceeds the slot or sim_id/time_step are outside the policy's
        bounds: the slot stays reserved then."""
        n = self._nbytes if nbytes is None else _count("nbytes", nbytes)
        sim = self.sim_id if sim_id is None else sim_id
        ts = self.time_step if time_step is None else time_step
        self._check()
        sid = self._slot.commit(n, _count("sim_id", sim), _count("time_step", ts),
                                bool(end_of_episode))
        self._end()
        self.sample_id = sid
        self._seg.last_meta = Meta(sid, sim, ts)
        return sid

    def abort(self) -> None:
        """Give the slot back unpublished (cistern_abort()): that sample never
        existed. Does nothing once the reservation has ended."""
        try:
            self._slot.abort()
        finally:
            self._end()

    def _end(self) -> None:
        if self._array is not None:
            self._array.flags.writeable = False
            self._array = None
        if self._view is not None:
            try:
                self._view.release()
            except BufferError:  # exported further: the mapping stays valid
                pass
            self._view = None

    def __enter__(self) -> Array:
        return self.array

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        if not self._slot.live:  # committed or aborted inside the block
            self._end()
            return
        if et is not None:
            self.abort()
            return
        try:
            self.commit()
        except BaseException:
            self.abort()
            raise

    def __repr__(self) -> str:
        state = "live" if self._slot.live else f"ended (sample id {self.sample_id})"
        return f"<cistern.Reservation of {self._nbytes} bytes {state}>"
