"""Hangs: the timer families are read, and the ``hang`` object names the timer, its knob,
the collectives, the rank that is behind and the py-spy main-thread functions."""

from __future__ import annotations

from pathlib import Path

import pytest

from logforensics import iter_events, summarize_file
from logforensics.model.hang import TIMERS, HangObserver

ROOT = Path(__file__).resolve().parent.parent

# Wordings as PyTorch's ProcessGroupNCCL.cpp and SGLang print them (torch 2.1 - 2.9).
TIMEOUT = ("[rank{r}]:[E810 03:04:10.850617863 ProcessGroupNCCL.cpp:683] [Rank {r}] Watchdog caught collective "
           "operation timeout: WorkNCCL(SeqNum={seq}, OpType=BROADCAST, NumelIn=80, NumelOut=80, Timeout(ms)=600000) "
           "ran for 600027 milliseconds before timing out.")
FAILURE = ("[rank{r}]:[E810 03:04:11.063313477 ProcessGroupNCCL.cpp:2241] [PG ID 0 PG GUID 0(default_pg) Rank {r}]  "
           "failure detected by watchdog at work sequence id: {seq} PG status: last enqueued work: {enq}, "
           "last completed work: {done}")


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "server.log"
    path.write_text(text, encoding="utf-8")
    return path


def _kinds(path: Path) -> list[tuple[str, dict]]:
    return [(ev.kind, dict(ev.fields)) for ev in iter_events(path)]


@pytest.mark.parametrize("line, kind, figures", [
    (TIMEOUT.format(r=3, seq=78), "collective_timeout",
     {"seq": 78, "op_type": "BROADCAST", "timeout_ms": 600000, "ran_for_ms": 600027}),
    (FAILURE.format(r=1, seq=40231, enq=40267, done=40230), "collective_failure",
     {"seq": 40231, "last_enqueued": 40267, "last_completed": 40230, "pg": 0}),
    ("[rank6]:[E429 13:55:49.384372190 ProcessGroupNCCL.cpp:1743] [PG ID 0 PG GUID 0(default_pg) Rank 6] "
     "ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in monitoring enqueued "
     "collectives.", "collective_timeout", {"family": "nccl_heartbeat", "timeout_s": 480}),
])
def test_c10d_watchdog_messages_are_read(tmp_path: Path, line: str, kind: str, figures: dict) -> None:
    [(got, fields)] = _kinds(_write(tmp_path, line + "\n"))
    assert got == kind
    assert {k: fields[k] for k in figures} == figures


def test_pd_and_pyspy_records(tmp_path: Path) -> None:
    text = ("[2025-06-05 08:28:03] Some requests timed out when bootstrapping, which means prefill instances fail to "
            "receive the KV indices from the decode instance of this request. If a greater mean TTFT is acceptable, "
            "you can 'export SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT=600' (10 minutes) to relax the timeout condition.\n"
            "[2025-06-05 08:28:04] Request 1234567 waiting_timeout\n"
            "Process 231587: sglang::scheduler_DP0_TP1\n"
            "Python v3.10.12 (/usr/bin/python3.10)\n")
    got = _kinds(_write(tmp_path, text))
    assert [k for k, _ in got] == ["pd_timeout", "pd_timeout", "pyspy_process", "pyspy_python"]
    assert got[0][1]["stage"] == "bootstrap" and got[1][1]["stage"] == "waiting"
    assert got[2][1] == {"pid": 231587, "title": "sglang::scheduler_DP0_TP1"}


PYSPY = """[2025-06-05 08:28:01 TP{r}] Pyspy dump for PID {pid}:
Process {pid}: sglang::scheduler_TP{r}
Python v3.10.12 (/usr/bin/python3.10)

Thread {pid} (active): "MainThread"
    {fn} ({loc})
    event_loop_overlap (sglang/srt/managers/scheduler.py:661)
    run_scheduler_process (sglang/srt/managers/scheduler.py:2420)
Thread {tid} (idle): "Thread-4 (watchdog_thread)"
    select (selectors.py:416)
    pyspy_dump_schedulers (sglang/srt/utils.py:1711)
    watchdog_thread (sglang/srt/managers/scheduler.py:1840)

"""


def test_collective_timeout_names_the_rank_behind_and_the_main_thread_functions(tmp_path: Path) -> None:
    lines = ["[2025-08-10 02:54:00 TP0] Decode batch, #running-req: 4, #token: 900, token usage: 0.01, "
             "cuda graph: True, gen throughput (token/s): 310.00, #queue-req: 0"]
    for r in range(4):
        lines.append(TIMEOUT.format(r=r, seq=78))
        lines.append(FAILURE.format(r=r, seq=78, enq=79, done=76 if r == 2 else 77))
    text = "\n".join(lines) + "\n"
    text += PYSPY.format(r=1, pid=4101, tid=4201, fn="synchronize", loc="torch/cuda/streams.py:224")
    text += PYSPY.format(r=2, pid=4102, tid=4202, fn="recv_requests", loc="sglang/srt/managers/scheduler.py:980")
    summary = summarize_file(_write(tmp_path, text))
    assert summary.outcome == "hung"
    hang = summary.hang
    assert hang.timer == "c10d_collective" and hang.timed_out and hang.ends_run
    assert hang.timeout_s == 600.0
    assert hang.setting == "--dist-timeout" and "--watchdog-timeout" in hang.note and "8232" in hang.note
    assert hang.ranks == ["TP0", "TP1", "TP2", "TP3"]
    by_rank = {c.rank: c for c in hang.collectives}
    assert by_rank["TP2"].last_completed == 76 and by_rank["TP0"].last_completed == 77
    assert by_rank["TP3"].op == "BROADCAST" and by_rank["TP3"].seq == 78 and by_rank["TP3"].last_enqueued == 79
    assert hang.behind.rank == "TP2" and hang.behind.last_completed == 76
    dumps = {d.rank: d for d in hang.pyspy}
    assert dumps["TP1"].main_function == "synchronize" and dumps["TP1"].pid == 4101
    assert dumps["TP2"].main_function == "recv_requests"
    assert dumps["TP2"].rank_from == "process title"
    assert dumps["TP2"].main_stack[1].startswith("event_loop_overlap")


