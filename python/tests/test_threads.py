# SPDX-License-Identifier: MIT
import os
import signal
import threading
import time

import pytest

import cistern


def test_blocking_get_releases_the_gil(fifo):
    """Another Python thread keeps running while get() waits for data."""
    ticks = 0
    stop = threading.Event()

    def spin():
        nonlocal ticks
        while not stop.is_set():
            ticks += 1

    t = threading.Thread(target=spin)
    t.start()
    try:
        with pytest.raises(TimeoutError):
            fifo.get(timeout=0.3)
        before = ticks
        time.sleep(0.05)
        assert ticks > before
        assert ticks > 1000
    finally:
        stop.set()
        t.join()


def test_reader_thread_gets_what_main_thread_puts(fifo, segname):
    got = []

    def reader():
        with cistern.attach(segname) as seg:
            got.extend(seg)

    t = threading.Thread(target=reader)
    t.start()
    for i in range(50):
        fifo.put(str(i).encode())
    fifo.close_reception()
    t.join(10)
    assert got == [str(i).encode() for i in range(50)]


def test_one_handle_used_by_two_threads_raises(fifo):
    errors = []

    def waiter():
        try:
            fifo.get(timeout=1)
        except TimeoutError:
            pass

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.1)
    try:
        fifo.put(b"x", timeout=0)
    except RuntimeError as e:
        errors.append(e)
    t.join()
    assert errors and "thread" in str(errors[0])


def test_signal_interrupts_a_wait_forever(fifo):
    class Interrupted(Exception):
        pass

    def handler(signum, frame):
        raise Interrupted()

    old = signal.signal(signal.SIGALRM, handler)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        t0 = time.monotonic()
        with pytest.raises(Interrupted):
            fifo.get()  # no timeout
        assert time.monotonic() - t0 < 2.0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def test_forked_child_must_attach_again(fifo, segname):
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            try:
                fifo.put(b"from the inherited handle")
            except RuntimeError:
                with cistern.attach(segname) as seg:
                    seg.put(b"child")
                code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert fifo.get(timeout=5) == b"child"


def test_sample_freed_during_a_call_is_released_when_it_ends(fifo, segname):
    fifo.put(b"a")
    s = fifo.acquire()
    got = []
    t = threading.Thread(target=lambda: got.append(fifo.get(timeout=5)))
    t.start()
    time.sleep(0.1)  # the thread now waits inside get(), the handle busy
    del s  # freed meanwhile: its release is queued for the end of that call
    with cistern.attach(segname) as other:
        other.put(b"b")
    t.join()
    assert got == [b"b"]
    fifo.detach()  # a sample still held here would now be handed out again
    with cistern.attach(segname) as other:
        other.close_reception()
        assert list(other) == []
        assert other.stats()["redeliveries"] == 0
