#!/usr/bin/env python3
"""Write a realistic SGLang v0.5.10 serving log of a requested size, for benchmarks.

The output is what ``python -m sglang.launch_server --tp 8 ... 2>&1 | tee server.log``
prints: one start-up of an 8-rank server followed by days of serving, until the file
reaches ``--size``. Every template follows ``sglang-log-formats.md`` (sections 1, 2.2,
2.4 and 2.5), v0.5.10 wording:

* prefix ``[YYYY-MM-DD HH:MM:SS TPn] `` on scheduler ranks (``DPn TPn`` with
  ``--all-ranks``), ``[YYYY-MM-DD HH:MM:SS] `` on the main process, uvicorn's
  ``[ts] INFO:     ...``, and bare Python ``warnings`` lines without a prefix;
* start-up: ``server_args=ServerArgs(...)``, per-rank ``Init torch distributed
  begin./ends.``, ``Load weight begin/end``, the rank-0 checkpoint tqdm bar (in-place
  ``\\r`` updates, so other ranks' lines can land on the bar's physical line),
  ``KV Cache is allocated``, ``Memory pool end``, ``Capture cuda graph begin/bs/end``,
  the rank-0 ``Capturing batches (bs=.. avail_mem=.. GB)`` bar, the TP0
  ``max_total_num_tokens=...`` line, uvicorn start-up, the warm-up requests and
  ``The server is fired up and ready to roll!``;
* serving: ``Prefill batch, ...`` and ``Decode batch, ...`` lines (every 40 decode
  steps) from a small queueing simulation (diurnal load, bursts, reasoning episodes, prefix-cache hits,
  chunked prefill, admission by KV-pool size), uvicorn access lines when requests
  finish, router health checks, and ``KV cache pool is full. Retract requests.``
  warnings under overload. Timestamps advance with the simulated step times.

Pure TP (the default) prints batch statistics on TP0 only, as v0.5.x does. With
``--all-ranks`` the server runs DP attention (dp_size = tp_size) and every rank is a
scheduler with its own batch that prints its own statistics.

The text comes from the templates every generator of the repository shares
(``fixtures/diff/_sglang_text.py``, imported by path): the v0.5.10 records, the
``server_args=`` field list of the v0.5.10 wheel, tqdm's status text. Standard library
only. Memory is constant: lines are written in chunks as they are
made. The output is byte-identical for the same arguments and Python minor version.

    python bench/gen_serving_log.py --size 100M -o bench/serving-100M.log
    python bench/gen_serving_log.py --size 1G -o bench/serving-1G.log
    python bench/gen_serving_log.py --size 100M --all-ranks -o bench/serving-dp-100M.log
"""

from __future__ import annotations

import argparse
import datetime as dt
import heapq
import math
import random
import sys
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "fixtures" / "diff"))
from _sglang_text import (  # noqa: E402  (the templates shared with the fixture generators)
    BAR_FORMAT_V0510,
    DOCKER_TORCH,
    INIT_DIST_BEGIN,
    PYNVML_WARNING,
    SERVER_READY,
    V0510_FIELDS,
    access_line,
    capture_begin_v0510,
    capture_bs_line,
    capture_end_v0510,
    capturing_desc,
    cuda_graph_bs_v0510,
    decode_line_v0510,
    init_dist_end_v0510,
    kv_cache_allocated_v0510,
    load_weight_begin,
    load_weight_end_v0510,
    max_total_tokens_v0510,
    memory_pool_end,
    nccl_version_line,
    prefill_line_v0510,
    retract_line,
    server_args_repr,
    tqdm_meter,
    uvicorn_listening_msgs,
    uvicorn_started_msgs,
    v0510_server_args,
)

GIB = 1 << 30