def test_title_names_the_rank_when_the_parent_prints_the_dumps(tmp_path: Path) -> None:
    # v0.5.23 dumps every scheduler from the parent (no rank in the header's prefix)
    text = ("[2026-01-10 10:00:00] Pyspy dump for PID 777 (py-spy dump --native --pid 777):\n"
            "Process 777: sglang::scheduler_DP1_TP5_EP5\n"
            'Thread 777 (active): "MainThread"\n'
            "    all_reduce (torch/distributed/distributed_c10d.py:2501)\n")
    summary = summarize_file(_write(tmp_path, text))
    [dump] = summary.hang.pyspy
    assert dump.rank == "DP1 TP5 EP5" and dump.main_function == "all_reduce"


def test_soft_watchdog_dumps_but_the_run_goes_on(tmp_path: Path) -> None:
    text = ("[2026-01-10 10:00:00 TP0] Decode batch, #running-req: 1, #token: 9, token usage: 0.00, cuda graph: True, "
            "gen throughput (token/s): 10.00, #queue-req: 0\n"
            "[2026-01-10 10:00:30 TP0] Scheduler watchdog timeout (self.watchdog_timeout=20.0, self.soft=True)\n"
            "[2026-01-10 10:00:31 TP0] Decode batch, #running-req: 1, #token: 9, token usage: 0.00, cuda graph: True, "
            "gen throughput (token/s): 10.00, #queue-req: 0\n")
    summary = summarize_file(_write(tmp_path, text))
    assert summary.outcome == "ready"
    assert summary.hang.timer == "sglang_soft_watchdog" and not summary.hang.ends_run
    assert summary.hang.setting == "--soft-watchdog-timeout"


def test_every_timer_names_its_knob_and_source() -> None:
    for name, timer in TIMERS.items():
        assert timer["setting"] and timer["source"] and timer["what"], name


def _observed(events: list, ranks: list[str]) -> HangObserver:
    """The events observed in one pass, after checking that every cut of them in two
    parts, observed apart and merged, builds the same hang."""
    def observer(part: list) -> HangObserver:
        h = HangObserver()
        for ev in part:
            h.observe(ev.kind, ev.line, ev.rank, ev.ts, ev.fields, ev.text, ev.file)
        return h

    whole = observer(events)
    for cut in range(len(events) + 1):
        a = observer(events[:cut])
        a.merge(observer(events[cut:]))
        assert a.build(ranks) == whole.build(ranks), cut
    return whole


def test_observer_merge_equals_one_pass(tmp_path: Path) -> None:
    text = "\n".join(TIMEOUT.format(r=r, seq=5) for r in range(3)) + "\n" + PYSPY.format(
        r=1, pid=1, tid=2, fn="wait", loc="threading.py:324")
    _observed(list(iter_events(_write(tmp_path, text))), ["TP0", "TP1", "TP2"])


# -- the rank that differs, what the ranks are stuck on, why stacks are missing ----------
# Text built from the format strings of SGLang's utils/watchdog.py (pyspy_dump_schedulers,
# WatchdogRaw), managers/scheduler_components/slow_pass_tracer.py, utils/rank_consensus_checker.py
# and CPython's faulthandler (dump_traceback_later); the py-spy errors are py-spy's own texts
# (benfred/py-spy#459, #661, #804). The real excerpts are in test_hang_real.py.
WATCHDOG = "[2026-09-01 10:05:00 TP{r}] Scheduler watchdog timeout (watchdog_timeout=300, soft=False)\n"
PYSPY_FAILED = "[2026-09-01 10:05:00 TP{r}] Pyspy failed to dump PID {pid}. Error: {error}\n"


@pytest.mark.parametrize("error, reason, knob", [
    ("/bin/sh: 1: py-spy: not found", "not_installed", ("py-spy", "not installed")),
    ("Permission Denied: Try running again with elevated permissions by going 'sudo env \"PATH=$PATH\" !!'",
     "permission", ("SYS_PTRACE", "off")),
    ("Error: Operation not permitted (os error 1)", "permission", ("SYS_PTRACE", "off")),
    ("Error: Unsupported version of Python: 3.12.0", "pyspy_too_old", ("py-spy", "too old")),
])
def test_missing_stacks_say_why_in_the_logs_words(tmp_path: Path, error: str, reason: str, knob: tuple) -> None:
    text = WATCHDOG.format(r=0) + PYSPY_FAILED.format(r=0, pid=4242, error=error)
    hang = summarize_file(_write(tmp_path, text)).hang
    stacks = hang.stacks
    [failure] = stacks.pyspy_failures
    assert failure.reason == reason and failure.line == 2 and failure.rank == "TP0"
    assert failure.error == error and error in stacks.missing_why
    knobs = {k.setting: k for k in stacks.next_time}
    assert knobs[knob[0]].status == knob[1] and knobs[knob[0]].evidence.line == 2


