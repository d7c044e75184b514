#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Section 7 of cistern-bench: 4 KiB samples from one Python process to another.

A producer process sends `n` samples of `size` bytes to a consumer process, each
made with fork() from this one and pinned to its own CPU (producer on CPU 0,
consumer on CPU 1), as section 1's C contenders are. Every sample is a row of
uint64 words whose first word is its sequence number and last word that number
xor a constant; the producer writes both into the row it sends, and the consumer
checks both for every sample, and the count, so a lost, duplicated, reordered or
damaged sample makes the row ERR. Between the two words the payload is whatever
the row held; each contender copies all of it across.

Contenders, each with room for `slots` samples (queues: that many items):
  - cistern, FIFO segment: put_batch()/get_batch_into() (up to `batch` samples a
    call, into a reused array), put()/get_into() (one a call, into a reused
    array), put()/get() (one a call, a new bytes object each);
  - multiprocessing.Queue: bytes, one sample an item, or `batch` samples an item;
  - multiprocessing.shared_memory: a ring of `slots` rows and a hand-made index
    (head and tail counters in the same block, each on its own cache line), one
    sample or up to `batch` a call, waiting by spinning. Its ordering rests on
    x86's: the row's stores are made before the head's, the head is loaded before
    the row (memoryview and numpy stores and loads, in that program order).

One sample a call, rows and their two words go through bytearrays and
memoryviews (a numpy scalar costs ten times more to read or write); batches
through numpy arrays.

One unmeasured calibration run per contender sizes its runs to about
`target_s` seconds; then `reps` measured runs interleaved across the contenders.
Prints one line per contender for cistern-bench to read:

    ROW<TAB><contender><TAB><k samples/s of each rep, comma-separated>

or `n/a: ...` / `ERR: ...` in place of the numbers. The first row is the
reference of the ratios.
"""
import argparse
import multiprocessing as mp
import os
import sys
import time
from multiprocessing import shared_memory

K = 0x9E3779B97F4A7C15  # the last word of sample i is i ^ K


def pin(cpu):
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        try:
            os.sched_setaffinity(0, {cpu % os.cpu_count()})
        except OSError:
            pass


class Contender:
    """One way to move samples: setup() in the parent before the fork,
    produce() and consume() in the children, teardown() in the parent."""

    name = ""
    unavailable = None  # a reason, when it cannot run here

    def setup(self, a, n):
        pass

    def teardown(self):
        pass

    def produce(self, a, n):
        raise NotImplementedError

    def consume(self, a, n):
        """Returns the number of bad samples."""
        raise NotImplementedError


def words(buf):
    """The uint64 words of a bytearray (or any writable buffer), through a
    memoryview: reading and writing one costs a tenth of a numpy scalar's."""
    return memoryview(buf).cast("B").cast("Q")


def rows(np, a, n):
    """The sequence numbers 0..n-1 and their tails, to check against."""
    seq = np.arange(n, dtype=np.uint64)
    return seq, seq ^ np.uint64(K)


# ---------------------------------------------------------------- cistern


class CisternBase(Contender):
    cistern = None

    def setup(self, a, n):
        self.seg_name = f"bench-py-{os.getpid()}-{type(self).__name__}"
        self.cistern.unlink(self.seg_name, missing_ok=True)
        self.seg = self.cistern.create(self.seg_name, policy="fifo", slots=a.slots,
                                       slot_size=a.size)

    def teardown(self):
        self.seg.detach()
        self.cistern.unlink(self.seg_name, missing_ok=True)

    def attach(self):
        return self.cistern.attach(self.seg_name)


