"""What a command imports: a summary or a parse loads neither the rules engine nor the
renderers' libraries, which only a diagnosis or a report needs (their import is most of a
short command's start-up)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REAL = Path(__file__).resolve().parent.parent / "fixtures" / "real"
LOG = REAL / "041-mi355x-tp8-hip-oom-during-model-init-transformers-fallback.log"

#: Run the command line in this interpreter, then write the names of the modules it loaded.
_PROBE = """
import json, sys
from logforensics.cli import main
out, args = sys.argv[1], sys.argv[2:]
try:
    main.main(args, prog_name="logforensics", standalone_mode=False)
finally:
    with open(out, "w") as fh:
        json.dump(sorted(sys.modules), fh)
"""

#: Modules that only a diagnosis (``diff``, ``check``, ``bundle``), a terminal or HTML
#: report, a table format or a parallel read of a large file needs.
HEAVY = ("jinja2", "yaml", "rich", "logforensics.diagnose", "logforensics.render.html", "logforensics.render.diff",
         "plotly", "pandas", "pyarrow", "duckdb", "multiprocessing", "concurrent.futures")


def loaded(tmp_path: Path, *args: str) -> set[str]:
    where = tmp_path / "modules.json"
    done = subprocess.run([sys.executable, "-c", _PROBE, str(where), *args], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout, "the command printed nothing"
    return set(json.loads(where.read_text()))


def heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


@pytest.mark.parametrize("args", [("summary", "--json"), ("parse", "--format", "jsonl")])
def test_summary_and_parse_load_no_heavy_module(tmp_path: Path, args: tuple[str, ...]) -> None:
    modules = loaded(tmp_path, *args, str(LOG))
    assert heavy(modules) == []
    assert "logforensics.model.run" in modules  # the probe saw the command's own imports


def test_help_loads_neither_grammar_nor_run_model(tmp_path: Path) -> None:
    modules = loaded(tmp_path, "--help")
    assert not {"lark", "logforensics.pipeline", "logforensics.model.run"} & modules
    assert heavy(modules) == []


def test_diff_loads_the_rules_engine(tmp_path: Path) -> None:
    """The check above can fail: the same probe sees the engine where a command uses it."""
    modules = loaded(tmp_path, "diff", str(LOG), str(LOG), "--json", "-", "--fail-on", "never")
    assert {"jinja2", "logforensics.diagnose.engine"} <= set(heavy(modules))
