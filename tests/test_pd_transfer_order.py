"""KV-transfer failures: the role of a file that holds both servers' records, and whether the
logs order the two sides.

The records are SGLang's own (disaggregation/decode.py and prefill.py):
``f"Decode transfer failed for request rank={self.tp_rank} {decode_req.req.rid=}
{decode_req.req.bootstrap_room=} with exception {e}"`` and ``f"Prefill transfer failed for
request rank={self.tp_rank} {req.rid=} {req.bootstrap_room=} with exception {e}"``, where ``e``
is a ``KVTransferError(bootstrap_room=R): message``.
"""

from __future__ import annotations

from pathlib import Path

from logforensics.pipeline import diagnose_runs, summarize_run

DECODE = ("[2026-02-27 15:01:51 TP{r}] Decode transfer failed for request rank={r} decode_req.req.rid='63b1b22d' "
          "decode_req.req.bootstrap_room=659 with exception KVTransferError(bootstrap_room=659): "
          "Failed to get kvcache from prefill instance, it might be dead\n")
PREFILL = ("[2026-02-27 15:01:51 TP{r}] Prefill transfer failed for request rank={r} req.rid='ca271fb6' "
           "req.bootstrap_room=659 with exception KVTransferError(bootstrap_room=659): "
           "Decode instance could be dead, remote mooncake session 10.0.0.1:15295 is not alive\n")
ABORTED = ("[2025-11-05 16:39:09 TP0] Decode transfer failed for request rank=0 decode_req.req.rid='78fde411' "
           "decode_req.req.bootstrap_room=479 with exception KVTransferError(bootstrap_room=479): Aborted by AbortReq.\n")


def _pd01(tmp_path: Path, text: str) -> str:
    log = tmp_path / "pd.log"
    log.write_text(text)
    d = diagnose_runs(str(log), None)
    return next(f for f in d.findings if f.rule == "PD01").title


def test_a_file_with_both_servers_records_has_no_single_role(tmp_path: Path) -> None:
    log = tmp_path / "paste.log"
    log.write_text(DECODE.format(r=3) + DECODE.format(r=5) + "\n" + PREFILL.format(r=4))
    s = summarize_run(str(log))
    assert [n.role for n in s.nodes.values()] == ["prefill+decode"]


def test_both_sides_in_the_same_second_are_not_ordered(tmp_path: Path) -> None:
    title = _pd01(tmp_path, DECODE.format(r=3) + PREFILL.format(r=4))
    assert "failed first" not in title and "both sides logged it" in title


def test_one_side_alone_is_not_first(tmp_path: Path) -> None:
    title = _pd01(tmp_path, ABORTED)
    assert "failed first" not in title and "the decode side logged it" in title


def test_a_finding_names_each_line_once(tmp_path: Path) -> None:
    """PD01's evidence is the first failure and the joined room's failures: the first is one of
    them, and is cited once."""
    log = tmp_path / "pd.log"
    log.write_text(DECODE.format(r=3) + PREFILL.format(r=4))
    d = diagnose_runs(str(log), None)
    f = next(f for f in d.findings if f.rule == "PD01")
    lines = [(e["file"], e["line"]) for e in f.evidence]
    assert len(lines) == len(set(lines)) and len(lines) == 2


def test_an_aborted_request_is_not_counted_as_a_lost_transfer(tmp_path: Path) -> None:
    """'Aborted by AbortReq.' is the request's abort (the client's, or the other side's notice):
    its transfer ends with it, which is not a transfer that was lost."""
    assert _pd01(tmp_path, ABORTED).startswith("1 request was aborted during its KV transfer: ")
    lost = DECODE.format(r=0).replace("15:01:51", "16:39:01")
    assert _pd01(tmp_path, lost + ABORTED).startswith("1 request lost its KV transfer and 1 other was aborted: ")


def test_a_failure_only_one_side_logged_is_not_said_to_lack_the_other_sides_records() -> None:
    """real-unseen 357: the decode service's records are in the log, but none of them is of the
    failed request: the title says no record of it from the other side is there."""
    unseen = Path(__file__).resolve().parent.parent / "fixtures" / "real-unseen"
    d = diagnose_runs(str(next(unseen.glob("357-*.log"))), None)
    pd01 = [f for f in d.findings if f.rule == "PD01"]
    assert pd01 and "the prefill side logged it, and no record of it from the other side is in these logs" \
        in pd01[0].title
    assert "records are not in these logs" not in pd01[0].title


def test_earlier_aborts_of_other_requests_leave_the_order_untold(tmp_path: Path) -> None:
    """real-unseen 546: the prefill server's aborts (AbortReq) of some requests, then 14 s later
    the decode server's failure of another: an abort is the other side's consequence only where
    both name the request, so the logs do not say which side failed first."""
    aborts = ("[2026-02-27 16:08:03 TP0] Prefill bootstrap failed for request rank=0 req.rid='aa11' "
              "req.bootstrap_room=101 with exception KVTransferError(bootstrap_room=101): Aborted by AbortReq.\n")
    later = DECODE.format(r=0).replace("15:01:51", "16:08:17")
    title = _pd01(tmp_path, aborts + later)
    assert "failed first" not in title and "both sides logged it" in title
    # the same abort of the request the decode side failed is its notice: the decode failed first
    notice = aborts.replace("bootstrap_room=101", "bootstrap_room=659").replace("(bootstrap_room=101)",
                                                                                 "(bootstrap_room=659)")
    assert "the decode side failed first" in _pd01(tmp_path, notice + later)
