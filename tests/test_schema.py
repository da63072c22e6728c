"""The event schema: every event and every plan fits it, and one name has one type.

The schema (``logforensics/events/declared.py``) is derived from the reader's declarations
by ``tools/event_schema.py``. Here every sample record of the grammar and every record of
every fixture log, read on the compiled path and on the pure one, is checked against it:
each field is one the schema declares for the event's kind, each value is exactly of the
declared type (a bool is no integer, a list of words no list of integers) and Arrow takes
it as that type; each parsed record's plan gives each field a converter of the declared
type. A batch of each kind's events holds every value in its typed columns, none in
``extra``.
"""

from __future__ import annotations

import importlib.util
import json
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from grammar_samples import CASES

from logforensics.events import Event
from logforensics.events.batch import to_batch
from logforensics.events.declared import KINDS
from logforensics.events.schema import PROVENANCE, RESERVED, arrow_schema, conflicts, fields_of
from logforensics.events.types import FLOAT, INT, NULL, STR, fits, list_of
from logforensics.pipeline import iter_events
from logforensics.read.declared import Conflict, declarations, derive, plan_fields, widen
from logforensics.read.grammar import plan_record
from logforensics.read.kinds import event_kinds
from logforensics.read.plan import Fields, build_event

ROOT = Path(__file__).resolve().parent.parent
LOGS = sorted((ROOT / "fixtures").rglob("*.log"))
SAMPLE_LINES = [c.text for c in CASES]


def _tool() -> Any:
    spec = importlib.util.spec_from_file_location("event_schema", ROOT / "tools" / "event_schema.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: Labels that a paste cut at its terminal's width made by fusing two of SGLang's labels
#: (fixtures/real-unseen/267: "token us" + "accept rate: 0.32", "#cached-to" + "running-req: 45"):
#: the reader keeps a label it does not know in ``extra``, as it keeps any field a newer SGLang adds.
CUT_LABELS = {("decode_batch", "token_usaccept_rate"), ("prefill_batch", "cached_tounning_req")}


def _misfits(ev: Event) -> list[str]:
    """What of ``ev`` the schema does not hold: fields it lacks, values of another type."""
    declared = fields_of(ev.kind)
    out = []
    for name, value in ev.fields.items():
        t = declared.get(name)
        if t is None and (ev.kind, name) in CUT_LABELS:
            continue
        if t is None:
            out.append(f"{ev.kind}.{name} is not in the schema ({value!r})")
        elif not fits(value, t):
            out.append(f"{ev.kind}.{name} = {value!r} is not {t!r}")
    return out


def _plan_misfits(ev: Event) -> list[str]:
    """The fields of a parsed record's plan whose converter declares another type."""
    if not isinstance(ev.fields, Fields):
        return []  # assembled (tracebacks): checked by value
    declared = fields_of(ev.kind)
    return [f"{ev.kind}.{name}: the plan's converter gives {t!r}, the schema says {declared.get(name)!r}"
            for name, t in plan_fields(ev.fields._plan)
            if (ev.kind, name) not in CUT_LABELS and (name not in declared or widen(declared[name], t) != declared[name])]


def _fixture_events(pure: bool, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Event]]:
    if pure:
        monkeypatch.setenv("LOGFORENSICS_PURE", "1")
    else:
        monkeypatch.delenv("LOGFORENSICS_PURE", raising=False)
    for path in LOGS:
        for ev in iter_events(path):
            yield path, ev


def test_the_schema_is_the_readers_declarations() -> None:
    """``events/declared.py`` is what ``tools/event_schema.py`` writes now (else: run it)."""
    assert set(_tool().sample_lines()) == set(SAMPLE_LINES)
    assert derive(SAMPLE_LINES) == KINDS, "the event schema is stale: run python tools/event_schema.py"
    assert set(KINDS) >= event_kinds()


def test_one_name_one_type() -> None:
    """And so the batches of any kinds share one schema (a file of all of a log's events)."""
    assert conflicts() == {}
    assert not RESERVED & {name for fields in KINDS.values() for name in fields}
    merged = pa.unify_schemas([arrow_schema(kind) for kind in KINDS])
    assert len(merged) == len({name for fields in KINDS.values() for name in fields} | RESERVED)