class CisternBatch(CisternBase):
    name = "cistern put_batch/get_batch_into, up to {batch} a call"

    def produce(self, a, n):
        import numpy as np
        seg = self.attach()
        arr = np.zeros((a.batch, a.size // 8), dtype=np.uint64)
        seq, tail = rows(np, a, n)
        for i in range(0, n, a.batch):
            k = min(a.batch, n - i)
            arr[:k, 0] = seq[i:i + k]
            arr[:k, -1] = tail[i:i + k]
            seg.put_batch(arr if k == a.batch else arr[:k])
        seg.detach()

    def consume(self, a, n):
        import numpy as np
        seg = self.attach()
        out = np.empty((a.batch, a.size // 8), dtype=np.uint64)
        seq, tail = rows(np, a, n)
        got = bad = 0
        while got < n:
            k = seg.get_batch_into(out, timeout=30)
            if k > n - got:
                return n
            bad += int(np.count_nonzero(out[:k, 0] != seq[got:got + k]))
            bad += int(np.count_nonzero(out[:k, -1] != tail[got:got + k]))
            got += k
        seg.detach()
        return bad


class CisternOne(CisternBase):
    name = "cistern put/get_into, one a call"

    def produce(self, a, n):
        seg = self.attach()
        put = seg.put
        row = bytearray(a.size)
        w = words(row)
        for i in range(n):
            w[0] = i
            w[-1] = i ^ K
            put(row)
        seg.detach()

    def consume(self, a, n):
        seg = self.attach()
        get_into = seg.get_into
        out = bytearray(a.size)
        w = words(out)
        bad = 0
        for i in range(n):
            get_into(out, 30)
            bad += w[0] != i or w[-1] != i ^ K
        seg.detach()
        return bad


class CisternBytes(CisternOne):
    name = "cistern put/get (a new bytes object each), one a call"

    def consume(self, a, n):
        seg = self.attach()
        get = seg.get
        bad = 0
        for i in range(n):
            b = get(30)
            bad += (int.from_bytes(b[:8], "little") != i
                    or int.from_bytes(b[-8:], "little") != i ^ K)
        seg.detach()
        return bad


# ------------------------------------------------------ multiprocessing.Queue


class QueueOne(Contender):
    name = "multiprocessing.Queue put/get (bytes), one a call"

    def setup(self, a, n):
        self.q = mp.get_context("fork").Queue(maxsize=a.slots)

    def teardown(self):
        self.q.close()
        self.q.join_thread()

    def produce(self, a, n):
        row = bytearray(a.size)
        w = words(row)
        put = self.q.put
        for i in range(n):
            w[0] = i
            w[-1] = i ^ K
            put(bytes(row))
        self.q.close()
        self.q.join_thread()  # everything flushed to the pipe before the exit

    def consume(self, a, n):
        get = self.q.get
        bad = 0
        for i in range(n):
            b = get(timeout=30)
            bad += (int.from_bytes(b[:8], "little") != i
                    or int.from_bytes(b[-8:], "little") != i ^ K)
        return bad


class QueueBatch(QueueOne):
    name = "multiprocessing.Queue, {batch} samples an item (one bytes object)"

    def setup(self, a, n):
        self.q = mp.get_context("fork").Queue(maxsize=max(1, a.slots // a.batch))

    def produce(self, a, n):
        import numpy as np
        arr = np.zeros((a.batch, a.size // 8), dtype=np.uint64)
        seq, tail = rows(np, a, n)
        for i in range(0, n, a.batch):
            k = min(a.batch, n - i)
            arr[:k, 0] = seq[i:i + k]
            arr[:k, -1] = tail[i:i + k]
            self.q.put(arr[:k].tobytes())
        self.q.close()
        self.q.join_thread()

    def consume(self, a, n):
        import numpy as np
        seq, tail = rows(np, a, n)
        got = bad = 0
        while got < n:
            b = np.frombuffer(self.q.get(timeout=30), dtype=np.uint64).reshape(-1, a.size // 8)
            k = len(b)
            if k > n - got:
                return n
            bad += int(np.count_nonzero(b[:, 0] != seq[got:got + k]))
            bad += int(np.count_nonzero(b[:, -1] != tail[got:got + k]))
            got += k
        return bad


# ---------------------------------------- multiprocessing.shared_memory ring


class RingOne(Contender):
    name = "multiprocessing.shared_memory ring, hand-made head/tail index, one a call"

    def setup(self, a, n):
        import numpy as np
        # Both children inherit the mapping through fork(); nobody else attaches.
        self.shm = shared_memory.SharedMemory(create=True, size=128 + a.slots * a.size)
        self.index = words(self.shm.buf[:128])  # [0] head, [8] tail
        self.index[0] = self.index[8] = 0
        self.ring = np.ndarray((a.slots, a.size // 8), dtype=np.uint64, buffer=self.shm.buf,
                               offset=128)

    def teardown(self):
        self.index.release()
        del self.index, self.ring
        self.shm.close()
        self.shm.unlink()

    def produce(self, a, n):
        index, buf, slots, size = self.index, self.shm.buf, a.slots, a.size
        row = bytearray(size)
        w = words(row)
        tail = 0
        for head in range(n):
            while head - tail >= slots:
                tail = index[8]
            w[0] = head
            w[-1] = head ^ K
            at = 128 + (head % slots) * size
            buf[at:at + size] = row
            index[0] = head + 1

    def consume(self, a, n):
        index, buf, slots, size = self.index, self.shm.buf, a.slots, a.size
        out = bytearray(size)
        w = words(out)
        head = bad = 0
        for tail in range(n):
            while head == tail:
                head = index[0]
            at = 128 + (tail % slots) * size
            out[:] = buf[at:at + size]
            index[8] = tail + 1
            bad += w[0] != tail or w[-1] != tail ^ K
        return bad


class RingBatch(RingOne):
    name = "multiprocessing.shared_memory ring, hand-made head/tail index, up to {batch} a call"

    def produce(self, a, n):
        import numpy as np
        index, ring, slots = self.index, self.ring, a.slots
        arr = np.zeros((a.batch, a.size // 8), dtype=np.uint64)
        seq, tails = rows(np, a, n)
        head = tail = 0
        while head < n:
            while head - tail >= slots:
                tail = index[8]
            at = head % slots
            k = min(a.batch, n - head, slots - (head - tail), slots - at)
            arr[:k, 0] = seq[head:head + k]
            arr[:k, -1] = tails[head:head + k]
            ring[at:at + k] = arr[:k]
            head += k
            index[0] = head

    def consume(self, a, n):
        import numpy as np
        index, ring, slots = self.index, self.ring, a.slots
        out = np.empty((a.batch, a.size // 8), dtype=np.uint64)
        seq, tails = rows(np, a, n)
        head = tail = bad = 0
        while tail < n:
            while head == tail:
                head = index[0]
            at = tail % slots
            k = min(a.batch, head - tail, slots - at)
            out[:k] = ring[at:at + k]
            index[8] = tail + k
            bad += int(np.count_nonzero(out[:k, 0] != seq[tail:tail + k]))
            bad += int(np.count_nonzero(out[:k, -1] != tails[tail:tail + k]))
            tail += k
        return bad


# ---------------------------------------------------------------- harness


def _child(role, c, a, n, barrier, started, done, bad):
    pin(0 if role == "p" else 1)
    try:
        barrier.wait(60)
        started[0 if role == "p" else 1] = time.perf_counter()
        if role == "p":
            c.produce(a, n)
        else:
            bad.value = c.consume(a, n)
            done.value = time.perf_counter()
    except BaseException as e:  # reported by the exit status and this line
        print(f"{c.label}: {role} failed: {e!r}", file=sys.stderr, flush=True)
        os._exit(1)
    os._exit(0)


def run_once(c, a, n):
    """Samples per second of one run of n samples; raises RuntimeError on failure."""
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(2)
    started = ctx.Array("d", 2, lock=False)
    done = ctx.Value("d", 0.0, lock=False)
    bad = ctx.Value("q", -1, lock=False)
    c.setup(a, n)
    try:
        procs = [ctx.Process(target=_child, args=(r, c, a, n, barrier, started, done, bad))
                 for r in ("p", "c")]
        for p in procs:
            p.start()
        limit = time.monotonic() + 60 + 40 * a.target_s
        for p in procs:
            p.join(max(0.1, limit - time.monotonic()))
        if any(p.is_alive() for p in procs):
            for p in procs:
                if p.is_alive():
                    p.kill()
                    p.join()
            raise RuntimeError("timed out")
        codes = [p.exitcode for p in procs]
        if codes != [0, 0]:
            raise RuntimeError(f"exit codes {codes} (producer, consumer)")
        if bad.value != 0:
            raise RuntimeError(f"INVALID: {bad.value} bad samples")
        return n / (done.value - min(started[0], started[1]))
    finally:
        c.teardown()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--target-s", type=float, default=0.5)
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--slots", type=int, default=1024)
    ap.add_argument("--cistern-path", default="",
                    help="directories to put first on sys.path to import cistern "
                         "(os.pathsep-separated: <builddir>/python and <srcdir>/python)")
    a = ap.parse_args()
    if a.size % 8 or a.size < 16:
        ap.error("--size must be a multiple of 8, at least 16")

    try:
        import numpy  # noqa: F401
    except ImportError as e:
        for c in (CisternBatch, CisternOne, CisternBytes, QueueOne, QueueBatch, RingOne, RingBatch):
            print(f"ROW\t{c.name.format(batch=a.batch)}\tn/a: {e}")
        return
    why_not = None
    sys.path[:0] = [p for p in a.cistern_path.split(os.pathsep) if p]
    try:
        import cistern
        CisternBase.cistern = cistern
    except ImportError as e:
        why_not = f"n/a: cistern not importable ({e})"

    contenders = [CisternBatch(), CisternOne(), CisternBytes(), QueueOne(), QueueBatch(),
                  RingOne(), RingBatch()]
    for c in contenders:
        c.label = c.name.format(batch=a.batch)
        if isinstance(c, CisternBase) and why_not:
            c.unavailable = why_not
    results = {c.label: [] for c in contenders}
    sizes = {}
    for c in contenders:  # calibration, also the warm-up
        if c.unavailable:
            continue
        try:
            # Grow the run until it lasts a good part of target_s, so that the
            # fixed costs of a run (the children's start) do not set its size.
            n = 2000
            while True:
                rate = run_once(c, a, n)
                if n / rate >= a.target_s / 3 or n >= 1 << 24:
                    break
                n = min(1 << 24, n * max(2, min(8, int(a.target_s / (n / rate)))))
            sizes[c.label] = max(a.batch, int(rate * a.target_s) // a.batch * a.batch)
        except RuntimeError as e:
            c.unavailable = f"ERR: {e}"
    for rep in range(a.reps):
        for c in contenders:
            if c.unavailable:
                continue
            try:
                v = run_once(c, a, sizes[c.label]) / 1e3
            except RuntimeError as e:
                c.unavailable = f"ERR: {e}"
                continue
            results[c.label].append(v)
            print(f"rep {rep + 1}/{a.reps} {c.label}: {v:.1f} k samples/s", file=sys.stderr,
                  flush=True)
    for c in contenders:
        vals = c.unavailable or ",".join("%.4f" % v for v in results[c.label])
        print(f"ROW\t{c.label}\t{vals}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
