"""Facts on small real-text logs: what each side covers decides what is compared."""

from __future__ import annotations

import dataclasses

import pytest

from logforensics.diagnose.engine import evaluate
from logforensics.diagnose.facts import compute
from logforensics.diagnose.rulespec import load_rules
from logforensics.diagnose.settings import allreduce_state, config_diff
from logforensics.diagnose.sides import pair_ranks
from logforensics.ingest.live import LiveRun
from logforensics.model.records import Notice

RULES = load_rules()


def run(text: str, name: str = "x.log"):
    live = LiveRun(name)
    live.feed(text.encode())
    live.close()
    return live.summary()


def test_rank_labels_of_one_gpu_pair_up() -> None:
    assert pair_ranks(["-"], ["TP0"]) == {"-": "TP0"}
    assert pair_ranks(["TP0", "TP1"], ["DP0 TP0 EP0", "DP0 TP1 EP1"]) == {"TP0": "DP0 TP0 EP0", "TP1": "DP0 TP1 EP1"}
    assert pair_ranks(["TP0", "TP1"], ["TP1"]) == {"TP1": "TP1"}
    # '-' beside a TP0 is another process, not that rank.
    assert pair_ranks(["-", "TP0"], ["TP0"]) == {"TP0": "TP0"}
    assert pair_ranks(["PP1 TP0"], ["PP0 TP0"]) == {}


def test_a_flag_missing_from_one_launch_command_is_a_default() -> None:
    base = run("python3 -m sglang.launch_server --model-path /m --tp 2 --mem-fraction-static 0.8\n", "b.log")
    fail = run("python3 -m sglang.launch_server --model-path /m --tp 2\n", "f.log")
    diff = config_diff(fail, base)
    assert list(diff.server_args) == ["mem_fraction_static"]
    assert diff.server_args["mem_fraction_static"].failing is None


def test_an_option_of_several_values_is_read_whole_and_a_shell_redirection_ends_it() -> None:
    """``--cuda-graph-bs 1 2 4 ... 256`` (argparse's nargs="+") is every size, not the first
    (real-unseen 675); ``2>&1 | tee`` after the last option is the shell's, not a value."""
    base = run("python3 -m sglang.launch_server --model-path /m --cuda-graph-bs 1 2 4 8 --tp 2 --port 30000 "
               "2>&1 | tee server.log\n", "b.log")
    fail = run("python3 -m sglang.launch_server --model-path /m --cuda-graph-bs 1 2 4 16 --tp 2 --port 30000\n",
               "f.log")
    assert base.launch_args["cuda_graph_bs"] == [1, 2, 4, 8]
    assert base.launch_args["port"] == 30000
    diff = config_diff(fail, base)
    assert list(diff.server_args) == ["cuda_graph_bs"]
    assert diff.server_args["cuda_graph_bs"].failing == [1, 2, 4, 16]


def test_a_log_without_settings_compares_none() -> None:
    base = run("[2025-06-01 10:00:00] server_args=ServerArgs(model_path='/m', tp_size=4, mem_fraction_static=0.88)\n")
    fail = run("[2025-06-02 10:00:00 TP0] Load weight begin. avail mem=78.50 GB\n")
    diff = config_diff(fail, base)
    assert not diff.changed and diff.not_compared == "the failing log shows neither a server_args dump nor a launch command"


def test_the_forcing_notice_is_a_setting() -> None:
    """SGLang's ``SGLANG_FORCE_CUSTOM_AR_PCIE=1: forcing ...`` notice forces custom allreduce on,
    with or without the launch command in the log."""
    text = "[2025-06-02 10:00:00 TP0] SGLANG_FORCE_CUSTOM_AR_PCIE=1: forcing custom allreduce on PCIe-only GPUs\n"
    state = allreduce_state(run(text))
    assert state.forced_by == {"SGLANG_FORCE_CUSTOM_AR_PCIE": "1"}
    assert [e.line for e in state.evidence] == [1]  # the notice itself is the evidence
    fail = run("[2025-06-02 10:00:00 TP0] Load weight begin. avail mem=78.50 GB\n", "f.log")
    notice = Notice(file="f.log", line=7, rank="TP0",
                    text="[2025-06-02 10:00:00 TP0] SGLANG_FORCE_CUSTOM_AR_PCIE=1: forcing custom allreduce on PCIe")
    fail = dataclasses.replace(fail, notices={**fail.notices, "env": [notice]})
    state = allreduce_state(fail)
    assert state.forced and state.forced_by == {"SGLANG_FORCE_CUSTOM_AR_PCIE": "1"}
    assert any(e.line == 7 for e in state.evidence)


def test_facts_are_frozen_dataclasses_not_json() -> None:
    failing = run("[2025-06-02 10:00:00 TP0] Load weight begin. avail mem=78.50 GB\n")
    facts = compute(failing, failing)
    assert dataclasses.is_dataclass(facts)
    with pytest.raises(dataclasses.FrozenInstanceError):
        facts.budget_moved = True  # type: ignore[misc]
    d = evaluate(RULES, failing, failing)
    assert d.facts is not None and isinstance(d.to_dict()["facts"], dict)


def test_novel_line_evidence_names_the_rank_that_printed_it() -> None:
    """NV01 cites the first line of a shape with the rank that printed that line (TP5), not the
    lowest rank that ever printed the shape (TP0)."""
    base = run("[2025-06-01 10:00:00 TP0] Load weight begin. avail mem=78.50 GB\n", "b.log")
    fail = run("[2025-06-02 10:00:00 TP0] Load weight begin. avail mem=78.50 GB\n"
               "[2025-06-02 10:00:01 TP5] Something new happened on device 5\n"
               "[2025-06-02 10:00:02 TP0] Something new happened on device 0\n", "f.log")
    d = evaluate(RULES, fail, base)
    nv = [f for f in d.findings if f.rule == "NV01"]
    assert nv and [(e["line"], e["rank"]) for e in nv[0].evidence] == [(2, "TP5")]
