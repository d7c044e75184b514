# SPDX-License-Identifier: MIT
"""Remote producers: a connection to a `cistern serve` server on another
machine, and the keys that secure it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ._common import _batch_metas, _cistern, _count, _need_numpy, _np, _timeout_ms
from .records import RemoteInfo
from .schema import Schema, _batch_rows, _schema_fields
from .segment import _priority

if TYPE_CHECKING:
    from ._common import Array, Timeout

__all__ = ["RemoteProducer", "connect", "keygen"]


class RemoteProducer:
    """A producer on another machine than its learners: a connection to a
    `cistern serve` server, which puts what it receives into its segments, one
    per learner rank (docs/REMOTE.md). Make one with cistern.connect(); use it
    from one thread at a time (connect once per thread).

        with cistern.connect("tcp://learner-node:5555") as out:
            for t, field in enumerate(simulate()):
                out.put(field, sim_id=s, time_step=t)   # rank s mod R gets it
            out.producer_done()                        # waits for every ack

    put() and put_batch() return once the samples are handed to the connection
    under the server's credit, waiting while its window of samples in flight is
    full (a full segment thus slows its producers down). A sample is
    acknowledged once it is in its segment, whole and exactly once; flush()
    and producer_done() wait for the acknowledgements. An error the server met
    with an earlier sample (BrokenPipeError once its segment's reception is
    closed) is raised by the next call, once. A lost server raises
    ConnectionResetError: close and connect again.

    Leaving a with-block normally flushes (every sample acknowledged), then
    closes; leaving it by an exception closes without waiting. Neither
    declares the producer done: call producer_done() for that.
    """

    def __init__(self, remote: _cistern.Remote, endpoint: str) -> None:
        self._r = remote
        #: The server's endpoint, as given to connect().
        self.endpoint = endpoint
        text = remote.schema()
        self._schema = Schema.parse(text) if text is not None else None
        self._slot_size = remote.info()["slot_size"]

    @property
    def schema(self) -> Schema | None:
        """The schema of the server's segments (cistern_remote_schema_get()), or
        None for segments of plain bytes; puts are checked against it as a
        local Segment's are."""
        return self._schema

    @property
    def slot_size(self) -> int:
        """The largest payload the server's segments take, in bytes."""
        return self._slot_size

    @property
    def closed(self) -> bool:
        """Whether close() was called."""
        return self._r.closed

    def info(self) -> RemoteInfo:
        """The server's parameters and this connection's counts
        (cistern_remote_info_get())."""
        return RemoteInfo._from(self._r.info())

    def _payload(self, data: Any) -> Any:
        """One sample's bytes: a dict of fields (or a structured record) packed
        by the schema, or any buffer made contiguous; checked for size."""
        sch = self._schema
        fields = _schema_fields(sch, data)
        if sch is not None and fields is not None:
            np = _need_numpy()
            values = sch._values(fields)
            rec = np.zeros(1, dtype=sch.dtype)  # zeros: the padding between fields too
            for name, v in values.items():
                rec[name][0] = v
            return rec
        if _np is not None and isinstance(data, _np.ndarray):
            if not data.flags.c_contiguous:
                data = _np.ascontiguousarray(data)
        elif not isinstance(data, (bytes, bytearray)):
            mv = memoryview(data)
            if not mv.c_contiguous:
                data = mv.tobytes()
        n = memoryview(data).nbytes
        if sch is not None and n != sch.size:
            raise ValueError(f"a sample of {n} bytes, where the schema's samples are "
                             f"{sch.size} ({sch.text}): put a dict of its fields")
        if n > self._slot_size:
            raise ValueError(f"sample of {n} bytes does not fit the server's slots of "
                             f"{self._slot_size} bytes")
        return data

    def put(self, data: Any, sim_id: int = 0, time_step: int = 0,
            timeout: Timeout = None, priority: float | None = None,
            end_of_episode: bool = False) -> None:
        """Send one sample (cistern_remote_put()): bytes, a numpy array (any
        layout) or any buffer; where the server's segments have a schema, a dict
        of its fields (or a numpy structured record), checked against it first
        (ValueError naming the field; nothing is sent). sim_id picks the rank
        (sim_id mod R unless the server routes otherwise).

        Waits while the window of samples in flight is full: TimeoutError when
        `timeout` passes first. ValueError if it does not fit a slot;
        BrokenPipeError after producer_done() or when the server reported an
        earlier sample refused because its segment's reception closed;
        ConnectionResetError once the server is gone.

        priority (prioritized segments only): the sample's priority, a finite
        number >= 0 (cistern_remote_put_prioritized()); None gives it the
        largest priority seen so far. ValueError, and nothing is sent, for NaN,
        an infinite or a negative priority, or when none of the server's
        segments is prioritized. A sample routed to a segment that is not
        prioritized (when others are) is refused by the server: a later call
        raises OSError with errno ENOTSUP.

        end_of_episode: this sample is the last step of its episode
        (CISTERN_META_END_OF_EPISODE), carried to the server. A
        sim-paired-reservoir keeps the mark, and no window of get_windows()
        runs past it; the other policies ignore it.
        """
        payload = self._payload(data)
        sim, step = _count("sim_id", sim_id), _count("time_step", time_step)
        if priority is not None:
            self._r.put_prioritized(payload, _priority(priority), sim, step,
                                    _timeout_ms(timeout), bool(end_of_episode))
            return
        self._r.put(payload, sim, step, _timeout_ms(timeout), bool(end_of_episode))

    def put_batch(self, data: Any, sim_id: int | Sequence[int] | Array = 0,
                  time_step: int | Sequence[int] | Array = 0,
                  timeout: Timeout = None) -> int:
        """Send the rows of a numpy array as samples, in order
        (cistern_remote_put_batch()): row i of `data` (shape (k, ...)) is one
        sample. Where the segments have a schema, `data` is a dict of its
        fields, each with the k samples along a first axis, or a numpy
        structured array of k records, checked first (nothing is sent if one
        is wrong). sim_id and time_step are ints or sequences of k.

        Returns how many were sent: fewer than k only when the timeout came
        after at least one (with none, TimeoutError). The errors of put().
        """
        sch = self._schema
        data = _batch_rows(sch, data)
        k = data.shape[0]
        row = data[0].nbytes
        if sch is not None and row != sch.size:
            raise ValueError(f"a sample of {row} bytes, where the schema's samples are "
                             f"{sch.size} ({sch.text}): put a dict of its fields")
        if row > self._slot_size:
            raise ValueError(f"samples of {row} bytes do not fit the server's slots of "
                             f"{self._slot_size} bytes")
        metas = _batch_metas(k, sim_id, time_step)
        return self._r.put_batch(data, row, k, metas, _timeout_ms(timeout))

    def flush(self, timeout: Timeout = None) -> None:
        """Wait until every sample sent so far is acknowledged (in its segment)
        or failed (cistern_remote_flush()). TimeoutError when `timeout` passes
        first; the first error the server reported since the last one raised."""
        self._r.flush(_timeout_ms(timeout))

    def producer_done(self, timeout: Timeout = None) -> None:
        """Flush, then declare this producer done, as Segment.producer_done()
        does, on every rank it sent a sample to whose segment expects
        producers (cistern_remote_producer_done()). Puts raise BrokenPipeError
        from then on."""
        self._r.producer_done(_timeout_ms(timeout))

    def close(self) -> None:
        """Say goodbye and free the connection (cistern_remote_close()). Samples
        not yet acknowledged are not waited for (flush() first); those already
        sent still reach their segment if the server can put them. Closing
        again does nothing."""
        self._r.close()

    def __enter__(self) -> RemoteProducer:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            if et is None and not self._r.closed:
                self.flush()
        finally:
            self.close()

    def __repr__(self) -> str:
        return f"<cistern.RemoteProducer {self.endpoint!r}{' closed' if self.closed else ''}>"


