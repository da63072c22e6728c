"""``diff`` names the declared defaults that changed between two runs' SGLang versions.

Real logs (``fixtures/diff/custom_ar_pcie_oom``) with a ``pip freeze`` beside each that gives
its SGLang version; the defaults come from ``model/serverargs_defaults.tsv`` (0.4.6 and 0.5.10
are in it). A default the failing run left alone is a suspect in the facts, the verdict, the
conclusion, the JSON and the terminal; one set on its command line is not; a version the
table lacks is said to be "not in the table", never matched to a neighbour.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CASE = ROOT / "fixtures" / "diff" / "custom_ar_pcie_oom"


def _pip(version: str) -> str:
    return f"flashinfer-python==0.2.5\nsglang=={version}\ntorch==2.6.0\ntransformers==4.51.1\n"


def _runs(tmp: Path, base_version: str, fail_version: str, *, base_settings: bool = True,
          fail_flags: str = "") -> tuple[Path, Path]:
    good, bad = tmp / "good", tmp / "bad"
    for run, log, version in ((good, "baseline.log", base_version), (bad, "failing.log", fail_version)):
        run.mkdir()
        lines = (CASE / log).read_text().splitlines(keepends=True)
        if run is good and not base_settings:  # a baseline whose log lacks its server_args dump
            lines = [x for x in lines if "server_args=" not in x]
        if run is bad and fail_flags:
            lines[0] = lines[0].replace(" --tp 8 ", f" --tp 8 {fail_flags} ")
        (run / "server.log").write_text("".join(lines))
        (run / "pip.txt").write_text(_pip(version))
    return good, bad


def _diff(good: Path, bad: Path, tmp: Path) -> tuple[dict[str, Any], str]:
    out = tmp / "d.json"
    done = subprocess.run([sys.executable, "-m", "logforensics", "diff", str(good), str(bad), "--json", str(out)],
                          capture_output=True, text=True, env={**os.environ, "COLUMNS": "400"})
    assert done.returncode in (0, 1), done.stderr
    return json.loads(out.read_text()), done.stdout + done.stderr


def _check(doc: dict[str, Any]) -> dict[str, str]:
    return next(c for c in doc["conclusion"]["ruled_out"] if c["what"] == "version defaults")


def test_defaults_the_failing_run_took_are_suspects_everywhere(tmp_path: Path) -> None:
    good, bad = _runs(tmp_path, "0.4.6", "0.5.10", base_settings=False, fail_flags="--log-requests-level 2")
    doc, terminal = _diff(good, bad, tmp_path)
    v = doc["facts"]["versions"]
    assert v["status"] == "compared" and (v["baseline"], v["failing"]) == ("0.4.6", "0.5.10")
    changed = {c["field"]: c for c in v["changed"]}
    assert changed["page_size"]["baseline"] == "1" and changed["page_size"]["failing"] == "None"
    assert changed["page_size"]["cleared"] is None
    assert changed["log_requests_level"]["cleared"] == "set on the failing run's command line"
    assert {e["file"] for e in v["evidence"]} == {str(good / "pip.txt"), str(bad / "pip.txt")}
    suspects = sorted(k for k, c in changed.items() if c["cleared"] is None)
    assert len(suspects) == len(changed) - 1
    assert f"SGLang's declared defaults changed (0.4.6 -> 0.5.10) for {len(suspects)} setting(s)" in doc["verdict"]
    assert "page_size 1 -> None" in doc["verdict"] or len(suspects) > 4
    check = _check(doc)
    assert check["status"] == "differs"
    assert f"{len(changed)} declared default(s) changed; {len(suspects)} the failing run took: " in check["detail"]
    assert "page_size 1 -> None" in check["detail"] and "log_requests_level" not in check["detail"].split("; 1 set")[0]
    assert "checked version defaults: differs (SGLang 0.4.6 -> 0.5.10" in " ".join(terminal.split())


def test_defaults_both_logs_show_alike_are_cleared(tmp_path: Path) -> None:
    """Both logs print every changed field with the same value: none is a suspect, and the
    verdict does not name them."""
    good, bad = _runs(tmp_path, "v0.4.6", "0.5.10")
    doc, _ = _diff(good, bad, tmp_path)
    v = doc["facts"]["versions"]
    assert v["changed"] and all(c["cleared"] == "the same value in both logs' server_args" for c in v["changed"])
    assert "declared defaults" not in doc["verdict"]
    assert "the failing run took none of them" in _check(doc)["detail"]


def test_a_version_the_table_lacks_is_not_in_the_table(tmp_path: Path) -> None:
    good, bad = _runs(tmp_path, "0.4.6", "0.0.0.dev1+ge55646ff8", base_settings=False)
    doc, terminal = _diff(good, bad, tmp_path)
    v = doc["facts"]["versions"]
    assert v["status"] == "not in the table" and v["missing"] == ["0.0.0.dev1+ge55646ff8"] and v["changed"] == []
    assert v["failing_commit"] == "e55646ff8" and v["baseline_commit"] is None
    check = _check(doc)
    assert check["status"] == "not comparable"
    assert "0.0.0.dev1+ge55646ff8 not in the table of declared defaults (it has 0.4.6, 0.5.10)" in check["detail"]
    assert "declared defaults changed" not in doc["verdict"]
    assert "checked version defaults: not comparable" in terminal


def test_the_same_version_or_none_adds_no_check(tmp_path: Path) -> None:
    good, bad = _runs(tmp_path, "0.5.10", "v0.5.10")
    doc, _ = _diff(good, bad, tmp_path)
    assert doc["facts"]["versions"]["status"] == "same"
    assert all(c["what"] != "version defaults" for c in doc["conclusion"]["ruled_out"])