def test_pyspy_not_available_from_the_2026_watchdog(tmp_path: Path) -> None:
    text = WATCHDOG.format(r=1) + ("[2026-09-01 10:05:00 TP1] Pyspy is not available: [Errno 2] No such file or "
                                   "directory: 'py-spy'\n")
    assert summarize_file(_write(tmp_path, text)).hang.stacks.pyspy_failures[0].reason == "not_installed"


def test_what_the_log_does_not_show_is_said_so(tmp_path: Path) -> None:
    hang = summarize_file(_write(tmp_path, WATCHDOG.format(r=0))).hang
    assert hang.timer == "sglang_watchdog" and hang.timeout_s == 300
    assert hang.stacks.missing_why == "not in this log"
    assert {k.setting: k.status for k in hang.stacks.next_time} == {
        "SYS_PTRACE": "not in this log", "SGLANG_DEBUG_SLOW_SCHEDULER_PASS_MS": "not in this log",
        "SGLANG_ENABLE_RANK_CONSENSUS_CHECKER": "not in this log", "NCCL_DEBUG=INFO": "not in this log",
        "TORCH_NCCL_TRACE_BUFFER_SIZE": "not in this log"}
    assert hang.initiator is None and hang.stuck_on == []


def test_the_rank_that_never_enqueued_the_collective_is_the_initiator(tmp_path: Path) -> None:
    # TP0, TP1 and TP3 wait on seq 78 (enqueued, not completed); TP2's last enqueued is 77
    lines = ["[2025-08-10 02:54:00 TP0] Decode batch, #running-req: 4, #token: 900, token usage: 0.01, "
             "cuda graph: True, gen throughput (token/s): 310.00, #queue-req: 0"]
    for r in (0, 1, 3):
        lines.append(TIMEOUT.format(r=r, seq=78))
        lines.append(FAILURE.format(r=r, seq=78, enq=78, done=77))
    lines.append(FAILURE.format(r=2, seq=77, enq=77, done=76))
    hang = summarize_file(_write(tmp_path, "\n".join(lines) + "\n")).hang
    assert hang.initiator.rank == "TP2" and "never enqueued" in hang.initiator.why
    assert hang.initiator.evidence[0].line == 8
    [stuck, *_] = hang.stuck_on
    assert (stuck.what, stuck.op, stuck.seq, stuck.ranks) == ("collective", "BROADCAST", 78,
                                                                          ["TP0", "TP1", "TP3"])
    progress = {p.rank: p for p in hang.progress}
    assert (progress["TP2"].last_enqueued, progress["TP2"].last_completed) == (77, 76)
    assert (progress["TP0"].last_enqueued, progress["TP0"].last_completed) == (78, 77)
    assert progress["TP0"].waiting_on.to_dict() == {"op": "BROADCAST", "seq": 78, "pg": 0}
    assert progress["TP0"].last_phase == "in collective BROADCAST seq 78"
    assert [e.line for e in progress["TP0"].evidence] == [2, 3]


def test_the_one_main_thread_elsewhere_is_the_initiator(tmp_path: Path) -> None:
    text = WATCHDOG.format(r=0)
    for r in range(4):
        fn, loc = ("recv_requests", "sglang/srt/managers/scheduler.py:980") if r == 3 else \
            ("all_reduce", "torch/distributed/distributed_c10d.py:2501")
        text += PYSPY.format(r=r, pid=4100 + r, tid=4200 + r, fn=fn, loc=loc)
    hang = summarize_file(_write(tmp_path, text)).hang
    assert hang.initiator.rank == "TP3" and "recv_requests" in hang.initiator.why
    progress = {p.rank: p for p in hang.progress}
    assert progress["TP3"].last_phase.startswith("main thread in recv_requests")
    assert progress["TP1"].phase_from == "py-spy dump"
    knobs = {k.setting: k for k in hang.stacks.next_time}
    assert knobs["SYS_PTRACE"].status == "on"  # py-spy read the processes
    assert hang.stacks.missing_why is None and hang.stacks.pyspy_main_threads == 4


DIVERGENCE = ("[2026-09-01 10:00:00 TP{r}] Found rank divergence for 1 events(s)! local hash: {h}, "
              "events = [\"check_prefetch_progress returns result={{'req_id': '{rid}'}}\"]\n")


