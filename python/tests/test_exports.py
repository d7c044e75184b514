# SPDX-License-Identifier: MIT
"""The package's layout: `import cistern; cistern.X` reaches every public name
of every part (cistern.segment, cistern.records, ...), the names the docs and
examples use resolve, and the public classes and functions keep `cistern` as
their module, so that repr(), help() and pickle name them as before."""
import glob
import importlib
import os
import pickle
import re

import pytest

import cistern

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PARTS = ["errors", "constants", "records", "schema", "samples", "segment", "admin", "remote"]


def test_every_name_in_all_resolves():
    missing = [n for n in cistern.__all__ if not hasattr(cistern, n)]
    assert missing == []
    assert len(set(cistern.__all__)) == len(cistern.__all__)


@pytest.mark.parametrize("part", PARTS)
def test_every_public_name_of_a_part_is_the_same_object_in_cistern(part):
    mod = importlib.import_module("cistern." + part)
    assert mod.__all__, part
    for name in mod.__all__:
        assert name in cistern.__all__, f"cistern.{part}.{name} is not in cistern.__all__"
        assert getattr(cistern, name) is getattr(mod, name), name


def test_every_name_in_all_comes_from_one_part():
    owners = {}
    for part in PARTS:
        for name in importlib.import_module("cistern." + part).__all__:
            owners.setdefault(name, []).append(part)
    # Fields is a type alias of the signatures, from the shared module.
    assert sorted(set(cistern.__all__) - {"Fields"}) == sorted(owners)
    assert all(len(v) == 1 for v in owners.values()), owners


def _documented_names():
    """The names after `cistern.` in the Python of the docs and examples."""
    texts = []
    for md in glob.glob(os.path.join(SRC, "*.md")) + glob.glob(os.path.join(SRC, "docs", "*.md")) \
            + glob.glob(os.path.join(SRC, "python", "*.md")):
        with open(md) as f:
            texts += re.findall(r"```python\n(.*?)```", f.read(), re.S)
    for py in glob.glob(os.path.join(SRC, "examples", "python", "*.py")) + \
            glob.glob(os.path.join(SRC, "demo", "*.py")):
        with open(py) as f:
            texts.append(f.read())
    names = set()
    for text in texts:
        names |= set(re.findall(r"(?<![\w.])cistern\.([A-Za-z_]\w*)", text))
    return names


def test_the_names_the_docs_and_examples_use_resolve():
    names = _documented_names()
    assert {"create", "attach", "Segment"} <= names  # the scan finds them
    missing = sorted(n for n in names if not hasattr(cistern, n)
                     and importlib.util.find_spec("cistern." + n) is None)
    assert missing == []


def test_public_classes_and_functions_name_cistern_as_their_module():
    for name in cistern.__all__:
        obj = getattr(cistern, name)
        if isinstance(obj, type) or callable(obj):
            if obj is cistern.Fields:  # dict at run time
                continue
            assert obj.__module__ == "cistern", name


def test_records_meta_and_schemas_pickle_under_their_old_names(fifo):
    fifo.put(b"x")
    st = fifo.stats()
    assert b"cistern\nStats" in pickle.dumps(st, protocol=0)
    assert pickle.loads(pickle.dumps(st)) == st
    meta = cistern.Meta(1, 2, 3)
    assert pickle.loads(pickle.dumps(meta)) == meta
    schema = cistern.Schema.parse("obs:float32[2];action:int64[]")
    assert pickle.loads(pickle.dumps(schema)).text == schema.text


def test_end_of_data_keeps_its_name_and_is_caught_as_before(fifo):
    assert cistern.EndOfData.__module__ == "cistern"
    assert cistern.EndOfData.__name__ == "EndOfData"
    assert cistern.errors.EndOfData is cistern.EndOfData
    fifo.close_reception()
    with pytest.raises(cistern.EndOfData):
        fifo.get(timeout=0)
    e = pickle.loads(pickle.dumps(cistern.EndOfData("done")))
    assert type(e) is cistern.EndOfData and e.args == ("done",)


def test_meson_installs_every_module_and_stub_of_the_package():
    # A module left out of install_sources is missing from the wheel; the
    # source tree's imports would not show it.
    with open(os.path.join(SRC, "python", "meson.build")) as f:
        build = f.read()
    installed = set(re.findall(r"'cistern/([\w.]+)'", build))
    here = {os.path.basename(p) for p in glob.glob(os.path.join(SRC, "python", "cistern", "*"))
            if re.search(r"\.(py|pyi)$|^py\.typed$", os.path.basename(p))}
    assert "segment.py" in here
    assert here == installed
