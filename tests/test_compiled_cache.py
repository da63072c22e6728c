"""The compiled rule and report templates kept between runs (diagnose/compiled.py).

A run with the cache, a run that reads it, a run whose cache is damaged and a run with no
usable cache directory must all give the same diagnosis and report."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CASE = ROOT / "fixtures" / "diff" / "custom_ar_pcie_oom"


def _diff(tmp: Path, out: Path, **env: str) -> tuple[str, str]:
    """Run `diff --json -o` with TMPDIR at ``tmp``; its JSON and its report."""
    environ = {k: v for k, v in os.environ.items() if k != "LOGFORENSICS_NO_CACHE"} | {"TMPDIR": str(tmp), **env}
    proc = subprocess.run([sys.executable, "-m", "logforensics", "diff", str(CASE / "baseline.log"),
                           str(CASE / "failing.log"), "--json", str(out / "d.json"), "-o", str(out / "r.html")],
                          capture_output=True, text=True, env=environ, timeout=300)
    assert proc.returncode == 1, proc.stderr  # the case's error finding
    assert "Traceback" not in proc.stderr, proc.stderr
    return (out / "d.json").read_text(), (out / "r.html").read_text()


def _cache_dir(tmp: Path) -> Path:
    return tmp / f"_jinja2-cache-{os.getuid()}"


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="the cache directory is per user id")
def test_cache_written_read_and_damaged_give_the_same_diagnosis(tmp_path: Path) -> None:
    tmp, out = tmp_path / "tmp", tmp_path / "out"
    tmp.mkdir(), out.mkdir()
    first = _diff(tmp, out)
    cache = _cache_dir(tmp)
    entries = sorted(cache.iterdir())
    assert entries, "the compiled templates were not kept"
    assert cache.stat().st_mode & 0o777 == 0o700, "the cache must be the user's own"
    assert _diff(tmp, out) == first
    for entry in entries:  # damaged: truncated or replaced by junk
        entry.write_bytes(entry.read_bytes()[:7] if entry.stat().st_size % 2 else b"\x80junk")
    assert _diff(tmp, out) == first


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="the cache directory is per user id")
def test_no_cache_when_turned_off_or_unsafe(tmp_path: Path) -> None:
    tmp, out = tmp_path / "tmp", tmp_path / "out"
    tmp.mkdir(), out.mkdir()
    reference = _diff(tmp, out, LOGFORENSICS_NO_CACHE="1")
    assert not _cache_dir(tmp).exists(), "LOGFORENSICS_NO_CACHE=1 must write no cache"
    _cache_dir(tmp).write_text("not a directory")  # a path that is not a safe directory
    assert _diff(tmp, out) == reference
    _cache_dir(tmp).unlink()
    _cache_dir(tmp).mkdir(mode=0o755)
    os.chmod(_cache_dir(tmp), 0o755)  # Jinja makes it 0700 again, or refuses it
    assert _diff(tmp, out) == reference


def test_expression_compiled_through_the_cache_equals_compile_expression(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """An expression is compiled as ``compile_expression`` compiles it, cached or not."""
    from logforensics.diagnose.bounds import BoundedSandbox
    from logforensics.diagnose.compiled import expression, template, use_cache

    env = BoundedSandbox(autoescape=False)
    use_cache(env, "test")
    values = {"a": {"b": [1, 2, 3]}, "s": "x%}y"}
    for text in ("a.b | length > 2", "a.b[1] * 3", "s ~ '%}' ~ '}}'", "{'k': {'v': 1}}.k.v", "missing is none"):
        assert expression(env, text)(**values) == env.compile_expression(text, undefined_to_none=False)(**values)
    assert template(env, "{{ a.b | join(',') }}").render(**values) == "1,2,3"