def test_a_name_of_two_types_is_found() -> None:
    """The check itself: the ``bs`` of a capture (the batch sizes) and of a progress bar (one size)."""
    table = {"capture_bs": {"bs": list_of(INT)}, "progress": {"bs": INT, "avail_gib": FLOAT}}
    assert conflicts(table) == {"bs": {list_of(INT), INT}}
    decode = "[2025-03-01 14:03:07 TP0] Decode batch. #running-req: {}, #token: 1234, #queue-req: 0"
    with pytest.raises(Conflict, match="'running_req'"):
        derive([decode.format(4), decode.format("four")])


def test_types_fit_exactly() -> None:
    assert fits(3, FLOAT) and not fits(1.5, INT) and not fits(True, INT) and not fits(1, STR)
    assert fits(None, INT) and not fits("x", NULL)
    assert fits([(1, "a")], list_of(("struct", (("line", INT), ("text", STR)))))
    assert not fits([1, "x"], list_of(INT)) and not fits({"zz": 1}, ("struct", (("level", STR),)))


def test_every_declaration_agrees_with_the_schema() -> None:
    """Every plan the declarations make (each rule's terminals and constants, the samples'
    plans, the handlers' tables): each field is declared for its kind, of the schema's type."""
    wrong = [(kind, name, t, where) for kind, name, t, where in declarations(SAMPLE_LINES)
             if name not in KINDS.get(kind, {}) or widen(KINDS[kind][name], t) != KINDS[kind][name]]
    assert not wrong, wrong[:10]


@pytest.mark.parametrize("text", SAMPLE_LINES, ids=range(len(SAMPLE_LINES)))
def test_sample_records_fit(text: str) -> None:
    ev = build_event(plan_record(text), text, 1, None)
    assert not _misfits(ev) + _plan_misfits(ev)
    assert to_batch(ev.kind, [ev]).column("extra")[0].as_py() is None  # Arrow takes every value as its type


@pytest.mark.parametrize("pure", [False, True], ids=["compiled", "pure"])
def test_fixture_logs_fit(pure: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every record of every fixture log fits the schema, and each kind's batch holds it all
    in typed columns: nothing in ``extra``."""
    assert len(LOGS) > 50
    wrong: dict[str, list[str]] = defaultdict(list)
    by_kind: dict[str, list[Event]] = defaultdict(list)
    for path, ev in _fixture_events(pure, monkeypatch):
        for problem in _misfits(ev) + _plan_misfits(ev):
            if len(wrong[problem]) < 3:
                wrong[problem].append(f"{path.relative_to(ROOT)}:{ev.line}")
        by_kind[ev.kind].append(ev)
    assert not wrong, dict(wrong)
    for kind, events in by_kind.items():
        batch = to_batch(kind, events)
        assert batch.schema == arrow_schema(kind) and batch.num_rows == len(events)
        cut = sum(1 for e in events if any((kind, n) in CUT_LABELS for n in e.fields))
        assert batch.column("extra").null_count == len(events) - cut, (kind, batch.column("extra").drop_null()[:3])


def test_a_batch_keeps_what_the_schema_lacks() -> None:
    """A field the schema lacks, or a value of another type, goes to ``extra`` (JSON), not away."""
    good = Event("progress", 3, None, None, {"bs": 64, "desc": "Capturing batches"}, "text", "a.log")
    odd = Event("progress", 4, "TP0", "14:03:07", {"bs": "auto", "shiny_new": 1.5}, "text2", "a.log", 6, "node1")
    batch = to_batch("progress", [good, odd])
    rows = batch.to_pylist()
    assert rows[0]["bs"] == 64 and rows[0]["extra"] is None and rows[0]["end_line"] == 3
    assert rows[1]["bs"] is None and json.loads(rows[1]["extra"]) == {"bs": "auto", "shiny_new": 1.5}
    assert [rows[1][name] for name, _ in PROVENANCE] == ["progress", "a.log", 4, 6, "TP0", "14:03:07", "node1"]
    assert batch.schema.field("bs").type == pa.int64()
    with pytest.raises(ValueError, match="'blank'"):
        to_batch("progress", [good, Event("blank", 5, None, None, {}, "", None)])
