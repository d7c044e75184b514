# SPDX-License-Identifier: MIT
"""The package itself: its version, its defaults, len() of a segment, importing
it from the source tree, and python/README.md's examples."""
import os
import re
import subprocess
import sys

import pytest

import cistern

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_version_is_meson_builds_project_version():
    with open(os.path.join(SRC, "meson.build")) as f:
        project = re.search(r"project\(.*?version\s*:\s*'([^']+)'", f.read(), re.S)
    assert project is not None
    assert cistern.__version__ == project.group(1)
    assert cistern.__version__ == ".".join(map(str, cistern.VERSION))


def test_len_of_a_segment_is_its_population_and_an_empty_one_is_still_true(fifo):
    assert len(fifo) == 0 and fifo
    fifo.put(b"a")
    fifo.put(b"b")
    assert len(fifo) == 2


def test_create_with_slots_0_is_refused_naming_the_default(segname):
    with pytest.raises(ValueError, match="slots must be at least 1, not 0 .*the default, 1024"):
        cistern.create(segname, slots=0)
    assert cistern.config_problem(slots=None) is None


def test_create_left_to_its_defaults_has_1024_slots_of_4096_bytes(segname):
    with cistern.create(segname) as seg:
        cfg = seg.config()
        assert (cfg.slots, cfg.slot_size) == (cistern.DEFAULT_SLOT_COUNT,
                                              cistern.DEFAULT_SLOT_SIZE) == (1024, 4096)


def test_importing_from_the_source_trees_python_dir_says_it_shadows_the_package():
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, "-c", "import cistern"], cwd=os.path.join(SRC, "python"),
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "shadows the installed package" in r.stderr
    assert "circular import" not in r.stderr


def readme_block(heading):
    """The first ```python block after `heading` in python/README.md."""
    with open(os.path.join(SRC, "python", "README.md")) as f:
        text = f.read()
    at = text.index(heading)
    m = re.search(r"```python\n(.*?)```", text[at:], re.S)
    assert m is not None
    return m.group(1)


def test_the_readmes_use_example_runs_to_its_end(segname):
    code = readme_block("## Use").replace('"demo"', repr(segname))
    r = subprocess.run([sys.executable, "-c", code + "\nprint('done')\n"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("done")

