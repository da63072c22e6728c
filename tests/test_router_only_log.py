"""A log that holds the router's lines alone is not a server that failed to get ready.

sgl-router (``sglang_router_rs``, later ``smg``) logs through ``tracing`` with the module, the
source file and line: ``2026-02-26 13:55:38  INFO smg::server: src/server.rs:985: Router ready |
workers: []`` once it serves. Such a log has no SGLang server record: saying it stops "without
readiness" says more than it shows, and the router's own readiness is cited.
"""

from __future__ import annotations

from pathlib import Path

from logforensics.pipeline import diagnose_runs, summarize_run

ROUTER = """2026-02-26 13:55:38  INFO smg::server: /s/src/server.rs:794: Starting router on 0.0.0.0:8000 | mode: Regular { worker_urls: [] }
2026-02-26 13:55:38  INFO smg::server: /s/src/server.rs:833: Initializing workers for routing mode: Regular { worker_urls: [] }
2026-02-26 13:55:38  INFO smg::server: /s/src/server.rs:985: Router ready | workers: []
2026-02-26 13:55:38  INFO smg::server: /s/src/server.rs:1018: Starting server on 0.0.0.0:8000
"""


def test_a_router_log_is_read_as_the_router_s_and_cites_its_readiness(tmp_path: Path) -> None:
    log = tmp_path / "router.log"
    log.write_text(ROUTER)
    s = summarize_run(str(log))
    assert s.outcome == "incomplete"
    assert "without readiness" not in s.outcome_reason
    assert "router's log" in s.outcome_reason and "readiness at line 3" in s.outcome_reason


def test_what_to_collect_is_the_servers_logs(tmp_path: Path) -> None:
    log = tmp_path / "router.log"
    log.write_text(ROUTER)
    d = diagnose_runs(str(log), None)
    assert d.conclusion is not None
    text = " ".join(d.conclusion.collect)
    assert "servers behind the router" in text and "without readiness" not in text
