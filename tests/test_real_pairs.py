"""`diff` on real baseline/failing pairs: the verdict must say what the two files show.

Each row of ``fixtures/real-pairs/PAIRS.tsv`` is two logs of one setup from one author (a working
run and a failing one), labelled from the files' text alone: both outcomes, phrases a correct
verdict contains and phrases it must not contain. A row the verdict does not meet yet is a strict
xfail that names what the verdict gets wrong, so fixing the general cause turns it into a pass.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from logforensics.pipeline import diagnose_files

PAIRS = Path(__file__).resolve().parent.parent / "fixtures" / "real-pairs"

#: Pairs whose verdict says less than the files show, by pair, with what it gets wrong
#: (a strict xfail: fixing the general cause turns it into a pass).
WRONG_VERDICT: dict[str, str] = {}


def _rows() -> list[dict[str, str]]:
    with (PAIRS / "PAIRS.tsv").open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def _phrases(cell: str) -> list[str]:
    return [p.strip() for p in cell.split(";") if p.strip()]


def _params() -> list:
    return [pytest.param(row, id=row["pair"],
                         marks=[pytest.mark.xfail(strict=True, reason=WRONG_VERDICT[row["pair"]])]
                         if row["pair"] in WRONG_VERDICT else [])
            for row in _rows()]


def test_every_row_has_its_two_logs_and_labels() -> None:
    rows = _rows()
    assert len(rows) >= 5
    assert {r["pair"] for r in rows} == {d.name for d in PAIRS.iterdir() if d.is_dir()}
    assert set(WRONG_VERDICT) <= {r["pair"] for r in rows}
    for row in rows:
        assert (PAIRS / row["pair"] / "baseline.log").is_file()
        assert (PAIRS / row["pair"] / "failing.log").is_file()
        assert row["source"].startswith("https://github.com/")
        assert row["baseline_outcome"] in {"ready", "crashed", "hung", "incomplete"}
        assert row["failing_outcome"] in {"ready", "crashed", "hung", "incomplete"}
        assert _phrases(row["must_say"])


@pytest.mark.parametrize("row", _params())
def test_verdict_matches_the_labels(row: dict[str, str]) -> None:
    case = PAIRS / row["pair"]
    d = diagnose_files(str(case / "failing.log"), str(case / "baseline.log"))
    assert d.baseline is not None
    assert (d.baseline.outcome, d.failing.outcome) == (row["baseline_outcome"], row["failing_outcome"])
    missing = [p for p in _phrases(row["must_say"]) if p not in d.verdict]
    wrong = [p for p in _phrases(row["must_not_say"]) if p in d.verdict]
    assert not missing and not wrong, f"verdict: {d.verdict!r}; missing {missing}; must not say {wrong}"