def test_rank_divergence_names_the_odd_rank_and_its_request(tmp_path: Path) -> None:
    text = ("[2026-09-01 09:00:00 TP0] Rank consensus checker is enabled. The server will suicide if rank "
            "divergence detected.\n")
    for r, h, rid in ((0, "aa" * 20, "r-7"), (1, "aa" * 20, "r-7"), (2, "bb" * 20, "r-9")):
        text += DIVERGENCE.format(r=r, h=h, rid=rid)
    events = [(e.kind, dict(e.fields)) for e in iter_events(_write(tmp_path, text))]
    assert events[3] == ("rank_divergence", {"events": 1, "local_hash": "bb" * 20, "divergent_events":
                         "[\"check_prefetch_progress returns result={'req_id': 'r-9'}\"]"})
    hang = summarize_file(_write(tmp_path, text)).hang
    assert hang.timer == "rank_divergence" and not hang.timed_out
    assert hang.initiator.rank == "TP2" and [e.line for e in hang.initiator.evidence] == [4, 2]
    assert [s.rids for s in hang.stuck_on] == [["r-7"], ["r-7"], ["r-9"]]
    knobs = {k.setting: k for k in hang.stacks.next_time}
    assert knobs["SGLANG_ENABLE_RANK_CONSENSUS_CHECKER"].status == "on"
    assert knobs["SGLANG_ENABLE_RANK_CONSENSUS_CHECKER"].evidence.line == 1


def test_two_diverging_ranks_name_no_initiator(tmp_path: Path) -> None:
    text = DIVERGENCE.format(r=0, h="aa" * 20, rid="x") + DIVERGENCE.format(r=1, h="bb" * 20, rid="y")
    init = summarize_file(_write(tmp_path, text)).hang.initiator
    assert init.rank is None and init.candidates == ["TP0", "TP1"]


SLOW = """Timeout (0:00:00.500000)!
Thread 0x00007f3a2b7fe640 (most recent call first):
  File "/usr/lib/python3.10/threading.py", line 324 in wait
  File "/usr/lib/python3.10/threading.py", line 607 in wait

Thread 0x00007f3a4c1d3740 (most recent call first):
  File "/sgl/python/sglang/srt/managers/schedule_policy.py", line 411 in calc_priority
  File "/sgl/python/sglang/srt/managers/scheduler.py", line 1873 in get_next_batch_to_run
  File "/sgl/python/sglang/srt/managers/scheduler.py", line 1012 in event_loop_overlap
[2026-09-01 10:00:01 TP1] slow scheduler pass: get_next_batch_to_run took 812.4ms (>= 500.0ms; thread stacks were dumped to stderr by the faulthandler watchdog)
"""


def test_slow_scheduler_pass_and_its_faulthandler_stack(tmp_path: Path) -> None:
    text = SLOW + WATCHDOG.format(r=1)
    kinds = [e.kind for e in iter_events(_write(tmp_path, text))]
    assert kinds == ["thread_dump", "slow_pass", "watchdog_timeout"]  # a thread dump, not an exception
    hang = summarize_file(_write(tmp_path, text)).hang
    [p] = hang.progress
    assert p.rank == "TP1" and p.phase_from == "slow scheduler pass"
    assert p.last_phase == "slow scheduler pass get_next_batch_to_run (812.4 ms) in calc_priority"
    assert [e.line for e in p.evidence] == [1, 10, 11]
    assert p.evidence[0].text.startswith("faulthandler: thread 0x00007f3a4c1d3740: calc_priority")
    assert summarize_file(_write(tmp_path, text)).crash is None
    assert hang.stacks.faulthandler_dumps == 1 and hang.stacks.missing_why is None
    knobs = {k.setting: k for k in hang.stacks.next_time}
    assert knobs["SGLANG_DEBUG_SLOW_SCHEDULER_PASS_MS"].status == "on"


def test_a_slow_pass_alone_is_no_hang(tmp_path: Path) -> None:
    path = _write(tmp_path, SLOW)
    assert [e.kind for e in iter_events(path)] == ["thread_dump", "slow_pass"]
    summary = summarize_file(path)  # the dump is no crash: the process went on
    assert summary.hang is None and summary.crash is None and summary.exceptions == []
    assert summary.outcome == "incomplete"


def test_observer_merge_equals_one_pass_with_the_new_records(tmp_path: Path) -> None:
    text = (SLOW + WATCHDOG.format(r=1) + PYSPY_FAILED.format(r=1, pid=7, error="/bin/sh: py-spy: not found")
            + DIVERGENCE.format(r=0, h="aa" * 20, rid="x") + DIVERGENCE.format(r=1, h="bb" * 20, rid="y"))
    whole = _observed(list(iter_events(_write(tmp_path, text))), ["TP0", "TP1"])
    built = whole.build(["TP0", "TP1"])
    assert built is not None and built.stacks["pyspy_failures"][0]["pid"] == 7 and built.stacks["faulthandler_dumps"]


