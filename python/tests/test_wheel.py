# SPDX-License-Identifier: MIT
"""The package installs like any Python package: a wheel built from the source
tree (python3 -m build --wheel --no-isolation, through meson-python) installs
into a fresh venv and works there with nothing of the source or build tree:
a producer and a learner run from it as two processes, and the venv has the
`cistern` command.

One test, and a slow one: it builds the whole project once."""
import glob
import json
import os
import shutil
import subprocess
import sys

import pytest

import cistern

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _run(args, **kw):
    r = subprocess.run(args, capture_output=True, text=True, **kw)
    assert r.returncode == 0, f"{args}:\n{r.stdout}\n{r.stderr}"
    return r.stdout


def test_wheel_installs_into_a_venv_and_runs_a_producer_a_learner_and_the_command(tmp_path):
    pytest.importorskip("build")
    pytest.importorskip("mesonpy")
    dist, venv, work = tmp_path / "dist", tmp_path / "venv", tmp_path / "work"
    # At most two compile jobs: the build shares the machine with the tests.
    _run([sys.executable, "-m", "build", "--wheel", "--no-isolation",
          "--config-setting=compile-args=-j2", "--outdir", str(dist), ROOT],
         timeout=1500)
    (wheel,) = glob.glob(str(dist / "cistern-*.whl"))
    _run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], timeout=300)
    py, cli = str(venv / "bin" / "python"), str(venv / "bin" / "cistern")
    _run([py, "-m", "pip", "install", "--no-index", "--no-deps", "--quiet", wheel], timeout=300)

    # Outside the source tree, with nothing pointing into it or the build tree.
    work.mkdir()
    for f in ("producer.py", "learner.py"):
        shutil.copy(os.path.join(ROOT, "examples", "python", f), work)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "LD_LIBRARY_PATH", "CISTERN_C_PRODUCER", "PYTHONHOME")}
    env["PATH"] = str(venv / "bin") + os.pathsep + env.get("PATH", "")
    kw = dict(cwd=work, env=env, timeout=300)

    where = json.loads(_run([py, "-c", "import json, cistern, cistern.pipeline, "
                             "cistern._cistern as c; "
                             "print(json.dumps([cistern.__file__, c.__file__]))"], **kw))
    for path in where:
        assert path.startswith(str(venv)), where
    assert shutil.which("cistern", path=env["PATH"]) == cli

    name = f"pyt-wheel-{os.getpid()}"
    try:
        learner = subprocess.Popen([py, "learner.py", name, "--producers", "1"], cwd=work,
                                   env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True)
        try:
            produced = _run([py, "producer.py", name, "--sim-id", "4", "--steps", "300"], **kw)
            out, err = learner.communicate(timeout=300)
        finally:
            if learner.poll() is None:
                learner.kill()
                learner.wait()
        assert "producer 4: wrote 300 samples" in produced
        assert learner.returncode == 0, out + err
        assert "learner: read 300 samples from 1 producers" in out

        _run([cli, "create", name, "--slots", "8", "--slot-size", "64"], **kw)
        assert name in _run([cli, "ls"], **kw)
        assert json.loads(_run([cli, "inspect", "--json", name], **kw))["name"] == name
        _run([cli, "rm", name], **kw)
        assert name not in _run([cli, "ls"], **kw)
    finally:
        cistern.unlink(name, missing_ok=True)
