"""The one number formatter every renderer (terminal, HTML, watch, diff) writes figures with."""

from __future__ import annotations

from logforensics.units import fmt, gib


def test_floats_lose_float_noise_but_keep_their_places() -> None:
    assert fmt(0.88) == "0.88"  # a server argument as SGLang printed it
    assert fmt(0.1 + 0.2) == "0.3"
    assert fmt(1700.0) == "1700"
    assert fmt(1523.456) == "1523.46"
    assert fmt(0.87654, 4) == "0.8765"
    assert fmt(12.0, 1) == "12"


def test_integers_text_and_unknowns() -> None:
    assert fmt(256) == "256" and fmt("fa3") == "fa3" and fmt(True) == "True"
    assert fmt(None) == "-" and fmt(None, missing="—") == "—"


def test_a_gib_column_goes_through_the_memory_formatter() -> None:
    for v in (21.7, 896 / 2**20, None):
        assert fmt(v, key="avail_gib") == gib(v, missing="-", unit=False)