# The body of SGLang's scheduler watchdog dump, as its source prints it:
#   sgl-project/sglang python/sglang/srt/utils/watchdog.py @ 005c64c712dc700fdc2478e515c836f51e350e8e
#       if self.dump_info is not None and (info_msg := self.dump_info()):
#           logger.error(f"{self.debug_name} debug info:\n{info_msg}")
#       pyspy_dump_schedulers()
#       logger.error(f"{self.debug_name} watchdog timeout ({self.watchdog_timeout=}, {self.soft=})")
#   sgl-project/sglang python/sglang/srt/managers/scheduler_runtime_checker_mixin.py
#   @ 008e7b87b07c4ef50f6506ffd1ae956fb9e16021, create_scheduler_watchdog's dump_info (debug_name="Scheduler"):
#       _, messages = scheduler._check_all_pools(scheduler.get_pool_stats())
#       return (f"{scheduler.cur_batch.batch_size()=}\n" f"{scheduler.cur_batch.reqs=}\n" + "\n".join(messages))
#   and _check_pool_invariant's message, one per pool ("full", "swa", "mamba"):
#       f"[{pool_name}] {total=}, {available=}, {evictable=}, {protected=}, {session_held=}, {uncached=}"
#   A Req prints as f"Req(rid={self.rid}, input_ids=..., output_ids=..., ...)" (schedule_batch.py ``__repr__``).
def _debug_block(ts: str, rank: str, rids: list[str], pools: dict[str, tuple[int, int, int]]) -> str:
    reqs = ", ".join(f"Req(rid={rid}, input_ids=[151644, 872, 198], output_ids=[9707, 11], self.grammar=None, "
                     f"self.sampling_params=<sglang.srt.sampling.sampling_params.SamplingParams object at "
                     f"0x7f3a2c1d9e50>)" for rid in rids)
    lines = [f"[{ts} {rank}] Scheduler debug info:", f"scheduler.cur_batch.batch_size()={len(rids)}",
             f"scheduler.cur_batch.reqs=[{reqs}]"]
    lines += [f"[{name}] total={t}, available={a}, evictable={e}, protected={t - a - e}, session_held=0, uncached=0"
              for name, (t, a, e) in pools.items()]
    return "\n".join(lines) + "\n"


RID_A, RID_B, RID_C = "5b1a0c1f3e2d4c8a9f7e6d5c4b3a2910", "0f9e8d7c6b5a49382716a5b4c3d2e1f0", "c0ffee00c0ffee00c0ffee00c0ffee00"
POOLS = {"full": (1496958, 1200000, 250000), "swa": (1496958, 90000, 40000)}


def test_scheduler_debug_info_body_gives_each_ranks_batch_and_pools(tmp_path: Path) -> None:
    """Each rank's ``Scheduler debug info:`` block: the batch all ranks are stuck on (its size and
    request ids, the ranks that show it), each pool's total, available and evictable part, the
    lines; the pools' state reaches the summary's pools too."""
    text = "".join(_debug_block("2026-03-08 12:05:00", f"TP{r}", [RID_A, RID_B], POOLS) for r in range(3))
    text += "".join(f"[2026-03-08 12:05:01 TP{r}] Scheduler watchdog timeout (self.watchdog_timeout=300, "
                    f"self.soft=False)\n" for r in range(3))
    s = summarize_file(_write(tmp_path, text))
    h = s.hang
    assert h is not None and h.timer == "sglang_watchdog"
    [batch] = [x for x in h.stuck_on if x.what == "batch"]
    assert (batch.batch_size, batch.rids, batch.ranks) == (2, [RID_A, RID_B], ["TP0", "TP1", "TP2"])
    assert [e.line for e in batch.evidence] == [1, 6, 11]
    by_rank = {b.rank: b for b in h.debug_info}
    assert sorted(by_rank) == ["TP0", "TP1", "TP2"]
    tp1 = by_rank["TP1"]
    assert tp1.pools["swa"].to_dict() == {"total": 1496958, "available": 90000, "evictable": 40000, "line": 10}
    assert tp1.pools["full"].evictable == 250000 and tp1.requests == 2
    assert [e.line for e in tp1.evidence] == [6, 7, 8, 9, 10]
    assert {e.rank for e in tp1.evidence} == {"TP1"}
    assert h.initiator is None  # every rank shows the same batch
    swa = s.pools.pools["swa"] if s.pools else None
    assert swa is not None and swa.state is not None and swa.state.evictable == 40000


def test_the_rank_whose_debug_info_shows_another_batch_is_the_one_that_differs(tmp_path: Path) -> None:
    text = (_debug_block("2026-03-08 12:05:00", "TP0", [RID_A, RID_B], POOLS)
            + _debug_block("2026-03-08 12:05:00", "TP1", [RID_A, RID_B], POOLS)
            + _debug_block("2026-03-08 12:05:00", "TP2", [RID_C], POOLS)
            + _debug_block("2026-03-08 12:05:00", "TP3", [RID_A, RID_B], POOLS)
            + "[2026-03-08 12:05:01 TP0] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)\n")
    h = summarize_file(_write(tmp_path, text)).hang
    assert h is not None and h.initiator is not None
    assert h.initiator.rank == "TP2"
    assert "a batch of 1 requests (first rid c0ffee00" in h.initiator.why
    assert [e.line for e in h.initiator.evidence] == [11, 1]
    majority = next(x for x in h.stuck_on if x.what == "batch")
    assert majority.ranks == ["TP0", "TP1", "TP3"]


def test_a_pool_check_outside_a_debug_block_is_not_the_watchdogs(tmp_path: Path) -> None:
    """043's leak message keeps its pool lines (the exception's message), and a bare pool line
    that follows no debug-info header is no part of a hang."""
    real = (ROOT / "fixtures" / "real" / "043-tp8-ep-pool-leak-valueerror-multiline-msg-bracket-line.log")
    s = summarize_file(real)
    assert "[swa] total=911616" in (s.exceptions[0].message or "")
    text = ("[2026-03-08 12:05:00 TP0] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)\n"
            "[full] total=400000, available=1000, evictable=2000, protected=397000, session_held=0, uncached=0\n")
    h = summarize_file(_write(tmp_path, text)).hang
    assert h is not None and h.debug_info == []