# Per-model facts used to derive consistent memory figures. kv_heads is the model's
# KV-head count; with pure TP each rank holds max(1, kv_heads // tp) of them, with DP
# attention every rank holds all of them. weight_gib_rank is the local weight size.
MODELS = {
    "llama-70b": dict(
        path="meta-llama/Llama-3.3-70B-Instruct", arch="LlamaForCausalLM", layers=80,
        kv_heads=8, head_dim=128, weight_gib_rank=16.45, shards=30, context_len=131072,
        gpu_total_gib=79.19, cuda_graph_max_bs=256, lam_peak=3.5,
        step_base=0.0095, step_per_req=0.00004, step_per_token=1.2e-8, prefill_tok_s=24000.0,
        in_median=1800.0, out_mean=420.0, max_running=4096,
    ),
    "qwen3-235b": dict(
        path="Qwen/Qwen3-235B-A22B-Instruct-2507", arch="Qwen3MoeForCausalLM", layers=94,
        kv_heads=4, head_dim=128, weight_gib_rank=65.70, shards=118, context_len=262144,
        gpu_total_gib=139.81, cuda_graph_max_bs=128, lam_peak=1.2,
        step_base=0.021, step_per_req=0.00006, step_per_token=4.0e-8, prefill_tok_s=9000.0,
        in_median=2200.0, out_mean=520.0, max_running=2048,
    ),
}

HTTP_ROUTES = ("POST /generate", "POST /v1/chat/completions", "POST /v1/completions")
HTTP_WEIGHTS = (0.60, 0.35, 0.05)

PYNVML = PYNVML_WARNING.format(torch=DOCKER_TORCH)


def parse_size(text: str) -> int:
    """'100M' -> 100 MiB, '1G' -> 1 GiB, '512K', '12345' (bytes). Binary multiples."""
    s = text.strip().upper()
    for suffix in ("IB", "B"):
        if s.endswith(suffix) and len(s) > len(suffix):
            s = s[: -len(suffix)]
            break
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(s[-1:], 1)
    if mult != 1:
        s = s[:-1]
    try:
        value = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (try 100M or 1G)") from None
    if value <= 0:
        raise argparse.ArgumentTypeError("size must be positive")
    return int(value * mult)


# ---------------------------------------------------------------------------- output


class Done(Exception):
    """Raised when the requested size has been written."""


class Out:
    """Buffered byte writer that stops the generator once ``limit`` bytes are out."""

    def __init__(self, stream, limit: int) -> None:
        self.stream = stream
        self.limit = limit
        self.n = 0
        self.buf: list[str] = []

    def write(self, s: str) -> None:
        self.buf.append(s)
        self.n += len(s) if s.isascii() else len(s.encode("utf-8"))
        if len(self.buf) >= 4096:
            self.flush()
        if self.n >= self.limit:
            raise Done

    def flush(self) -> None:
        if self.buf:
            self.stream.write("".join(self.buf).encode("utf-8"))
            self.buf.clear()


class Clock:
    """Simulated seconds since ``start`` rendered as '%Y-%m-%d %H:%M:%S' (cached per second)."""

    def __init__(self, start: dt.datetime) -> None:
        self.start = start
        self._sec = -1
        self._day = -1
        self._date = ""
        self._text = ""
        self.day0 = start.hour * 3600 + start.minute * 60 + start.second

    def stamp(self, t: float) -> str:
        sec = int(t)
        if sec != self._sec:
            self._sec = sec
            tod = self.day0 + sec
            day, tod = divmod(tod, 86400)
            if day != self._day:
                self._day = day
                self._date = (self.start.date() + dt.timedelta(days=day)).isoformat()
            h, rem = divmod(tod, 3600)
            m, s = divmod(rem, 60)
            self._text = f"{self._date} {h:02d}:{m:02d}:{s:02d}"
        return self._text

    def hour_of_day(self, t: float) -> float:
        return ((self.day0 + t) % 86400) / 3600.0


# ---------------------------------------------------------------------------- tqdm


class Tqdm:
    """The text tqdm writes to a pipe: '\\r' + status, padded over the previous status."""

    def __init__(self, total: int, t0: float, checkpoint_format: bool) -> None:
        self.total = total
        self.t0 = t0
        self.ckpt = checkpoint_format
        self.last_len = 0

    def render(self, desc: str, n: int, t: float) -> str:
        elapsed = max(0.0, t - self.t0)
        rate = n / elapsed if n and elapsed > 0 else None  # the overall rate (no smoothing)
        # SGLang's BAR_FORMAT (v0.5.10+: no trailing newline), or tqdm's default format,
        # meter width 10 when not on a terminal
        s = tqdm_meter(desc, n, self.total, elapsed, rate, BAR_FORMAT_V0510 if self.ckpt else None)
        pad = " " * max(self.last_len - len(s), 0)
        self.last_len = len(s)
        return "\r" + s + pad


