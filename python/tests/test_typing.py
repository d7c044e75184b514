# SPDX-License-Identifier: MIT
"""Typed and documented: mypy --strict passes on the package, its examples and
the demo; every public name has a docstring help() shows; the stub and the
extension agree (stubtest, and names both ways); the stub's dicts, the records
and the extension's dicts have the same fields."""
import ast
import inspect
import os
import subprocess
import sys

import pytest

import cistern
import cistern.pipeline
import cistern.torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
STUB = os.path.join(ROOT, "python", "cistern", "_cistern.pyi")
ext = cistern._cistern


def test_mypy_strict_passes_on_the_package_examples_and_demo(tmp_path):
    pytest.importorskip("mypy")
    # pyproject.toml's [tool.mypy] says what is checked, strictly.
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"),
         "--config-file", os.path.join(ROOT, "pyproject.toml")],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    for checked in ("python/cistern", "examples/python", "demo"):
        assert any(p.startswith(checked) for p in _mypy_files()), checked


def _mypy_files():
    import tomllib  # Python 3.11; the tests run under Debian 12's interpreter
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["tool"]["mypy"]["files"]


def _public(obj):
    return [n for n in dir(obj) if not n.startswith("_")]


def _undocumented(module):
    missing = []
    for name in getattr(module, "__all__", None) or _public(module):
        obj = getattr(module, name)
        if inspect.ismodule(obj) or not (inspect.isclass(obj) or callable(obj)):
            continue
        if getattr(obj, "__module__", module.__name__) not in (module.__name__, "cistern"):
            continue  # imported from elsewhere (numpy, torch)
        if not (inspect.getdoc(obj) or "").strip():
            missing.append(name)
        if inspect.isclass(obj):
            for attr, val in vars(obj).items():
                if attr.startswith("_") or not (callable(val) or isinstance(val, property)
                                                 or inspect.isdatadescriptor(val)):
                    continue
                if inspect.isclass(val) or attr in getattr(obj, "__dataclass_fields__", {}):
                    continue
                if not (inspect.getdoc(getattr(obj, attr)) or "").strip():
                    missing.append(f"{name}.{attr}")
    return missing


@pytest.mark.parametrize("module", [cistern, cistern.torch, cistern.pipeline, ext],
                         ids=lambda m: m.__name__)
def test_every_public_function_class_and_method_has_a_docstring(module):
    assert _undocumented(module) == []


def test_help_shows_the_docstrings_and_signatures():
    text = _help(cistern.Segment.reserve)
    assert "reserve(self, dtype" in text and "committed" in text
    text = _help(ext.Handle.reserve)
    assert "reserve(self, /, timeout_ms=-1)" in text and "cistern_reserve()" in text


def _help(obj):
    import pydoc
    return pydoc.render_doc(obj, renderer=pydoc.plaintext)


def _stub():
    tree = ast.parse(open(STUB).read())
    funcs = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    classes = {n.name: {m.name for m in n.body if isinstance(m, ast.FunctionDef)}
               for n in tree.body if isinstance(n, ast.ClassDef)}
    consts = {t.id for n in tree.body if isinstance(n, ast.AnnAssign)
              for t in [n.target] if isinstance(t, ast.Name)}
    return funcs, classes, consts


def test_the_stub_names_every_function_type_and_method_of_the_extension():
    funcs, classes, consts = _stub()
    for name in _public(ext):
        obj = getattr(ext, name)
        if inspect.isclass(obj):
            assert name in classes, f"class {name} missing from _cistern.pyi"
            if issubclass(obj, BaseException):
                continue
            for attr in _public(obj):
                assert attr in classes[name], f"{name}.{attr} missing from _cistern.pyi"
        elif callable(obj):
            assert name in funcs, f"function {name} missing from _cistern.pyi"
        else:
            assert name in consts, f"constant {name} missing from _cistern.pyi"
    for name in funcs:
        assert callable(getattr(ext, name, None)), f"_cistern.pyi names {name}, which is gone"
    for name in consts:
        assert hasattr(ext, name), f"_cistern.pyi names the constant {name}, which is gone"
    for name, members in classes.items():
        if name.endswith("Dict"):
            continue  # the TypedDicts of the dicts, checked below
        for attr in members:
            assert hasattr(getattr(ext, name), attr), f"_cistern.pyi names {name}.{attr}"


# The stub's own helper types, which the module does not have at run time.
STUB_ONLY = r"""
_cistern\.\w+Dict
_cistern\.(Buffer|MetaTuple|Progress|StrPath)
"""