def test_the_scheduler_watchdogs_batch_dump_is_the_watchdog_firing(tmp_path: Path) -> None:
    """scheduler.py's watchdog_thread prints its batch only after its loop broke on a step that
    made no progress (and before 'Watchdog timeout' from v0.4.x on): a window cut before the
    timeout line still shows a hang, with the batch's requests from the lines its message goes
    on with (real-unseen 362's text)."""
    log = tmp_path / "npu.log"
    log.write_text(
        '[2025-11-05 10:18:50] INFO:     127.0.0.1:58100 - "GET /v1/models HTTP/1.1" 200 OK\n'
        "[2025-11-05 10:18:51] self.cur_batch.batch_size()=1\n"
        "self.cur_batch.reqs=[Req(rid=a46bd62c39a042bea6f0361db32078d9, input_ids=[785, 6722], output_ids=[12095])]\n"
        "self.max_total_num_tokens=101632, available_size=101504, evictable_size=0, protected_size=0\n")
    s = summarize_file(log)
    assert s.outcome == "hung" and s.hang is not None
    assert s.hang.timer == "sglang_watchdog" and s.hang.first_line == 2
    batch = [x for x in s.hang.stuck_on if x.what == "batch"]
    assert batch and batch[0].batch_size == 1 and batch[0].rids == ["a46bd62c39a042bea6f0361db32078d9"]
    assert [e.line for e in batch[0].evidence] == [2, 3]
    # the line alone, without the watchdog's batch dump above it, is no hang
    log.write_text("self.max_total_num_tokens=101632, available_size=101504, evictable_size=0, protected_size=0\n")
    assert summarize_file(log).outcome != "hung"


def test_the_parents_sigquit_after_a_watchdog_is_the_hangs_end_not_a_crash(tmp_path: Path) -> None:
    """real-unseen 398 and 401: the scheduler watchdog fired on every rank, then the parent
    noticed the child it ended: the run hung, and no crash (with an exception 'not in this log')
    is made of the notice; where the log shows py-spy missing, the advice to dump with it says so."""
    from logforensics.pipeline import diagnose_files

    log = tmp_path / "hang.log"
    log.write_text("[2025-03-09 00:50:00 TP0] Decode batch. #running-req: 2, #token: 4078, token usage: 0.01, "
                   "gen throughput (token/s): 447.31, #queue-req: 0\n"
                   "[2025-03-09 00:57:10 TP4] Pyspy failed to dump PID 1234. Error: /bin/sh: 1: py-spy: not found\n"
                   "[2025-03-09 00:57:15 TP4] Watchdog timeout (self.watchdog_timeout=300)\n"
                   "[2025-03-09 00:57:16 TP0] Watchdog timeout (self.watchdog_timeout=300)\n"
                   "[2025-03-09 00:57:20] Received sigquit from a child proces. It usually means the child failed.\n")
    s = summarize_file(log)
    assert s.outcome == "hung" and s.crash is None
    d = diagnose_files(str(log), None)
    assert not any("the traceback's exception" in c for c in d.conclusion.collect)
    soft = [c for c in d.conclusion.collect if c.startswith("--soft-watchdog-timeout")]
    assert soft and "the log shows py-spy is not installed where the scheduler runs (line 2)" in soft[0]


def test_the_scheduler_watchdogs_debug_info_is_the_watchdog_firing(tmp_path: Path) -> None:
    """utils/watchdog.py prints '{debug_name} debug info:' only after its loop broke (above): a window
    cut before the timeout line is hung, from the first header, on every rank that printed one, each
    placed in serving by the batch in flight; the batch and its rid are read from the body
    (2026's ``cur_batch_for_debug``, real-unseen 413's text)."""
    body = ("scheduler.cur_batch_for_debug.batch_size()=1\n"
            f"scheduler.cur_batch_for_debug.reqs=[Req(rid={RID_A}, input_ids=array('q', [0, 90, 27791]) ...\n")
    text = (f"[2026-08-04 11:58:42 TP1] Scheduler debug info:\n{body}"
            "[full] total=4974080, available=1024, evictable=4947200, protected=24832, session_held=0, uncached=0\n"
            "\n"
            f"[2026-08-04 11:58:42 TP7] Scheduler debug info:\n{body}")
    s = summarize_file(_write(tmp_path, text))
    assert s.outcome == "hung" and s.hang is not None, s.outcome_reason
    assert s.hang.timer == "sglang_watchdog" and s.hang.first_line == 1 and s.hang.ranks == ["TP1", "TP7"]
    assert s.phase_reached == {"TP1": "serving", "TP7": "serving"}
    [batch] = [x for x in s.hang.stuck_on if x.what == "batch"]
    assert (batch.batch_size, batch.rids, batch.ranks) == (1, [RID_A], ["TP1", "TP7"])
    # the soft watchdog prints the same dump: its timeout line says so, and the server goes on
    soft = (f"[2026-08-04 11:58:42 TP1] Scheduler debug info:\n{body}"
            "[2026-08-04 11:58:42 TP1] Scheduler watchdog timeout (self.watchdog_timeout=60, self.soft=True)\n"
            "[2026-08-04 11:59:00 TP1] Decode batch, #running-req: 1, #token: 245000, token usage: 0.05, "
            "cuda graph: True, gen throughput (token/s): 20.0, #queue-req: 0\n")
    s = summarize_file(_write(tmp_path, soft))
    assert s.outcome == "ready" and s.hang is not None and s.hang.timer == "sglang_soft_watchdog"
    # a header without its batch (a watchdog that fired while the scheduler started) places no rank
    s = summarize_file(_write(tmp_path, "[2026-08-04 11:58:42 TP1] Scheduler debug info:\n"))
    assert s.outcome == "hung" and s.ranks == ["TP1"] and "TP1" not in s.phase_reached


