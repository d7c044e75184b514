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

Errors: a timeout raises TimeoutError, end of data raises cistern.EndOfData (iteration
just stops), bad parameters raise ValueError, anything else OSError (the errno's
subclass: FileExistsError, FileNotFoundError, BrokenPipeError once reception is
closed, ...) with cistern_strerror()'s message. Blocking calls release the GIL and
can be interrupted with Ctrl-C.

Timeouts are in seconds: None waits forever, 0 tries once, a positive number waits
at most that long.

A Segment is one attachment (struct cistern): use it from one thread at a time
(a second thread gets RuntimeError), and attach again in a child process.
"""

import re
import math
from collections import namedtuple

try:  # installed: the extension module lives inside the package
    from . import _cistern
except ImportError:  # build tree: PYTHONPATH=<builddir>/python:<srcdir>/python
    import _cistern

try:
    import numpy as _np
except ImportError:  # bytes-only use works without numpy
    _np = None

EndOfData = _cistern.EndOfData
_BATCH_POLICIES = ("reservoir", "fifo-evict-reservoir", "batch-reservoir")
# The names POLICIES.md uses, lowercased, accepted as well.
_CAMEL = {"fifoevictreservoir": "fifo-evict-reservoir",
          "simpairedreservoir": "sim-paired-reservoir",
          "batchreservoir": "batch-reservoir"}
Meta = namedtuple("Meta", "sample_id sim_id time_step")

POLICIES = tuple(_cistern.policy_name(i) for i in range(_cistern.POLICY_COUNT))
VERSION = _cistern.VERSION

__all__ = [
    "create", "attach", "unlink", "strerror", "Segment", "Sample", "Group", "Meta",
    "EndOfData", "POLICIES", "VERSION",
]


def strerror(code):
    """cistern_strerror(): a sentence for a result code (0 or a negative errno)."""
    return _cistern.strerror(int(code))


def _timeout_ms(timeout):
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


def _count(name, value):
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be a non-negative int, not {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, not {value}")
    return value


def _policy_number(policy):
    if isinstance(policy, str):
        key = policy.lower().replace("_", "-")
        key = _CAMEL.get(key, key)
        try:
            return _cistern.policy_parse(key)
        except ValueError:
            pass
    if isinstance(policy, int) and not isinstance(policy, bool):
        if 0 <= policy < _cistern.POLICY_COUNT:
            return policy
    raise ValueError(f"unknown policy {policy!r}; one of {', '.join(POLICIES)}")


def _need_numpy():
    if _np is None:
        raise ImportError("this call needs numpy")
    return _np


def _shape_tuple(shape):
    if shape is None:
        return None
    if isinstance(shape, int):
        return (shape,)
    return tuple(int(d) for d in shape)


def _misfit(nbytes, dtype, shape):
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


def _row_bytes(out):
    """Bytes of one row of `out`, a C-contiguous array (or 2-D memoryview) whose
    first dimension counts samples."""
    n = len(out)
    if n == 0:
        raise ValueError("the output array has no rows")
    return out.nbytes // n


def _keep_if_misfit(csample, lengths, dtype, shape):
    """Hand the acquired csample back unread, and raise, if a payload does not fit."""
    for n in lengths:
        why = _misfit(n, dtype, shape)
        if why:
            csample.unacquire()
            raise ValueError(why + " (it stays in the segment)")


def create(name, policy="fifo", slots=0, slot_size=0, watermark=0, pseudo_epochs=0,
           sweep_size=0, time_steps=0, batch_size=0, seed=0, mode=0o600,
           max_procs=0, expected_producers=0, lossy=False,
           single_producer=False, single_reader=False):
    """Create segment `name` and attach to it.

    policy: "fifo", "firo", "reservoir", "fifo-evict-reservoir",
    "sim-paired-reservoir", "batch-reservoir" (underscores and the CamelCase
    names of POLICIES.md work too), or its number. slots and
    slot_size: capacity and largest payload in bytes (0 = library default).
    watermark, pseudo_epochs, sweep_size, time_steps (nb_time_steps), batch_size,
    seed (0 = from the clock), mode (permission bits), max_procs,
    expected_producers (reception closes after that many producer_done()), lossy
    (FIFOEvictReservoir), single_producer (FIFO) and single_reader (FIFO and the
    reservoirs, not FIRO): one holder of the role at a time, others get
    OSError(EBUSY); a segment without them is as fast while it has one
    producer (FIFO) and one reader (FIFO and the reservoirs). Raises
    FileExistsError if the name is taken, ValueError
    for bad parameters, OSError(ENOTSUP) for a policy this build lacks.
    """
    if not isinstance(name, str):
        raise ValueError("segment name must be a str")
    kw = dict(
        slot_size=_count("slot_size", slot_size),
        slot_count=_count("slots", slots),
        mode=_count("mode", mode),
        watermark=_count("watermark", watermark),
        pseudo_epochs=_count("pseudo_epochs", pseudo_epochs),
        sweep_size=_count("sweep_size", sweep_size),
        nb_time_steps=_count("time_steps", time_steps),
        batch_size=_count("batch_size", batch_size),
        seed=_count("seed", seed),
        max_procs=_count("max_procs", max_procs),
        expected_producers=_count("expected_producers", expected_producers),
        flags=(_cistern.LOSSY if lossy else 0)
        | (_cistern.SINGLE_PRODUCER if single_producer else 0)
        | (_cistern.SINGLE_READER if single_reader else 0),
    )
    if mode > 0o7777:
        raise ValueError(f"mode {mode:#o} is not a set of permission bits")
    try:
        handle = _cistern.create(name, _policy_number(policy), **kw)
    except ValueError as e:
        # The library names struct cistern_config's fields; say this call's arguments.
        raise ValueError(_CONFIG_WORDS.sub(lambda m: _ARG_OF[m.group(0)], str(e))) from None
    return Segment(handle, name)


_ARG_OF = {"slot_count": "slots", "nb_time_steps": "time_steps", "CISTERN_LOSSY": "lossy",
           "CISTERN_SINGLE_PRODUCER": "single_producer",
           "CISTERN_SINGLE_READER": "single_reader"}
_CONFIG_WORDS = re.compile(r"\b(" + "|".join(_ARG_OF) + r")\b")


def attach(name):
    """Attach to the existing segment `name` (FileNotFoundError if there is none)."""
    if not isinstance(name, str):
        raise ValueError("segment name must be a str")
    return Segment(_cistern.attach(name), name)


def unlink(name, missing_ok=False):
    """Remove a segment's name; attached processes keep working."""
    try:
        _cistern.unlink(name)
    except FileNotFoundError:
        if not missing_ok:
            raise