def test_stubtest_finds_the_stub_and_the_extension_in_agreement(tmp_path):
    """mypy's stubtest compares every name, signature and default of the stub
    with the module as it runs (its __text_signature__s)."""
    pytest.importorskip("mypy.stubtest")
    import shutil
    shutil.copy(STUB, tmp_path / "_cistern.pyi")
    (tmp_path / "allowlist").write_text(STUB_ONLY)
    (tmp_path / "mypy.ini").write_text("[mypy]\n")
    env = dict(os.environ, MYPYPATH=str(tmp_path),
               PYTHONPATH=os.path.dirname(os.path.abspath(ext.__file__)))
    r = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "_cistern", "--mypy-config-file",
         str(tmp_path / "mypy.ini"), "--allowlist", str(tmp_path / "allowlist")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr


def _stub_dicts():
    """The keys of each TypedDict of the stub, by name."""
    tree = ast.parse(open(STUB).read())
    return {n.name: {m.target.id for m in n.body if isinstance(m, ast.AnnAssign)}
            for n in tree.body if isinstance(n, ast.ClassDef) and n.name.endswith("Dict")}


def test_the_stubs_dicts_have_the_keys_the_extension_returns(tmp_path, segname):
    dicts = _stub_dicts()
    name = segname
    h = ext.create(name, schema="obs:float32[2];action:int64[]")
    try:
        h.put(bytes(16))
        dump = ext.dump(name, str(tmp_path / "d"))
        pairs = [("ConfigDict", h.config()), ("StatsDict", h.stats()),
                 ("OccupancyDict", h.occupancy()), ("ProcDict", h.procs()[0]),
                 ("SchemaDict", h.schema()), ("FieldDict", h.schema()["fields"][0]),
                 ("GcReportDict", ext.gc(name, dry_run=True)), ("DumpInfoDict", dump),
                 ("ConfigDict", dump["config"]), ("StatsDict", dump["stats"])]
        pairs += [("SegmentInfoDict", d) for d in ext.list_segments() if d["name"] == name]
    finally:
        h.detach()
        ext.unlink(name)
    assert {p[0] for p in pairs} == set(dicts) - {"RemoteInfoDict", "PrioInfoDict"}
    for typed, d in pairs:
        assert set(d) == dicts[typed], typed


def test_the_stubs_prio_info_dict_has_the_keys_the_extension_returns(segname):
    h = ext.create(segname, policy=ext.policy_parse("prioritized"), watermark=1)
    try:
        assert set(h.prio_info()) == _stub_dicts()["PrioInfoDict"]
    finally:
        h.detach()
        ext.unlink(segname)


def test_the_remote_info_dict_of_the_stub_is_the_record_remote_info():
    # A connection needs a server: test_remote.py compares the record's
    # fields with the extension's keys.
    assert _stub_dicts()["RemoteInfoDict"] == set(cistern.RemoteInfo._names())


def test_every_record_has_the_fields_of_its_stub_dict():
    dicts = _stub_dicts()
    for record in (cistern.Config, cistern.Stats, cistern.Occupancy, cistern.ProcInfo,
                   cistern.SegmentInfo, cistern.GcReport, cistern.DumpInfo, cistern.Field,
                   cistern.RemoteInfo, cistern.PrioInfo):
        typed = {"ProcInfo": "ProcDict", "Field": "FieldDict"}.get(
            record.__name__, record.__name__ + "Dict")
        assert set(record._names()) == dicts[typed], record.__name__


def test_records_carry_every_field_the_extension_reports(fifo, tmp_path):
    fifo.put(b"x")
    h = fifo._h
    pairs = [(cistern.Config, h.config()), (cistern.Stats, h.stats()),
             (cistern.Occupancy, h.occupancy()), (cistern.ProcInfo, h.procs()[0]),
             (cistern.GcReport, ext.gc(fifo.name, dry_run=True)),
             (cistern.DumpInfo, ext.dump(fifo.name, str(tmp_path / "d")))]
    pairs += [(cistern.SegmentInfo, d) for d in ext.list_segments() if d["name"] == fifo.name]
    assert len(pairs) == 7
    for record, d in pairs:
        assert set(d) == set(record._names()), record.__name__


def test_records_read_as_attributes_and_as_mappings(fifo):
    fifo.put(b"x")
    st = fifo.stats()
    assert st.puts == st["puts"] == dict(st)["puts"] == 1
    with pytest.raises(KeyError):
        st["no such field"]
    with pytest.raises(AttributeError):
        st.puts = 2  # frozen