@pytest.mark.parametrize("status", [" (idle)", " (active)", " (active+gil)", " (gil)", ""])
def test_a_pyspy_main_thread_of_native_frames_is_read_in_every_status(tmp_path: Path, status: str) -> None:
    """py-spy prints a thread as 'Thread {id} ({status}): "{name}"' (dump.rs; ' (gil)' or nothing where
    the dump leaves activity out) and, with --native, a native frame as 'func (library)': a main thread
    whose frames are native is a main thread, not one cut off (real-unseen 414's text)."""
    text = ("[2026-01-29 13:12:37 PP1 TP1] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)\n"
            "[2026-01-29 13:12:37 PP2 TP1] Pyspy dump for PID 88693:\n"
            "Process 88693: sglang::scheduler_PP2_TP1\n"
            "Python v3.12.3 (/usr/bin/python3.12)\n"
            "\n"
            f'Thread 88693{status}: "MainThread"\n'
            "    0x7fa2d1487d71 (libc.so.6)\n"
            "    pthread_cond_timedwait (libc.so.6)\n"
            "    gloo::transport::tcp::UnboundBuffer::waitRecv (libtorch_cpu.so)\n"
            "    c10d::ProcessGroupGloo::RecvWork::wait (libtorch_cpu.so)\n")
    h = summarize_file(_write(tmp_path, text)).hang
    assert h is not None
    [dump] = h.pyspy
    assert dump.rank == "PP2 TP1" and dump.threads == 1
    # the first frame that names a function, its library as the place (a native frame has no line)
    assert (dump.main_function, dump.main_location) == ("pthread_cond_timedwait", "libc.so.6")
    assert dump.main_stack[-1] == "c10d::ProcessGroupGloo::RecvWork::wait (libtorch_cpu.so)"
    assert h.stacks is not None and h.stacks.pyspy_main_threads == 1 and h.stacks.missing_why is None


_SCHEDULER_DUMP = ("Process 3438121: sglang::scheduler_DP1_TP1_EP1_PP0\n"
                   "Python v3.12.11 (/usr/bin/python3.12)\n"
                   "\n"
                   'Thread 3438121 (idle): "MainThread"\n'
                   "    send (torch/distributed/distributed_c10d.py:2487)\n"
                   "    send_tensor_dict (distributed/parallel_state.py:1050)\n"
                   "    event_loop_pp_disagg_prefill (prefill.py:819)\n"
                   "    run_scheduler_process (scheduler.py:2618)\n")


def test_a_pyspy_dump_of_a_scheduler_is_a_hang_report(tmp_path: Path) -> None:
    """SGLang's watchdog (or an operator) dumps a stuck scheduler with py-spy: a dump of an
    sglang::scheduler process, its 'Pyspy dump for PID' line cut, is a hang on the rank its title
    names, and its main thread's event loop places that rank in serving (real-unseen 415's text)."""
    s = summarize_file(_write(tmp_path, _SCHEDULER_DUMP))
    assert s.outcome == "hung" and s.hang is not None, s.outcome_reason
    assert s.hang.timer == "pyspy_only" and s.hang.ranks == ["DP1 TP1 EP1 PP0"] and s.hang.first_line == 1
    assert s.ranks == ["DP1 TP1 EP1 PP0"] and s.phase_reached == {"DP1 TP1 EP1 PP0": "serving"}
    # SGLang also dumps before a crash: with a failure in the log, the run crashed
    crash = (_SCHEDULER_DUMP + "[2025-10-29 11:25:58 DP1 TP1 EP1 PP0] Scheduler hit an exception: Traceback "
             "(most recent call last):\n"
             '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2618, in run_scheduler_process\n'
             "    scheduler.event_loop_pp_disagg_prefill()\n"
             "RuntimeError: boom\n")
    assert summarize_file(_write(tmp_path, crash)).outcome == "crashed"
    # and a server that served after the dump was not hung
    served = (_SCHEDULER_DUMP + "[2025-10-29 11:26:00 DP1 TP1 EP1 PP0] Prefill batch, #new-seq: 1, #new-token: 8, "
              "#cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0\n")
    assert summarize_file(_write(tmp_path, served)).outcome != "hung"
    # a dump of another process (no scheduler title, no SGLang header) is no hang report
    other = _SCHEDULER_DUMP.replace("sglang::scheduler_DP1_TP1_EP1_PP0", "python3 bench.py")
    assert summarize_file(_write(tmp_path, other)).outcome != "hung"