class Sample:
    """An acquired sample (Segment.acquire()).

    As a context manager its value is `array`: a read-only numpy view of the
    payload in the shared segment (no copy), valid until release(), which the
    with-block does on exit. After release, `array`, `view`, `tobytes()` and
    `copy()` raise ValueError. A numpy array taken before the release stays
    memory-safe (the mapping lives as long as any view of it) but its contents are
    undefined from then on: the slot may already hold another sample. Copy what
    must outlive the block (`copy()` or `array.copy()`).

    While the sample is held, under FIFO and FIRO it belongs to this reader; under
    the reservoirs it is pinned (not evicted). If the Sample and every view of it
    are dropped without release(), the sample is released when collected.
    """

    __slots__ = ("_s", "_dtype", "_shape", "_array", "_view", "__weakref__")

    def __init__(self, csample, dtype=None, shape=None):
        self._s = csample
        self._dtype = dtype
        self._shape = _shape_tuple(shape)
        self._array = None
        self._view = None

    @property
    def meta(self):
        """Meta(sample_id, sim_id, time_step)."""
        return Meta(*self._s.meta)

    @property
    def held(self):
        return self._s.held

    def __len__(self):
        return len(self._s)

    def _check(self):
        if not self._s.held:
            raise ValueError("sample already released")

    @property
    def view(self):
        """A read-only memoryview of the payload; released (raises on use) on release()."""
        self._check()
        if self._view is None:
            self._view = memoryview(self._s)
        return self._view

    @property
    def array(self):
        """The payload as a read-only numpy view with the dtype and shape asked for."""
        self._check()
        if self._array is None:
            np = _need_numpy()
            dtype = np.dtype(self._dtype if self._dtype is not None else np.uint8)
            a = np.frombuffer(self._s, dtype=dtype)  # base is the Sample: keeps the mapping
            if self._shape is not None:
                a = a.reshape(self._shape)
            self._array = a
        return self._array

    def tobytes(self):
        self._check()
        return bytes(self.view)

    def copy(self):
        """A private, writable numpy copy of the payload."""
        return self.array.copy()

    def release(self):
        """Hand the sample back (idempotent)."""
        self._drop_views()
        self._s.release()

    def unacquire(self):
        """Hand the sample back unread, as if it had not been acquired: FIFO hands
        it out again first, FIRO and the reservoirs take back the read. Raises
        ValueError if it was released already."""
        self._drop_views()
        self._s.unacquire()

    def _drop_views(self):
        self._array = None
        if self._view is not None:
            try:
                self._view.release()
            except BufferError:  # the user exported it further; the mapping stays valid
                pass
            self._view = None

    def __enter__(self):
        return self.array

    def __exit__(self, *exc):
        self.release()
        return False

    def __repr__(self):
        state = "held" if self._s.held else "released"
        return f"<cistern.Sample {self.meta} {len(self)} bytes {state}>"