# ---------------------------------------------------------------------------- generator


class Scheduler:
    __slots__ = ("tag", "running", "tokens", "queue", "awake", "last_decode_t",
                 "last_prefill_t", "last_prefill_tokens", "ratio")

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.running = 0
        self.tokens = 0  # KV tokens in use (running requests' prompts + outputs)
        self.queue: deque[list] = deque()  # [input, cached, prefilled so far, stream, route]
        self.awake = False
        self.last_decode_t = 0.0
        self.last_prefill_t = 0.0
        self.last_prefill_tokens = 0
        self.ratio = 0.7  # new_token_ratio


LINE, WAKE, ARRIVAL, HEALTH, EPISODE = range(5)

#: The router in front of the server holds back requests once this many wait in a
#: scheduler's queue (they never reach the server, so they leave no line).
QUEUE_CAP = 400


class Generator:
    def __init__(self, args: argparse.Namespace, out: Out) -> None:
        self.args = args
        self.out = out
        self.rng = random.Random(args.seed)
        self.clock = Clock(dt.datetime.fromisoformat(args.start))
        self.tp = args.tp
        self.dp_attention = args.all_ranks
        model_key = args.model or ("qwen3-235b" if self.dp_attention else "llama-70b")
        self.m = MODELS[model_key]
        if self.dp_attention:
            self.tags = [f"DP{r} TP{r}" for r in range(self.tp)]
        else:
            self.tags = [f"TP{r}" for r in range(self.tp)]
        self.heap: list[tuple] = []
        self.seq = 0
        self.ports = [self.rng.randrange(33000, 60999) for _ in range(64)]

    # -- low-level emitters -------------------------------------------------
    def line(self, t: float, tag: str | None, msg: str) -> None:
        ts = self.clock.stamp(t)
        if tag is None:
            self.out.write(f"[{ts}] {msg}\n")
        else:
            self.out.write(f"[{ts} {tag}] {msg}\n")

    def access(self, t: float, request: str, status: str = "200 OK") -> None:
        self.out.write(f"[{self.clock.stamp(t)}] INFO:     "
                       f"{access_line(f'127.0.0.1:{self.port()}', request, status)}\n")

    def port(self) -> int:
        # the router keeps a pool of keep-alive connections; one is replaced now and then
        i = self.rng.randrange(len(self.ports))
        if self.rng.random() < 0.01:
            self.ports[i] = self.rng.randrange(33000, 60999)
        return self.ports[i]

    def push(self, t: float, kind: int, a=None, b=None) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, a, b))

    # -- start-up -----------------------------------------------------------
    def server_args(self) -> str:
        m = self.m
        gpu_mib = m["gpu_total_gib"] * 1024
        reserved = 512 + 8192 * 1.5 + m["cuda_graph_max_bs"] * 2 + self.tp / 8 * 1024
        self.mem_fraction = round((gpu_mib - reserved) / gpu_mib, 3)
        bs = cuda_graph_bs_v0510(m["cuda_graph_max_bs"])
        self.capture_bs = bs
        values = v0510_server_args(
            m["path"], tp=self.tp, f=self.mem_fraction, chunked=8192, max_bs=m["cuda_graph_max_bs"],
            attention_backend="fa3", seed=self.rng.randrange(10**9), host="0.0.0.0",
            dp_size=self.tp if self.dp_attention else 1, enable_dp_attention=self.dp_attention)
        assert values["cuda_graph_bs"] == bs
        return "server_args=" + server_args_repr(V0510_FIELDS, values)

    def startup(self) -> float:
        """Write the start-up; return the time the server became ready."""
        r, m, tp = self.rng, self.m, self.tp
        ev: list[tuple[float, int, str | None, str | None]] = []  # (t, order, tag, text)
        # tag None + text ending in "\n" or starting with "\r": raw text; else a logged line

        def log(t: float, tag: str | None, msg: str) -> None:
            ev.append((t, len(ev), tag, msg))

        def raw(t: float, text: str) -> None:
            ev.append((t, len(ev), "", text))

        raw(0.0, PYNVML)
        log(0.4, None, self.server_args())
        t_sched = [2.6 + r.uniform(0, 0.8) for _ in range(tp)]
        for rank in range(tp):
            raw(t_sched[rank], PYNVML)
        # distributed init: begin per rank, end together (it is a collective)
        t_ib = [t_sched[k] + r.uniform(2.0, 3.0) for k in range(tp)]
        for k in range(tp):
            log(t_ib[k], self.tags[k], INIT_DIST_BEGIN)
        t_sync = max(t_ib) + r.uniform(2.5, 6.0)
        log(max(t_ib) + r.uniform(0.5, 1.5), self.tags[0], nccl_version_line("2.27.3"))
        free0 = [m["gpu_total_gib"] - r.uniform(0.55, 0.62) for _ in range(tp)]
        init_use = [r.uniform(0.55, 0.72) for _ in range(tp)]
        p_local = [free0[k] - init_use[k] for k in range(tp)]
        t_ie = [t_sync + r.uniform(0, 0.05) for _ in range(tp)]
        for k in range(tp):
            log(t_ie[k], self.tags[k], init_dist_end_v0510(t_ie[k] - t_ib[k], init_use[k]))
        # weights
        t_lb = [t_ie[k] + r.uniform(0.1, 0.4) for k in range(tp)]
        for k in range(tp):
            log(t_lb[k], self.tags[k], load_weight_begin(p_local[k]))
        shards = m["shards"]
        per_shard = r.uniform(0.9, 1.4) * m["weight_gib_rank"] / shards * 8 / 4.0
        bar = Tqdm(shards, t_lb[0] + 0.3, checkpoint_format=True)
        t = bar.t0
        desc = "Loading safetensors checkpoint shards"
        raw(t, bar.render(desc, 0, t))
        for n in range(1, shards + 1):
            t += per_shard * r.uniform(0.8, 1.2)
            raw(t, bar.render(desc, n, t))
        raw(t + 0.001, bar.render(desc, shards, t + 0.001) + "\n")  # close(): final refresh + newline
        load_span = t - t_lb[0] + 0.4
        weights = [m["weight_gib_rank"] + r.uniform(-0.004, 0.004) for _ in range(tp)]
        a_local = [p_local[k] - weights[k] for k in range(tp)]
        t_le = [t_lb[k] + load_span * (r.uniform(0.96, 1.03) if k else 1.0) for k in range(tp)]
        for k in range(tp):
            log(t_le[k], self.tags[k], load_weight_end_v0510(t_le[k] - t_lb[k], m["arch"], a_local[k], weights[k]))
        # KV pool, sized from the MIN-reduced figures (section 3.3)
        heads = m["kv_heads"] if self.dp_attention else max(1, m["kv_heads"] // tp)
        cell = heads * m["head_dim"] * m["layers"] * 2 * 2
        rest = min(a_local) - min(p_local) * (1 - self.mem_fraction)
        self.max_tokens = int(rest * GIB) // cell
        half_gib = self.max_tokens * cell / 2 / GIB
        ctx = m["context_len"]
        max_reqs = min(max(2048, min(4096, int(self.max_tokens / ctx * 512))), self.max_tokens // 2)
        self.max_running = min(max_reqs, m["max_running"])
        req_pool_gib = (max_reqs + 1) * (ctx + 4) * 4 / GIB
        t_kv = max(t_le) + r.uniform(0.3, 0.8)
        pool_end = []
        for k in range(tp):
            tk = t_kv + r.uniform(0, 0.05)
            log(tk, self.tags[k], kv_cache_allocated_v0510(self.max_tokens, half_gib, half_gib))
            pool_end.append(a_local[k] - 2 * half_gib - req_pool_gib - r.uniform(0.02, 0.06))
            log(tk + r.uniform(0.05, 0.2), self.tags[k], memory_pool_end(pool_end[k]))
        # CUDA graphs: begin on every rank, the bs list and the bar on rank 0
        t_cb = [t_kv + r.uniform(0.4, 0.7) for _ in range(tp)]
        cap_begin = [pool_end[k] - r.uniform(0.0, 0.02) for k in range(tp)]
        for k in range(tp):
            log(t_cb[k], self.tags[k], capture_begin_v0510(cap_begin[k]))
        log(t_cb[0] + 0.01, self.tags[0], capture_bs_line(self.capture_bs))
        graph_gib = r.uniform(0.45, 0.75) if not self.dp_attention else r.uniform(0.9, 1.4)
        order = list(reversed(self.capture_bs))
        cbar = Tqdm(len(order), t_cb[0] + 0.2, checkpoint_format=False)
        t = cbar.t0
        raw(t, cbar.render("", 0, t))
        per_bs = r.uniform(0.35, 0.7) if not self.dp_attention else r.uniform(0.8, 1.3)
        for i, bs in enumerate(order):
            avail = cap_begin[0] - graph_gib * i / len(order)
            desc = capturing_desc(bs, avail)
            raw(t, cbar.render(desc, i, t))
            t += per_bs * r.uniform(0.8, 1.2)
            raw(t, cbar.render(desc, i + 1, t))
        raw(t + 0.001, cbar.render(desc, len(order), t + 0.001) + "\n")
        t_ce = t + r.uniform(0.1, 0.3)
        cap_end = []
        for k in range(tp):
            use = graph_gib + r.uniform(-0.01, 0.01)
            cap_end.append(cap_begin[k] - use)
            tk = t_ce + r.uniform(0, 0.05)
            log(tk, self.tags[k], capture_end_v0510(tk - t_cb[k], use, cap_end[k]))
        t = t_ce + r.uniform(0.4, 1.0)
        log(t, self.tags[0], max_total_tokens_v0510(self.max_tokens, 8192, self.max_running, ctx, cap_end[0] - 0.01))
        # main process: uvicorn, warm-up, ready
        pid = r.randrange(200, 4_000_000)
        t += r.uniform(1.5, 3.0)
        for msg in (*uvicorn_started_msgs(pid), *uvicorn_listening_msgs("0.0.0.0", 30000)):
            log(t, None, "INFO:     " + msg)
            t += r.uniform(0.0, 0.02)
        t += r.uniform(0.8, 1.2)
        log(t, None, "INFO:     " + access_line(f"127.0.0.1:{r.randrange(33000, 60999)}", "GET /model_info"))
        t += r.uniform(0.1, 0.3)
        log(t, self.tags[0], prefill_line_v0510(1, 6, 0, 0.0, 0, 0, False, 0.0))
        t += r.uniform(0.4, 1.2)
        log(t, None, "INFO:     " + access_line(f"127.0.0.1:{r.randrange(33000, 60999)}", "POST /generate"))
        t += r.uniform(0.01, 0.05)
        log(t, None, SERVER_READY)

        ev.sort(key=lambda e: (e[0], e[1]))
        for t, _, tag, text in ev:
            if tag == "":
                self.out.write(text)
            else:
                self.line(t, tag, text)
        return t

    # -- serving --------------------------------------------------------------
    def load(self, t: float) -> float:
        """Arrival rate (requests/s) for one scheduler: a diurnal curve times the episode."""
        hour = self.clock.hour_of_day(t)
        day = 0.5 - 0.5 * math.cos(2 * math.pi * (hour - 4.0) / 24.0)  # low at 04:00, peak 16:00
        return self.m["lam_peak"] * (0.12 + 0.88 * day) * self.lam_mult

    def set_workload(self, kind: str) -> None:
        """'chat' (default), 'burst' (more requests) or 'reasoning' (few, very long outputs
        with a large max_new_tokens: this is what fills the KV pool and causes retraction)."""
        r, m = self.rng, self.m
        self.lam_mult, out_mean, self.max_new = 1.0, m["out_mean"], 2048
        if kind == "burst":
            self.lam_mult = r.uniform(1.5, 2.2)
        elif kind == "reasoning":
            self.lam_mult, out_mean, self.max_new = r.uniform(0.4, 0.6), m["out_mean"] * r.uniform(10, 20), 16384
        self.p40 = 1.0 - (1.0 - 1.0 / out_mean) ** 40  # P(a request finishes within 40 steps)

    def episode(self, t: float, start: bool) -> None:
        r = self.rng
        if start:
            kind = "burst" if r.random() < 0.5 else "reasoning"
            self.set_workload(kind)
            self.push(t + (r.uniform(300, 1200) if kind == "burst" else r.uniform(1200, 3600)), EPISODE, False)
        else:
            self.set_workload("chat")
            self.push(t + r.expovariate(1 / 14400), EPISODE, True)

    def serve(self, t0: float) -> None:
        r = self.rng
        n_sched = self.tp if self.dp_attention else 1
        self.scheds = [Scheduler(self.tags[k]) for k in range(n_sched)]
        self.set_workload("chat")
        self.rr = 0
        for s in self.scheds:
            s.last_decode_t = s.last_prefill_t = t0
        self.push(t0 + r.uniform(5, 60), ARRIVAL)
        self.push(t0 + r.uniform(1, 30), HEALTH)
        self.push(t0 + r.expovariate(1 / 14400), EPISODE, True)
        heap, pop, line = self.heap, heapq.heappop, self.line
        while True:
            t, _, kind, a, b = pop(heap)
            if kind == LINE:
                if a is None:  # main-process access line (b = route index or (route, status))
                    if b.__class__ is int:
                        self.access(t, HTTP_ROUTES[b])
                    else:
                        self.access(t, b[0], b[1])
                else:
                    line(t, a, b)
            elif kind == WAKE:
                self.cycle(t, self.scheds[a], a)
            elif kind == ARRIVAL:
                self.arrival(t)
            elif kind == HEALTH:
                self.access(t, "GET /health")
                self.push(t + r.uniform(29.5, 30.5), HEALTH)
            else:
                self.episode(t, a)

    def arrival(self, t: float) -> None:
        r, m = self.rng, self.m
        n_sched = len(self.scheds)
        lam = self.load(t) * n_sched
        self.push(t + r.expovariate(lam), ARRIVAL)
        route = 0 if r.random() < HTTP_WEIGHTS[0] else (1 if r.random() < 0.875 else 2)
        if r.random() < 0.0015:  # rejected by validation in the tokenizer manager
            self.push(t + r.uniform(0.002, 0.02), LINE, None, (HTTP_ROUTES[route], "400 Bad Request"))
            return
        k = self.rr
        self.rr = (k + 1) % n_sched
        s = self.scheds[k]
        if len(s.queue) >= QUEUE_CAP:
            return
        inp = min(int(r.lognormvariate(math.log(m["in_median"]), 1.0)) + 8, m["context_len"] // 2)
        cached = int(inp * r.uniform(0.3, 0.95)) if r.random() < 0.55 else 0
        s.queue.append([inp, cached, 0, r.random() < 0.3, route])
        if not s.awake:
            s.awake = True
            self.push(t + r.uniform(0.002, 0.015), WAKE, k)

    def cycle(self, t: float, s: Scheduler, k: int) -> None:
        """One scheduler round: prefill what fits, then 40 decode steps and the decode log."""
        r, m = self.rng, self.m
        max_tokens = self.max_tokens
        # -- prefill: up to 4 batches of at most chunked_prefill_size new tokens
        limit = max_tokens * 0.98
        for _ in range(4):
            budget = 8192
            n_seq = admitted = new = cached_sum = 0
            while s.queue and s.running + admitted < self.max_running:
                req = s.queue[0]  # [input, cached, prefilled so far, stream, route]
                inp, cached, done, stream, route = req
                first = done == 0
                need = inp - cached - done
                # future decode tokens, estimated as SGLang does: ratio x remaining, clipped at 4096
                reserve = (s.running + admitted + 1) * s.ratio * min(self.max_new * 0.9, 4096)
                if s.running + admitted > 0 and s.tokens + need + (cached if first else 0) + reserve > limit:
                    break  # not enough KV room: the request waits
                if need > budget:
                    if n_seq == 0:  # chunked prefill: one slice of a long prompt
                        req[2] = done + budget
                        n_seq, new = 1, budget
                        cached_sum = cached if first else 0
                        s.tokens += budget + cached_sum
                    break
                s.queue.popleft()
                n_seq += 1
                admitted += 1
                new += need
                c = cached if first else 0
                cached_sum += c
                s.tokens += need + c
                budget -= need
                if stream:  # a streaming response's access line is written when it starts
                    self.push(t + r.uniform(0.05, 0.3), LINE, None, route)
                if budget < 64:
                    break
            if n_seq == 0:
                break
            thr = s.last_prefill_tokens / max(t - s.last_prefill_t, 1e-3)
            self.push(t, LINE, s.tag, prefill_line_v0510(n_seq, new, cached_sum, s.tokens / max_tokens, s.running,
                                                         len(s.queue), False, thr))
            s.last_prefill_t = t
            s.last_prefill_tokens = new
            s.running += admitted
            t += new / m["prefill_tok_s"] + 0.004
        if s.running == 0:
            s.ratio = 0.7
            if s.queue:
                self.push(t + 0.001, WAKE, k)
            else:
                s.awake = False
            return
        # -- retraction: the next 40 decode steps would overflow the pool, or (standing in for
        # what is not modelled: page fragmentation, locked radix-cache nodes) the pool is
        # nearly full and a decode step finds no free slot
        deficit = s.tokens + 40 * s.running - max_tokens
        usage = s.tokens / max_tokens
        if s.running > 1 and (deficit > 0 or (usage > 0.92 and r.random() < (usage - 0.92) * 2.5)):
            per = s.tokens // s.running
            n_ret = min(s.running - 1, max(deficit // per + 1, int(s.running * r.uniform(0.02, 0.08)) + 1))
            gained = n_ret * per
            old = s.ratio
            s.ratio = min(1.0, old + r.uniform(0.15, 0.45))
            msg = retract_line(n_ret, gained, old, s.ratio)
            for tag in ([s.tag] if self.dp_attention else self.tags):  # pure TP: every rank decides the same
                self.push(t + r.uniform(0, 0.004), LINE, tag, msg)
            s.running -= n_ret
            s.tokens -= gained
            for _ in range(n_ret):
                s.queue.appendleft([per, 0, 0, False, 0])
        # -- 40 decode steps
        run = s.running
        step = m["step_base"] + m["step_per_req"] * run + m["step_per_token"] * s.tokens
        span = 40 * step * r.uniform(0.97, 1.05)
        t_end = t + span
        s.tokens = min(max_tokens, s.tokens + 40 * run)
        s.ratio = max(0.098, s.ratio - 0.04)
        done = self.binom(run, self.p40)
        for _ in range(done):
            if r.random() < 0.7:  # non-streaming responses are logged when they finish
                route = 0 if r.random() < HTTP_WEIGHTS[0] else (1 if r.random() < 0.875 else 2)
                self.push(t + r.random() * span, LINE, None, route)
        gen = 40 * run / max(t_end - s.last_decode_t, 1e-3)
        self.push(t_end, LINE, s.tag, decode_line_v0510(run, s.tokens, s.tokens / max_tokens,
                                                        run <= m["cuda_graph_max_bs"], gen, len(s.queue)))
        s.last_decode_t = t_end
        if done:
            s.tokens -= done * s.tokens // run
            s.running = run - done
        self.push(t_end + 0.0005, WAKE, k)

    def binom(self, n: int, p: float) -> int:
        r = self.rng
        if n < 40:
            return sum(1 for _ in range(n) if r.random() < p)
        mu = n * p
        x = int(round(r.gauss(mu, math.sqrt(mu * (1 - p)))))
        return 0 if x < 0 else (n if x > n else x)

    def run(self) -> None:
        try:
            t_ready = self.startup()
            self.serve(t_ready + self.rng.uniform(5, 90))
        except Done:
            pass
        self.out.flush()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=parse_size, default=parse_size("100M"),
                   help="stop once this many bytes are written (ends on a line boundary); "
                        "binary multiples: 100M = 100 MiB, 1G = 1 GiB (default 100M)")
    p.add_argument("-o", "--output", default="-", help="output file, '-' for stdout (default)")
    p.add_argument("--seed", type=int, default=510, help="random seed (default 510)")
    p.add_argument("--tp", type=int, default=8, help="ranks (default 8)")
    p.add_argument("--all-ranks", action="store_true",
                   help="DP-attention style: dp_size = tp_size, every rank prints its own batch lines "
                        "with a 'DPn TPn' prefix (default: pure TP, batch lines on TP0 only)")
    p.add_argument("--model", choices=sorted(MODELS),
                   help="model preset (default llama-70b on 8x80 GiB; qwen3-235b on 8x140 GiB "
                        "with --all-ranks)")
    p.add_argument("--start", default="2026-03-02 08:41:17", help="wall-clock time of the first line")
    args = p.parse_args(argv)
    if args.tp < 2:
        p.error("--tp must be at least 2")
    if args.output == "-":
        out = Out(sys.stdout.buffer, args.size)
        Generator(args, out).run()
        sys.stdout.buffer.flush()
    else:
        with open(args.output, "wb") as f:
            Generator(args, Out(f, args.size)).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