def test_a_collective_timeout_with_no_sglang_record_names_no_sglang_setting(tmp_path: Path) -> None:
    """torch's watchdog records alone, in a training framework's worker under Ray (real-unseen
    524): the log does not show whose process group timed out, so SGLang's --dist-timeout is
    not named as the setting that gave it its timeout; with an SGLang record in the log it is."""
    worker = "(WorkerDict pid=835, ip=172.26.143.83) " + TIMEOUT.format(r=38, seq=10) + "\n"
    hang = summarize_file(_write(tmp_path, worker)).hang
    assert hang is not None and hang.timer == "c10d_collective" and hang.setting is None
    assert "not in this log" in hang.note
    served = ("[2025-08-10 02:54:00 TP0] Decode batch, #running-req: 4, #token: 900, token usage: 0.01, "
              "cuda graph: True, gen throughput (token/s): 310.00, #queue-req: 0\n")
    ours = summarize_file(_write(tmp_path, served + TIMEOUT.format(r=0, seq=10) + "\n")).hang
    assert ours is not None and ours.setting == "--dist-timeout"


def test_a_py_spy_dump_of_the_launcher_gives_its_launch_command(tmp_path: Path) -> None:
    """py-spy's dump begins with the process's command line (real-unseen 520): the launcher's is
    the server's launch command, its settings read as a launch command's are; a scheduler's
    title ('sglang::scheduler_TP0') is no command."""
    text = ("Process 544105: python3 -m sglang.launch_server --model-path /app/models/Deepseek-R1/ --tp-size 16 "
            "--nnodes 2 --node-rank 0 --disaggregation-mode decode\n"
            "Python v3.12.12 (/usr/bin/python3.12)\n\n"
            "Process 544360: sglang::scheduler_TP0\n")
    s = summarize_file(_write(tmp_path, text))
    assert s.launch_command is not None and s.launch_command.startswith("python3 -m sglang.launch_server")
    assert s.launch_args["tp_size"] == 16 and s.launch_args["nnodes"] == 2


def test_a_py_spy_session_begins_its_hang_evidence_at_the_launchers_dump(tmp_path: Path) -> None:
    """An operator's py-spy dumps of a hung server (real-unseen 520): the launcher's, then the
    schedulers'; the hang the schedulers' dumps report begins at the first dump of the session."""
    text = ("Process 544105: python3 -m sglang.launch_server --model-path /m --tp-size 2\n"
            "Python v3.12.12 (/usr/bin/python3.12)\n\n"
            'Thread 544105 (idle): "MainThread"\n'
            "    _wait_and_warmup (sglang/srt/entrypoints/http_server.py:1100)\n\n"
            + PYSPY.format(r=0, pid=544360, tid=544360, fn="synchronize", loc="sglang/srt/distributed/device_communicators/pynccl.py:200"))
    s = summarize_file(_write(tmp_path, text))
    assert s.outcome == "hung" and s.hang is not None and s.hang.first_line == 1


def test_a_pd_requests_timeout_in_a_window_that_ends_after_it_is_no_hang(tmp_path: Path) -> None:
    """PD's waiting timeout fails one request and the server goes on (real-unseen 530): a window
    that ends right after the records is no hang, and the ranks that printed them serve."""
    text = "".join(f"[2025-09-03 18:36:43 TP{r} EP{r}] Some requests fail to receive KV Cache transfer done signal "
                   "after bootstrapping. If a greater mean TTFT is acceptable, you can 'export "
                   "SGLANG_DISAGGREGATION_WAITING_TIMEOUT=600' (10 minutes) to relax the timeout condition.\n"
                   for r in (0, 3))
    s = summarize_file(_write(tmp_path, text))
    assert s.outcome != "hung" and s.hang is not None and s.hang.timer == "pd_waiting" and not s.hang.ends_run
    assert s.phase_reached == {"TP0 EP0": "serving", "TP3 EP3": "serving"}


def test_a_py_spy_dump_cut_above_its_header_is_a_schedulers_by_its_frames(tmp_path: Path) -> None:
    """A dump whose 'Process N:' header is above the window (real-unseen 532): a thread in
    run_scheduler_process makes it a scheduler's dump, a hang where nothing follows it, and where
    its main thread's frames are cut, the overlap thread's forward pass places it in serving."""
    text = ("    decorate_context (torch/utils/_contextlib.py:120)\n"
            "    run_scheduler_process (scheduler.py:2612)\n"
            "    <module> (<string>:1)\n"
            'Thread 4113894 (idle): "Thread-2 (forward_thread_func)"\n'
            "    ncclCommWindowRegister (pynccl_wrapper.py:540)\n"
            "    forward_extend (model_runner.py:1847)\n"
            "    forward_batch_generation (tp_worker.py:251)\n"
            "    forward_thread_func_ (tp_worker_overlap_thread.py:175)\n"
            "    forward_thread_func (tp_worker_overlap_thread.py:139)\n")
    s = summarize_file(_write(tmp_path, text))
    assert s.outcome == "hung" and s.hang is not None and s.hang.first_line == 1
    assert s.phase_reached == {"-": "serving"}
