# SPDX-License-Identifier: MIT
"""Shared fixtures. Run from a build dir with
    PYTHONPATH=<builddir>/python:<srcdir>/python /usr/bin/python3 -m pytest python/tests
"""
import itertools
import os
import re

import pytest

import cistern

_seq = itertools.count()


@pytest.fixture
def segname(request):
    """A segment name unique to this test and process; unlinked afterwards."""
    test = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name)[:30].strip("-")
    name = f"pyt-{os.getpid()}-{next(_seq)}-{test}"
    yield name
    cistern.unlink(name, missing_ok=True)


@pytest.fixture
def fifo(segname):
    """A small FIFO segment: 16 slots of 1 KiB."""
    seg = cistern.create(segname, policy="fifo", slots=16, slot_size=1024)
    yield seg
    seg.detach()


@pytest.fixture(scope="session")
def cistern_cli():
    """The cistern command of this build: $CISTERN_CLI, else <builddir>/tools/cistern
    beside the extension module's <builddir>/python."""
    cli = os.environ.get("CISTERN_CLI")
    if not cli:
        ext = os.path.dirname(os.path.abspath(cistern._cistern.__file__))
        cli = os.path.join(os.path.dirname(ext), "tools", "cistern")
    if not (os.path.isfile(cli) and os.access(cli, os.X_OK)):
        pytest.fail(f"no cistern command at {cli}: build the tree, or set CISTERN_CLI")
    return cli


@pytest.fixture(scope="session")
def c_producer():
    """The producer written in C (python/tests/c_producer.c): $CISTERN_C_PRODUCER,
    else the one python/meson.build builds beside the extension module. The
    test is skipped when it was not built."""
    p = os.environ.get("CISTERN_C_PRODUCER")
    if not p:
        p = os.path.join(os.path.dirname(cistern._cistern.__file__), "c_producer")
    if not os.access(p, os.X_OK):
        pytest.skip(f"C producer not built ({p}); build with -Dpython=enabled")
    return p
