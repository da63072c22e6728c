"""What is kept between runs (cachedir.py): Lark's analysed grammar and the compiled rule and
report templates (diagnose/compiled.py).

A run with the cache, a run that reads it, a run whose cache is damaged and a run with no
usable cache directory must all give the same diagnosis and report; a cache file that
someone else could have written is never loaded."""

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
    return tmp / f"logforensics-cache-{os.getuid()}"


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="the cache directory is per user id")
def test_cache_written_read_and_damaged_give_the_same_diagnosis(tmp_path: Path) -> None:
    tmp, out = tmp_path / "tmp", tmp_path / "out"
    tmp.mkdir(), out.mkdir()
    first = _diff(tmp, out)
    cache = _cache_dir(tmp)
    entries = sorted(cache.iterdir())
    assert any(e.name.startswith("__jinja2_") for e in entries), "the compiled templates were not kept"
    assert any(e.name.startswith("lark-record-") for e in entries), "the analysed grammar was not kept"
    # named by the grammar's digest: another version of the grammar keeps a file of its own
    import hashlib
    digest = hashlib.sha256((ROOT / "grammars" / "sglang.lark").read_bytes()).hexdigest()[:16]
    assert {e.name for e in entries if e.name.startswith("lark-")} == {
        f"lark-{start}-py{sys.version_info[0]}{sys.version_info[1]}-{digest}.pickle" for start in ("record", "fallback")}
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
    os.chmod(_cache_dir(tmp), 0o755)  # others may read it: refused, nothing written into it
    assert _diff(tmp, out) == reference
    assert not list(_cache_dir(tmp).iterdir())


class _Planted:
    """A pickle that, when loaded, writes a marker file: what an attacker would plant."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str, ...]]:
        return (os.system, (f"touch {self.marker}",))


def _plant(path: Path, marker: Path) -> None:
    """Replace a Lark cache file with a malicious one of the same first line (Lark loads the
    pickle after that line before it checks anything)."""
    import pickle

    first = path.read_bytes().split(b"\n", 1)[0]
    path.write_bytes(first + b"\n" + pickle.dumps(_Planted(marker)))


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="the cache directory is per user id")
def test_a_planted_grammar_cache_is_never_loaded(tmp_path: Path) -> None:
    """Lark's own cache file is at a predictable name in the shared temporary directory, and
    Lark unpickles it: another user could create it first. It is never read; nor is a
    grammar cache in a directory that others can write into."""
    tmp, out = tmp_path / "tmp", tmp_path / "out"
    tmp.mkdir(), out.mkdir()
    marker = tmp_path / "executed"
    environ = os.environ | {"TMPDIR": str(tmp)}
    build = ("import logforensics\n"  # its data packages, from a source tree too
             "from lark import Lark\n"
             "for start in ('record', 'fallback'):\n"
             "    Lark.open_from_package('logforensics.grammars', 'sglang.lark', ('',), start=start, parser='lalr',"
             " lexer='contextual', propagate_positions=False, maybe_placeholders=False, cache=True)\n")
    subprocess.run([sys.executable, "-c", build], check=True, env=environ, timeout=300)
    planted = sorted(tmp.glob(".lark_cache_*"))
    assert len(planted) == 2, "Lark's default cache files were not where the test expects them"
    for path in planted:
        _plant(path, marker)
    reference = _diff(tmp, out)
    assert not marker.exists(), "a cache file in the shared temporary directory was unpickled"
    for path in sorted(_cache_dir(tmp).glob("lark-*")):  # the private cache, opened to others
        _plant(path, marker)
    os.chmod(_cache_dir(tmp), 0o777)
    assert _diff(tmp, out) == reference
    assert not marker.exists(), "a grammar cache others could write was unpickled"


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