def connect(endpoint: str, *, server_key: str | None = None, public_key: str | None = None,
            secret_key: str | None = None, connect_timeout: float = 5.0,
            heartbeat: float = 1.0, heartbeat_timeout: float | None = None,
            window: int = 0, linger: float | None = None) -> RemoteProducer:
    """Connect a remote producer to a `cistern serve` server at `endpoint`
    ("tcp://host:port" or "ipc://path") and return its RemoteProducer
    (cistern_remote_connect()); returns once the server answered.

    server_key: the server's CurveZMQ public key (Z85 text), needed for a
      server bound to another address than loopback; public_key, secret_key:
      this client's key pair (one the server admits; None: a fresh pair).
    connect_timeout: seconds to wait for the server's answer (TimeoutError:
      no server there, or it refused this client's key).
    heartbeat, heartbeat_timeout: seconds between ZeroMQ heartbeats, and of
      silence after which the server is taken for gone (None: 5 heartbeats).
    window: samples in flight asked for (0: what the server grants).
    linger: seconds a small put may wait to leave in one message with the
      puts after it (None: 0.001); 0 sends every put by itself. A put on a
      connection idle that long leaves at once, so only bursts are gathered.

    ValueError for a bad endpoint or a key that is not Z85.
    """
    if not isinstance(endpoint, str):
        raise TypeError(f"endpoint must be a str, not {type(endpoint).__name__}")

    def ms(what: str, s: float | None) -> int:
        if s is None:
            return 0
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not s > 0:
            raise ValueError(f"{what} must be a positive number of seconds, not {s!r}")
        return min(max(1, math.ceil(s * 1000)), 2**31 - 1)

    if linger is None:
        linger_us = 0
    elif isinstance(linger, bool) or not isinstance(linger, (int, float)) or not 0 <= linger <= 1:
        raise ValueError(f"linger must be a number of seconds from 0 to 1, not {linger!r}")
    else:
        linger_us = -1 if linger == 0 else max(1, round(linger * 1e6))
    r = _cistern.remote_connect(endpoint, server_key, public_key, secret_key,
                                ms("connect_timeout", connect_timeout), ms("heartbeat", heartbeat),
                                ms("heartbeat_timeout", heartbeat_timeout),
                                _count("window", window), linger_us)
    return RemoteProducer(r, endpoint)


def keygen() -> tuple[str, str]:
    """A fresh CurveZMQ key pair, (public, secret), each 40 characters of Z85
    text (cistern_remote_keygen()), as `cistern keygen` writes them."""
    return _cistern.remote_keygen()