class Group:
    """An acquired pair (Segment.acquire_pair()), batch (Segment.acquire_batch())
    or run of samples (Segment.acquire_many()).

    As a context manager its value is `arrays`: a tuple of read-only, zero-copy
    numpy views, one per member (for a pair: (x_t, x_t+1)). All members are pinned
    together until release(), which the with-block does on exit; the same rules as
    for Sample apply after release (accessors raise, old views are undefined but
    safe).
    """

    __slots__ = ("_g", "_dtype", "_shape", "_arrays", "__weakref__")

    def __init__(self, cgroup, dtype=None, shape=None):
        self._g = cgroup
        self._dtype = dtype
        self._shape = _shape_tuple(shape)
        self._arrays = None

    @property
    def metas(self):
        """[Meta(sample_id, sim_id, time_step), ...], one per member."""
        return [Meta(*m) for m in self._g.meta]

    @property
    def held(self):
        return self._g.held

    def __len__(self):
        return len(self._g)

    @property
    def arrays(self):
        if not self._g.held:
            raise ValueError("sample already released")
        if self._arrays is None:
            np = _need_numpy()
            dtype = np.dtype(self._dtype if self._dtype is not None else np.uint8)
            out = []
            for i in range(len(self._g)):
                a = np.frombuffer(self._g.member(i), dtype=dtype)
                out.append(a.reshape(self._shape) if self._shape is not None else a)
            self._arrays = tuple(out)
        return self._arrays

    def stack(self):
        """The members copied into one new array of shape (len, *shape)."""
        return _need_numpy().stack(self.arrays)

    def copy_into(self, out, metas=None):
        """Copy every member into `out`, an array whose first dimension has room
        for them all (member i goes to out[i]), in one C call; `metas`, a (len, 3)
        uint64 array, receives their (sample_id, sim_id, time_step). Every member
        must be exactly out[0].nbytes long, else ValueError with nothing copied
        (the group stays held). Returns the number of members copied."""
        if len(out) < len(self._g):
            raise ValueError(f"copy_into: out has room for {len(out)} members, "
                             f"not {len(self._g)}")
        return self._g.copy_into(out, _row_bytes(out), metas)

    def release(self):
        """Hand every member back (idempotent)."""
        self._arrays = None
        self._g.release()

    def unacquire(self):
        """Hand every member back unread, as if the group had not been acquired.
        Raises ValueError if it was released already."""
        self._arrays = None
        self._g.unacquire()

    def __enter__(self):
        return self.arrays

    def __exit__(self, *exc):
        self.release()
        return False

    def __repr__(self):
        state = "held" if self._g.held else "released"
        return f"<cistern.Group {self._g.kind} of {len(self)} {state}>"


