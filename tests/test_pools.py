"""A hybrid model's pools one by one (model/pools.py, diagnose/pools.py).

Real text where it exists: fixtures/real 141 (SWAKVPool's two unlabelled allocation lines
per rank, sgl-project/sglang#15464), 145 (prefill lines with full and Mamba usage,
sgl-project/sglang#30047), 043 (the invariant checker's per-pool state) and the real pair
fixtures/real-pairs/001 (two launches whose SWA and full pools differ). The retraction,
HiSparse, DeepSeek V4 and post-capture texts below are built from SGLang's own format
strings (metrics_reporter.py ``report_decode_stats``, scheduler.py's retraction warning,
``kv_pool_runtime.py``'s post-capture lines, ``memory_pool.py``): no public log shows them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from logforensics import native, summarize_file
from logforensics.diagnose.pools import pool_advice, pool_facts
from logforensics.model.run import RunModel
from logforensics.pipeline import diagnose_files, iter_events

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT / "fixtures" / "real"
PAIR = ROOT / "fixtures" / "real-pairs" / "001-laguna-nvfp4-stops-at-prefill-graph-capture"


def _decode(t: int, full: int, fu: float, swa: int, su: float, run: int = 64, queue: int = 0) -> str:
    return (f"[2026-03-08 12:00:{t:02d} TP0] Decode batch, #running-req: {run}, #full token: {full}, "
            f"full token usage: {fu:.2f}, #swa token: {swa}, swa token usage: {su:.2f}, cuda graph: True, "
            f"gen throughput (token/s): 1700.00, #queue-req: {queue}")


RETRACT = ("[2026-03-08 12:00:{t:02d} TP0] KV cache pool is full. Retract requests. #retracted_reqs: 3, "
           "#new_tokens_gained: 4096, #new_token_ratio: 0.7000 -> 0.5000")
SWA_BOUND = [_decode(0, 120000, 0.40, 95000, 0.93), _decode(2, 121000, 0.41, 97000, 0.97),
             RETRACT.format(t=4), _decode(6, 118000, 0.39, 99000, 0.99), RETRACT.format(t=8)]
FULL_BOUND = [_decode(0, 290000, 0.97, 40000, 0.40), RETRACT.format(t=2)]


def _write(tmp_path: Path, lines: list[str], name: str = "run.log") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_swakvpool_lines_place_each_rank_pool(tmp_path: Path) -> None:
    """SWAKVPool allocates its SWA pool, then its full pool: TP2's two lines before its
    SWAKVPool line give each pool's GiB; the total is the rank's KV."""
    s = summarize_file(REAL / "141-mimo-v2-flash-tp4-swakvpool-unlabelled-swa-then-full-kv-lines.log")
    assert s.pools is not None
    pools = s.pools.to_dict()["pools"]
    assert pools["swa"]["gib"] == pytest.approx(41.76 + 27.84)
    assert pools["full"]["gib"] == pytest.approx(4.82 + 3.21)
    assert pools["swa"]["size"] == pools["full"]["size"] == 1496958
    assert pools["full"]["size_at"]["line"] == 4
    # TP0 and TP3 show one allocation line each: their KV is SWAKVPool's total, not that line
    assert {r: m.kv_gib for r, m in s.memory.items()} == {f"TP{i}": 77.63 for i in range(4)}
    assert s.pools.to_dict()["order"]["order"] == "kv_before_graphs"


def test_batch_lines_give_peak_and_last_per_pool() -> None:
    s = summarize_file(REAL / "145-npu-qwen-hybrid-prefill-full-token-usage-mamba-usage-rising.log")
    assert s.pools is not None
    full, mamba = s.pools.to_dict()["pools"]["full"], s.pools.to_dict()["pools"]["mamba"]
    assert (full["peak_usage"], full["peak_at"]["line"]) == (0.40, 5)
    assert (mamba["peak_usage"], mamba["last_usage"], mamba["unit"]) == (0.60, 0.60, "states")


def test_invariant_checker_state_per_pool() -> None:
    s = summarize_file(REAL / "043-tp8-ep-pool-leak-valueerror-multiline-msg-bracket-line.log")
    assert s.pools is not None
    swa = s.pools.to_dict()["pools"]["swa"]["state"]
    assert (swa["total"], swa["available"], swa["evictable"]) == (911616, 235264, 676096)
    assert swa["at"]["text"].startswith("ValueError: pool memory leak detected!")


ACCOUNT = """\
[2026-06-02 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl/python/sglang/srt/managers/scheduler.py", line 1111, in event_loop_normal
    result = self.run_batch(batch)
RuntimeError: Prefill out of memory. Try to lower your batch size. Try to allocate 4096 tokens.
Available full tokens: 320512 (full_available_size=192 + full_evictable_size_=320320)
Available mamba: 12 (available_size=3 + component_evictable_size_=9)
"""


def test_an_out_of_memory_account_gives_each_pools_state_without_a_total(tmp_path: Path) -> None:
    """The unified radix cache's account in an out-of-memory message ("Available full tokens: T
    (full_available_size=A + full_evictable_size_=E)", "Available <pool>: ...") is each pool's
    available and evictable part; the pool's size is not in it, so no total is said."""
    s = summarize_file(_write(tmp_path, ACCOUNT.splitlines()))
    assert s.pools is not None
    pools = s.pools.to_dict()["pools"]
    assert {name: (p["state"]["total"], p["state"]["available"], p["state"]["evictable"])
            for name, p in pools.items()} == {"full": (None, 192, 320320), "mamba": (None, 3, 9)}
    assert pools["mamba"]["unit"] == "states" and "size" not in pools["full"]


def test_retraction_names_the_pool_that_bound_admission(tmp_path: Path) -> None:
    s = summarize_file(_write(tmp_path, SWA_BOUND))
    assert s.pools is not None
    assert s.pools.to_dict()["bound_by"] == {"swa": 2}
    first = s.pools.to_dict()["retractions"][0]
    assert (first["at"]["line"], first["usage_at"]["line"], first["usage"]) == (3, 2, 0.97)
    assert first["others"] == {"full": 0.41}
    f = pool_facts(s)
    assert f.binding == "swa" and f.advice[0].setting == "--swa-full-tokens-ratio higher"
    d = diagnose_files(str(tmp_path / "run.log"), None)
    sv06 = next(x for x in d.findings if x.rule == "SV06")
    assert "sliding-window (SWA) KV pool bound admission" in sv06.title
    assert [e["line"] for e in sv06.evidence][:2] == [2, 3]


@pytest.mark.parametrize("binding,others,want", [
    ("swa", {"full": 0.4}, ["--swa-full-tokens-ratio higher"]),
    ("full", {"swa": 0.4}, ["--swa-full-tokens-ratio lower"]),
    ("mamba", {"full": 0.2}, ["--mamba-full-memory-ratio higher (or a larger --max-mamba-cache-size)"]),
    ("full", {"mamba": 0.3}, ["--mamba-full-memory-ratio lower"]),
    ("swa", {"full": 0.97}, []),  # no pool had room to give: moving room would not help
])
def test_pool_advice_moves_room_towards_the_binding_pool(binding: str, others: dict[str, float],
                                                         want: list[str]) -> None:
    assert [s.setting for s in pool_advice(binding, others)] == want


def test_full_pool_bound_gets_the_opposite_advice(tmp_path: Path) -> None:
    s = summarize_file(_write(tmp_path, FULL_BOUND))
    f = pool_facts(s)
    assert f.binding == "full" and [a.setting for a in f.advice] == ["--swa-full-tokens-ratio lower"]


@pytest.mark.parametrize("case", ["swa_bound", "labelled", "real_141"])
def test_parts_merge_to_the_whole(tmp_path: Path, case: str) -> None:
    """A later part's retraction before its first batch line is bound by the pools the
    earlier part left, and a rank's pool lines split between parts are placed as in one
    pass: two parts merged give the whole file's pools and ranks' KV, wherever the cut."""
    path = (REAL / "141-mimo-v2-flash-tp4-swakvpool-unlabelled-swa-then-full-kv-lines.log" if case == "real_141"
            else _write(tmp_path, SWA_BOUND if case == "swa_bound" else [LAUNCH, *OLD_ORDER]))
    events = list(iter_events(path))
    whole = RunModel(str(path))
    whole.observe_all(events)
    want = whole.summary()
    for cut in range(1, len(events)):
        first, second = RunModel(str(path), part=True), RunModel(str(path), part=True)
        first.observe_all(events[:cut])
        second.observe_all(events[cut:])
        first.merge(second)
        got = first.summary()
        assert (got.pools, got.memory) == (want.pools, want.memory), cut


def test_hisparse_and_deepseek_v4_pools(tmp_path: Path) -> None:
    s = summarize_file(_write(tmp_path, [
        "[2026-03-08 11:59:02 TP0] Initialize DeepSeekV4TokenToKVPool with max_num_reqs=48 swa_size=98304 "
        "c4_size=262144 c4_logical_size=2097152 c128_size=65536 c4_state_pool_size=96 c128_state_pool_size=96",
        "[2026-03-08 12:00:00 TP0] Decode batch, #running-req: 8, #gpu token: 9000, gpu token usage: 0.80, "
        "#cpu token: 30000, cpu token usage: 0.10, cuda graph: True, gen throughput (token/s): 400.00, #queue-req: 0",
    ]))
    assert s.pools is not None
    pools = s.pools.to_dict()["pools"]
    assert {k: pools[k]["size"] for k in ("swa", "c4", "c128")} == {"swa": 98304, "c4": 262144, "c128": 65536}
    assert (pools["hisparse_gpu"]["peak_usage"], pools["hisparse_gpu"]["peak_used"]) == (0.80, 9000)
    assert pools["hisparse_cpu"]["last_usage"] == 0.10


LAUNCH = "SGLANG_ENABLE_POST_CAPTURE_KV_SIZING=1 python3 -m sglang.launch_server --model-path google/gemma-3-27b-it"
OLD_ORDER = [
    "[2026-03-08 11:59:02 TP0] SWA KV Cache is allocated. dtype: torch.bfloat16, #tokens: 320000, K size: 6.10 GB, V size: 6.10 GB",
    "[2026-03-08 11:59:02 TP0] Full KV Cache is allocated. dtype: torch.bfloat16, #tokens: 400000, K size: 3.05 GB, V size: 3.05 GB",
    "[2026-03-08 11:59:03 TP0] Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, avail mem=20.40 GB",
]
NEW_ORDER = [
    "[2026-03-08 11:59:02 TP0] Full KV Cache VA upper bound. dtype: torch.bfloat16, #tokens: 900000, K size: 6.87 GB, V size: 6.87 GB",
    "[2026-03-08 11:59:03 TP0] Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, avail mem=40.40 GB",
    "[2026-03-08 11:59:40 TP0] Post-capture KV sizing: full_layer_tokens=410000, swa_layer_tokens=328000",
    "[2026-03-08 11:59:40 TP0] Post-capture KV sizing: KV cache allocated. dtype: torch.bfloat16, #tokens: 410000, KV size: 12.51 GB, avail mem=3.20 GB",
]


def test_post_capture_env_set_but_old_order_is_said_with_the_lines(tmp_path: Path) -> None:
    s = summarize_file(_write(tmp_path, [LAUNCH, *OLD_ORDER]))
    assert s.pools is not None
    o = s.pools.to_dict()["order"]
    assert (o["order"], o["env_set"], o["fell_back"]) == ("kv_before_graphs", True, True)
    assert (o["kv_at"]["line"], o["capture_at"]["line"], o["env_at"][0]["line"]) == (2, 4, 1)
    # both pools' GiB add up to the rank's KV, and the full pool's size is its KV tokens
    assert s.memory["TP0"].kv_gib == pytest.approx(18.3) and s.memory["TP0"].kv_tokens == 400000
    d = diagnose_files(str(tmp_path / "run.log"), None)
    assert [e["line"] for e in next(x for x in d.findings if x.rule == "MEM06").evidence] == [1, 2, 4]


def test_post_capture_order_and_its_sizes(tmp_path: Path) -> None:
    s = summarize_file(_write(tmp_path, [LAUNCH, *NEW_ORDER]))
    assert s.pools is not None
    o = s.pools.to_dict()["order"]
    assert (o["order"], o["fell_back"], o["va_at"]["line"], o["post_capture_at"][0]["line"]) == \
        ("graphs_before_kv", False, 2, 4)
    # the sizes are the post-capture ones, not the reserved upper bound
    assert (s.pools.to_dict()["pools"]["full"]["size"], s.pools.to_dict()["pools"]["swa"]["size"]) == (410000, 328000)
    rules = {x.rule for x in diagnose_files(str(tmp_path / "run.log"), None).findings}
    assert "MEM07" in rules and "MEM06" not in rules


def test_diff_compares_pool_by_pool() -> None:
    """The real pair's failing launch has both pools at about a sixth of the baseline's."""
    d = diagnose_files(str(PAIR / "failing.log"), str(PAIR / "baseline.log"))
    deltas = {x.pool: x for x in d.facts.pools.deltas}
    assert (deltas["full"].size_baseline, deltas["full"].size_failing) == (185897, 32997)
    assert (deltas["swa"].size_baseline, deltas["swa"].size_failing) == (148717, 26397)
    assert d.facts.pools.changed == ("full", "swa")
    assert deltas["full"].evidence[0].line == 56 and deltas["full"].evidence[1].line == 151


def test_retraction_storm_names_the_binding_pool_and_its_knob_first(tmp_path: Path) -> None:
    lines = []
    for i in range(6):
        lines += [_decode(4 * i, 121000, 0.41, 97000 + i, 0.97), RETRACT.format(t=4 * i + 2)]
    d = diagnose_files(str(_write(tmp_path, lines)), None)
    sv03 = next(x for x in d.findings if x.rule == "SV03")
    assert "the fullest of this model's pools was the sliding-window (SWA) KV pool" in sv03.explanation
    assert d.facts.serving.kv_advice[0].setting == "--swa-full-tokens-ratio higher"


def test_a_long_hybrid_log_is_read_in_bulk_with_the_pools_of_the_exact_path(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-pool fields of a hybrid model's batch lines are read from the bulk reader's
    rows (``columns._pool_rows``), so such a serving log is not read line by line; its
    pools, peaks, last values and the retractions' bindings equal the exact path's."""
    from logforensics.ingest.batch import read_file

    lines = ["[2026-03-08 11:59:59 TP0] The server is fired up and ready to roll!"]
    for i in range(3000):  # usage rising and falling, a retraction now and then
        t = i % 60
        fu, su = (i % 97) / 100, ((i * 7) % 89) / 100
        lines.append(_decode(t, 1000 + i, fu, 500 + i, su, run=1 + i % 50, queue=i % 3).replace("12:00:", f"12:{i // 60 % 60:02d}:"))
        if i % 500 == 499:
            lines.append(RETRACT.format(t=t).replace("12:00:", f"12:{i // 60 % 60:02d}:"))
    path = _write(tmp_path, lines)
    monkeypatch.setenv("LOGFORENSICS_PURE", "1")
    exact = summarize_file(path).to_dict()
    monkeypatch.delenv("LOGFORENSICS_PURE")
    if not native.available():
        pytest.skip("the accelerator is not built here")
    run = read_file(path)
    assert run._scanner is not None and run._scanner.taken > 2500  # the batch lines, in bulk
    got = summarize_file(path).to_dict()
    assert got["pools"] == exact["pools"] and got["pools"]["pools"]["swa"]["peak_usage"] == 0.88
    assert [b["pool"] for b in got["pools"]["retractions"]] == [b["pool"] for b in exact["pools"]["retractions"]]
    assert got == exact


#: A CUDA out-of-memory error in the serving loop as SGLang's scheduler prints it
#: (``Scheduler hit an exception:`` and torch's message).
RUNTIME_OOM = """\
[{ts} TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2420, in run_scheduler_process
    scheduler.event_loop_overlap()
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 661, in event_loop_overlap
    batch_result = self.run_batch(batch)
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB \
of which 1.05 GiB is free.
"""


def _finding(path: Path, rule: str):  # noqa: ANN202 - a Finding
    d = diagnose_files(str(path), None)
    return next(f for f in d.findings if f.rule == rule)


def test_runtime_oom_names_the_fullest_pool_with_each_pool_and_the_knob(tmp_path: Path) -> None:
    """SV05 on a hybrid Mamba model (145's real prefill lines, then an OOM in the serving loop):
    the Mamba state pool, fullest on the last batch line before it, is named with each pool's
    usage and the knob that moves room to it; the batch line is evidence. A model with one pool
    keeps the text it had."""
    text = (REAL / "145-npu-qwen-hybrid-prefill-full-token-usage-mamba-usage-rising.log").read_text()
    path = tmp_path / "oom.log"
    path.write_text(text + RUNTIME_OOM.format(ts="2026-07-04 04:31:38"), encoding="utf-8")
    f = _finding(path, "SV05")
    assert "with the Mamba state pool the fullest (usage 0.60)" in f.title
    assert "- the full-attention KV pool: size not in this log, usage 0.40 on the last batch line before it" \
        in f.explanation
    assert "- the Mamba state pool: size not in this log, usage 0.60 on the last batch line before it" \
        in f.explanation
    assert "--mamba-full-memory-ratio higher" in f.explanation
    assert 5 in [e["line"] for e in f.evidence]
    # one pool: the text of a model without pools of its own
    single = tmp_path / "single.log"
    single.write_text("[2025-06-02 10:01:00 TP0] Decode batch, #running-req: 64, #token: 90000, token usage: 0.31, "
                      "cuda graph: True, gen throughput (token/s): 1700.00, #queue-req: 0\n"
                      + RUNTIME_OOM.format(ts="2025-06-02 10:01:02"), encoding="utf-8")
    f = _finding(single, "SV05")
    assert f.title == "CUDA out of memory while serving on TP0: lower --mem-fraction-static, do not raise it"
    assert "pools" not in f.explanation


def test_runtime_oom_on_a_swa_model_gives_sizes_and_the_ratio_toward_the_full_pool(tmp_path: Path) -> None:
    """141's real SWAKVPool start-up (both pools' sizes), decode lines with the full pool at 0.97
    and the SWA pool at 0.40, then the OOM: the full pool is named, the SWA ratio goes lower."""
    text = (REAL / "141-mimo-v2-flash-tp4-swakvpool-unlabelled-swa-then-full-kv-lines.log").read_text()
    path = tmp_path / "oom.log"
    path.write_text(text + "\n".join(FULL_BOUND[:1]) + "\n" + RUNTIME_OOM.format(ts="2026-03-08 12:00:04"),
                    encoding="utf-8")
    f = _finding(path, "SV05")
    assert "with the full-attention KV pool the fullest (usage 0.97)" in f.title
    assert "- the full-attention KV pool: 1496958 tokens" in f.explanation
    assert "- the sliding-window (SWA) KV pool: 1496958 tokens" in f.explanation
    assert "--swa-full-tokens-ratio lower moves room to it" in f.explanation


def test_kv_allocation_failure_on_a_hybrid_model_lists_the_pools_sizes(tmp_path: Path) -> None:
    """OM02 on 143's real sliding-window pool split, then the allocation's "Not enough memory":
    both pools with their sizes, and the ratio knob said to move memory, not to make it fit."""
    text = (REAL / "143-mimo-v2-flash-tp4-sliding-window-pool-split-full-375360-swa-300288.log").read_text()
    path = tmp_path / "alloc.log"
    path.write_text(text + """\
[2026-01-31 13:50:40 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 900, in init_memory_pool
    raise RuntimeError(
RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.
""", encoding="utf-8")
    f = _finding(path, "OM02")
    assert "This model has 2 pools" in f.explanation
    assert "- the full-attention KV pool: 375360 tokens" in f.explanation
    assert "- the sliding-window (SWA) KV pool: 300288 tokens" in f.explanation
    assert "--swa-full-tokens-ratio moves memory between these pools and leaves the budget as it is" \
        in f.explanation


def test_pools_at_a_crash_carry_the_invariant_checkers_evictable_part() -> None:
    """043's crash carries SGLang's per-pool check: each pool's evictable and available part."""
    s = summarize_file(REAL / "043-tp8-ep-pool-leak-valueerror-multiline-msg-bracket-line.log")
    at = {a.pool: a for a in pool_facts(s).at_crash}
    assert (at["swa"].evictable, at["swa"].available) == (676096, 235264)
    assert (at["full"].evictable, at["full"].available) == (9115392, 768)



def test_use_over_time_is_bounded_the_same_on_every_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each pool's use over the log is kept in at most ``SERIES_POINTS`` buckets of lines, each
    its highest usage and the first line that printed it (so the peak is a point), the same
    read line by line, in bulk, or in two parts merged."""
    from logforensics.model.pools import SERIES_POINTS

    lines = ["[2026-03-08 11:59:59 TP0] The server is fired up and ready to roll!"]
    usage: dict[str, dict[int, float]] = {"full": {}, "swa": {}}
    for i in range(3000):
        fu, su = (i % 97) / 100, ((i * 7) % 89) / 100
        lines.append(_decode(0, 1000 + i, fu, 500 + i, su).replace("12:00:00", f"12:{i // 60 % 60:02d}:{i % 60:02d}"))
        usage["full"][len(lines)], usage["swa"][len(lines)] = fu, su
    path = _write(tmp_path, lines)
    monkeypatch.setenv("LOGFORENSICS_PURE", "1")
    pools = summarize_file(path).pools
    monkeypatch.delenv("LOGFORENSICS_PURE")
    assert pools is not None
    exact = pools.to_dict()
    for pool, by_line in usage.items():
        series = exact["series"][pool]
        width = series["lines_per_point"]
        want: dict[int, tuple[float, int]] = {}
        for line, u in by_line.items():
            got = want.get(line // width)
            if got is None or u > got[0]:
                want[line // width] = (u, line)
        assert 32 < len(want) <= SERIES_POINTS
        assert [(p["usage"], p["line"]) for p in series["points"]] == [want[k] for k in sorted(want)]
        peak = exact["pools"][pool]
        assert (peak["peak_usage"], peak["peak_at"]["line"]) in [(p["usage"], p["line"]) for p in series["points"]]
        for p in series["points"]:  # each point with its own line's count and stamp
            i = p["line"] - 2
            assert (p["rank"], p["used"], p["ts"]) == ("TP0", (1000 if pool == "full" else 500) + i,
                                                        f"2026-03-08T12:{i // 60 % 60:02d}:{i % 60:02d}")
    from logforensics.ingest.batch import read_file

    if native.available():
        run = read_file(path)
        assert run._scanner is not None and run._scanner.taken > 2500  # the batch lines, in bulk
    assert summarize_file(path).pools == pools
    events = list(iter_events(path))
    for cut in (700, 1999):
        first_part, second = RunModel(str(path), part=True), RunModel(str(path), part=True)
        first_part.observe_all(events[:cut])
        second.observe_all(events[cut:])
        first_part.merge(second)
        assert first_part.summary().pools == pools, cut