class Segment:
    """One attachment to a segment. Create with cistern.create() or cistern.attach()."""

    def __init__(self, handle, name):
        self._h = handle
        self.name = name
        self.last_meta = None
        self._cfg = None

    # -- properties -------------------------------------------------------

    @property
    def slot_size(self):
        return self._h.slot_size

    @property
    def policy(self):
        return self.config()["policy"]

    @property
    def detached(self):
        return self._h.detached

    def config(self):
        """The parameters as created, defaults filled in (a dict)."""
        if self._cfg is None:
            self._cfg = self._h.config()
        return dict(self._cfg)

    def stats(self):
        """The segment's statistics (a dict), read without disturbing it."""
        return self._h.stats()

    # -- writing ----------------------------------------------------------

    def put(self, data, sim_id=0, time_step=0, timeout=None):
        """Copy one sample in: bytes, a numpy array (any layout) or any buffer.

        Waits for room as the policy says. Returns the sample id. Raises
        TimeoutError, ValueError if it does not fit a slot or sim_id/time_step are
        out of the policy's bounds, BrokenPipeError once reception is closed.
        """
        if _np is not None and isinstance(data, _np.ndarray):
            if not data.flags.c_contiguous:
                data = _np.ascontiguousarray(data)
        elif not isinstance(data, (bytes, bytearray)):
            mv = memoryview(data)
            if not mv.c_contiguous:
                data = mv.tobytes()
        sid = self._h.put(data, _count("sim_id", sim_id), _count("time_step", time_step),
                          _timeout_ms(timeout))
        return sid

    def put_batch(self, data, sim_id=0, time_step=0, timeout=None):
        """Copy the rows of a numpy array in as samples, in order: row i of `data`
        (shape (k, ...)) is one sample, as put() would put it, all with one
        cistern_put_batch() call while there is room.

        sim_id and time_step are ints or sequences of k. Waits for room as put()
        does. Returns the sample ids put (a uint64 array): fewer than k only when
        the timeout comes after at least one; with none put, raises TimeoutError.
        Raises ValueError if a row does not fit a slot, BrokenPipeError once
        reception is closed.
        """
        np = _need_numpy()
        data = np.ascontiguousarray(data)
        if data.ndim == 0 or data.shape[0] == 0:
            raise ValueError("put_batch: data must be an array of one or more rows")
        k = data.shape[0]
        if type(sim_id) is int and type(time_step) is int and sim_id >= 0 and time_step >= 0:
            # One sim_id and time_step for every row: put_many() takes them as they are.
            ids = np.empty(k, dtype=np.uint64)
            n = self._h.put_many(data, data.nbytes // k, k, sim_id, time_step,
                                 _timeout_ms(timeout), ids)
            return ids if n == k else ids[:n].copy()
        metas = np.zeros((k, 3), dtype=np.uint64)
        for col, name, v in ((1, "sim_id", sim_id), (2, "time_step", time_step)):
            v = np.asarray(v)
            if v.dtype.kind not in "iu" or (v.size and int(v.min()) < 0):
                raise ValueError(f"put_batch: {name} must be non-negative ints")
            try:
                metas[:, col] = np.broadcast_to(v, (k,))
            except ValueError:
                raise ValueError(f"put_batch: {name} must be one int or {k} of them") from None
        n = self._h.put_batch(data, data[0].nbytes, k, metas, _timeout_ms(timeout))
        return metas[:n, 0].copy()

    def close_reception(self):
        """Close reception: puts fail from now on, readers drain then get end of data."""
        self._h.close_reception()

    def producer_done(self):
        """Declare one expected producer done; returns how many are still expected."""
        return self._h.producer_done()

    # -- reading ----------------------------------------------------------

    def get(self, timeout=None, meta=False):
        """Take one sample out as bytes (or (bytes, Meta) with meta=True).

        Raises EndOfData at end of data and TimeoutError on timeout.
        """
        data, m = self._read(self._h.get, "one", _timeout_ms(timeout))
        self.last_meta = Meta(*m)
        return (data, self.last_meta) if meta else data

    def get_array(self, dtype="uint8", shape=None, timeout=None, meta=False):
        """Take one sample out as a private numpy array of `dtype`, reshaped to `shape`."""
        np = _need_numpy()
        dtype = np.dtype(dtype)
        shape = _shape_tuple(shape)
        if shape is not None:
            out = np.empty(shape, dtype=dtype)
            metas = np.empty((1, 3), dtype=np.uint64)
            self._read(self._h.get_many, "one", out, out.nbytes, 1, _timeout_ms(timeout), metas)
            self.last_meta = Meta(*(int(v) for v in metas[0]))
        else:
            s = self._acquire_one(timeout)
            _keep_if_misfit(s, [len(s)], dtype, None)
            try:
                self.last_meta = Meta(*s.meta)
                out = np.frombuffer(s, dtype=dtype).copy()
            finally:
                s.release()
        return (out, self.last_meta) if meta else out

    def get_batch(self, n=None, dtype="float32", shape=(), timeout=None, meta=False):
        """Take up to n samples gathered into one new numpy array of shape (k, *shape).

        Every sample must hold exactly prod(shape) items of dtype. Under the
        reservoir policies that have batch reads (reservoir, fifo_evict_reservoir,
        batch_reservoir) this is one cistern_acquire_batch() call, copied out and
        released: n distinct samples drawn together (n None = the segment's
        batch_size, which BatchReservoir requires); if one does not fit, the
        batch goes back unread. Under FIFO and FIRO it is n successive reads,
        gathered in C.
        k < n only at the end of data (or, for FIFO/FIRO, when the timeout comes
        after at least one sample); with none at all, EndOfData or TimeoutError is
        raised. With meta=True, also returns a (k, 3) uint64 array of
        (sample_id, sim_id, time_step).
        """
        np = _need_numpy()
        self._check_read("batch", n)
        if n is None:
            n = self._conf()["batch_size"]
            if not n:
                raise ValueError("get_batch: give n (this segment has no batch_size)")
        n = _count("n", n)
        dtype = np.dtype(dtype)
        shape = _shape_tuple(shape) or ()
        out = np.empty((n,) + shape, dtype=dtype)
        item = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
        metas = np.empty((n, 3), dtype=np.uint64) if meta else None
        if n == 0:
            return (out, metas) if meta else out
        if self._batch_reads():
            k = self._h.get_batch(out, item, n, _timeout_ms(timeout), metas)
        else:
            k = self._h.get_many(out, item, n, _timeout_ms(timeout), metas)
        if k < n:
            out = out[:k].copy()
            if meta:
                metas = metas[:k].copy()
        return (out, metas) if meta else out

    def get_into(self, out, timeout=None, metas=None):
        """Copy the next sample into `out`, a writable buffer you reuse (a numpy
        array, a bytearray, ...), with no new object made: the fast way to read one
        sample at a time. `metas`, if given, is a writable array of 3 uint64 that
        receives (sample_id, sim_id, time_step). Returns the payload length in bytes.

        Serves the policies that read one sample (not sim-paired- or
        batch-reservoir). A sample longer than `out` raises ValueError and stays in
        the segment. Raises EndOfData, TimeoutError as get() does.
        """
        try:
            return self._h.get_into(out, -1 if timeout is None else _timeout_ms(timeout), metas)
        except ValueError:
            self._check_read("one")
            raise

    def get_batch_into(self, out, timeout=None, metas=None, lengths=None):
        """Copy up to len(out) samples into `out` in one C call, sample i into
        out[i]: `out` is a C-contiguous numpy array (or 2-D memoryview) whose rows
        are each at least a sample long, reused from call to call. Returns k, the
        samples copied (rows beyond k are left as they were).

        FIFO and FIRO: the next samples there now, or, if none is, the first one
        waited for (with whatever came with it), so k may be short of len(out)
        while producers are slower than you; the batch reservoirs
        (reservoir, fifo-evict-reservoir, batch-reservoir): len(out) distinct
        samples drawn together (batch-reservoir: its batch_size rows). `metas` (a
        (len(out), 3) uint64 array) and `lengths` (len(out) uint64) receive each
        sample's (sample_id, sim_id, time_step) and payload length. A sample
        longer than a row raises ValueError and stays in the segment. Raises
        EndOfData (with none left) and TimeoutError as get_batch() does.
        """
        n = len(out)
        t = -1 if timeout is None else _timeout_ms(timeout)
        try:
            return self._h.get_batch_into(out, _row_bytes(out), n, t, metas, lengths)
        except ValueError:
            self._check_read("batch", n)
            raise

    def acquire_many(self, n, timeout=None, dtype=None, shape=None):
        """Acquire up to n samples one after the other, waiting for each, and hold
        them all until release() (which consumes them, as get() would) or
        unacquire() (which hands them back unread). Returns a Group whose
        with-block value is a tuple of zero-copy views; Group.copy_into() gathers
        them into an array. Fewer than n only at end of data, or when the timeout
        (for the whole call) comes after the first. For a reader that must keep
        samples in the segment until it has passed them on (a crash in between
        hands them out again under FIFO and FIRO). Policies that read one sample."""
        self._check_read("one")
        cg = self._h.acquire_many(_count("n", n), _timeout_ms(timeout))
        _keep_if_misfit(cg, [len(cg.member(i)) for i in range(len(cg))], dtype, shape)
        return Group(cg, dtype, shape)

    def acquire(self, timeout=None, dtype=None, shape=None):
        """Acquire one sample to read in place; returns a Sample (a context manager).

            with seg.acquire(dtype="float32", shape=(32, 32)) as view:
                loss = model(torch.from_numpy(view.copy()))
        """
        cs = self._acquire_one(timeout)
        _keep_if_misfit(cs, [len(cs)], dtype, shape)
        s = Sample(cs, dtype, shape)
        self.last_meta = s.meta
        return s

    def _batch_reads(self):
        return (getattr(self._h, "get_batch", None) is not None
                and self._conf()["policy"] in _BATCH_POLICIES)

    def _conf(self):
        if self._cfg is None:
            self._cfg = self._h.config()
        return self._cfg

    def _read_misuse(self, kind, n=None):
        """Why this segment's policy does not read `kind` ("one", "batch", "pair")
        (with batch size n); None if it does."""
        cfg = self._conf()
        policy, bs = cfg["policy"], cfg["batch_size"]
        if policy == "sim-paired-reservoir" and kind != "pair":
            return "sim-paired-reservoir reads pairs: use get_pair() or acquire_pair()"
        if kind == "pair" and policy != "sim-paired-reservoir":
            return f"pairs are read from a sim-paired-reservoir, not a {policy}"
        if policy == "batch-reservoir" and kind == "one":
            return "batch-reservoir reads whole batches: use get_batch() or acquire_batch()"
        if policy == "batch-reservoir" and n not in (None, 0, bs):
            return f"batch-reservoir reads batches of exactly its batch_size ({bs}), not {n}"
        return None

    def _check_read(self, kind, n=None):
        why = self._read_misuse(kind, n)
        if why:
            raise ValueError(why)

    def _read(self, call, kind, *args):
        """call(*args), with a read the policy does not do explained (the library
        only says EINVAL)."""
        try:
            return call(*args)
        except ValueError:
            why = self._read_misuse(kind)
            if why:
                raise ValueError(why) from None
            raise

    def _acquire_one(self, timeout):
        return self._read(self._h.acquire, "one", _timeout_ms(timeout))

    def acquire_batch(self, n=None, timeout=None, dtype=None, shape=None):
        """Acquire n distinct samples drawn together, pinned until release (reservoir
        policies; n None = the segment's batch_size). Returns a Group whose value in
        a with-block is a tuple of zero-copy numpy views. The last batch after
        reception closes may be short."""
        if not hasattr(self._h, "acquire_batch"):
            raise NotImplementedError("this libcistern has no cistern_acquire_batch()")
        self._check_read("batch", n)
        if self._conf()["policy"] not in _BATCH_POLICIES:
            raise ValueError("acquire_batch() draws from reservoir, fifo-evict-reservoir and "
                             f"batch-reservoir segments, not a {self._conf()['policy']}")
        cg = self._h.acquire_batch(0 if n is None else _count("n", n), _timeout_ms(timeout))
        _keep_if_misfit(cg, [len(cg.member(i)) for i in range(len(cg))], dtype, shape)
        return Group(cg, dtype, shape)

    def acquire_pair(self, timeout=None, dtype=None, shape=None):
        """Acquire a pair (x_t, x_t+1) of one simulation (SimPairedReservoir).
        Returns a Group whose value in a with-block is (view_t, view_t1)."""
        if not hasattr(self._h, "acquire_pair"):
            raise NotImplementedError("this libcistern has no cistern_acquire_pair()")
        self._check_read("pair")
        cg = self._h.acquire_pair(_timeout_ms(timeout))
        _keep_if_misfit(cg, [len(cg.member(i)) for i in range(len(cg))], dtype, shape)
        return Group(cg, dtype, shape)

    def get_pair(self, dtype="float32", shape=(), timeout=None, meta=False):
        """Take a pair out as one new array of shape (2, *shape): [x_t, x_t+1]
        (SimPairedReservoir). With meta=True, also returns [Meta, Meta]."""
        if not hasattr(self._h, "acquire_pair"):
            raise NotImplementedError("this libcistern has no cistern_acquire_pair()")
        np = _need_numpy()
        dtype = np.dtype(dtype)
        shape = _shape_tuple(shape) or ()
        self._check_read("pair")
        # Acquired, checked, copied, released: a pair that does not fit goes back unread.
        cg = self._h.acquire_pair(_timeout_ms(timeout))
        _keep_if_misfit(cg, [len(cg.member(i)) for i in range(2)], dtype, shape)
        try:
            out = np.stack([np.frombuffer(cg.member(i), dtype=dtype).reshape(shape)
                            for i in range(2)])
            metas = [Meta(*m) for m in cg.meta]
        finally:
            cg.release()
        return (out, metas) if meta else out

    def __iter__(self):
        """Yield payloads (bytes) until end of data."""
        while True:
            try:
                yield self.get()
            except EndOfData:
                return

    def iter_arrays(self, dtype="uint8", shape=None, timeout=None):
        """Yield numpy copies until end of data."""
        while True:
            try:
                yield self.get_array(dtype, shape, timeout)
            except EndOfData:
                return

    def iter_batches(self, n, dtype="float32", shape=(), timeout=None):
        """Yield get_batch() arrays until end of data (the last one may be short)."""
        while True:
            try:
                yield self.get_batch(n, dtype, shape, timeout)
            except EndOfData:
                return

    # -- lifetime ---------------------------------------------------------

    def unlink(self, missing_ok=True):
        """Remove this segment's name (attached processes keep working)."""
        unlink(self.name, missing_ok=missing_ok)

    def detach(self):
        """Detach (idempotent). Samples still held are released."""
        self._h.detach()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.detach()
        return False

    def __repr__(self):
        state = "detached" if self._h.detached else self.policy
        return f"<cistern.Segment {self.name!r} {state}>"
