"""The memory pools of a hybrid model, each on its own: size, peak and last use, evictable part.

SGLang gives a hybrid model several pools, each sized at start-up and filled on its own:
a sliding-window model a full-attention pool and a sliding-window (SWA) pool, a
Mamba/linear-attention model a full pool and a pool of Mamba states, HiSparse a device and
a host pool, DeepSeek V4 its SWA and compressed pools. A request needs room in every pool,
so the pool that fills first is the one that bounds admission, while another may still
have room. Every figure here is one the log printed, with the line it came from:

- sizes: ``Use sliding window memory pool. full_layer_tokens=N, swa_layer_tokens=M`` (and
  its ``Post-capture KV sizing:`` twin), ``SWAKVPool mem usage: G GB, swa size: M, full
  size: N``, ``[Full |SWA ]KV Cache is allocated. ... #tokens: N`` (SWAKVPool allocates its
  SWA pool first, then its full pool: two unlabelled lines of one rank before its
  ``SWAKVPool`` line are read in that order, never guessed otherwise), ``Mamba Cache is
  allocated. max_mamba_cache_size: N`` (states, not tokens), ``Initialize
  DeepSeekV4TokenToKVPool with ... swa_size=.. c4_size=.. c128_size=..``;
- use: the per-pool fields of ``Decode batch`` / ``Prefill batch`` (``#full token``,
  ``full token usage``, ``#swa token``, ``swa token usage``, ``mamba num``, ``mamba
  usage``, HiSparse ``#gpu token``/``#cpu token``), peak and last;
- evictable: the per-pool ``[full] total=.., available=.., evictable=..`` lines SGLang's
  invariant checker prints (read from the exception or warning that carries them);
- use over time: each pool's usage in at most ``SERIES_POINTS`` buckets of log lines (the
  highest usage of each bucket and the first line that printed it; ``Series``), so the
  report can draw it however long the log;
- the pool that bound admission at each retraction: the fullest pool on the last batch
  line before it, and how much room the others still had;
- the order of start-up: KV pool allocated before CUDA graphs were captured (SGLang's
  order) or after (``SGLANG_ENABLE_POST_CAPTURE_KV_SIZING``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..events import Event
from .clock import iso, seconds
from .rank import KV_HYBRID
from .registry import handles

if TYPE_CHECKING:
    from .run import RunModel

#: Batch-line fields per pool: (pool, usage field, count field). A line of a model with
#: one pool prints ``token usage``; the pools of a hybrid model print these instead.
BATCH_POOLS: tuple[tuple[str, str, str], ...] = (
    ("full", "full_token_usage", "full_token"),
    ("swa", "swa_token_usage", "swa_token"),
    ("mamba", "mamba_usage", "mamba_num"),
    ("hisparse_gpu", "gpu_token_usage", "gpu_token"),
    ("hisparse_cpu", "cpu_token_usage", "cpu_token"),
)
#: Fields whose presence makes a batch line a hybrid model's (read as an event, not in bulk:
#: ``model.columns`` routes records that carry them to the handlers).
POOL_FIELDS: tuple[str, ...] = tuple(f for _, u, c in BATCH_POOLS for f in (u, c))
_USAGE_FIELDS = tuple(u for _, u, _ in BATCH_POOLS)
_COUNT_FIELDS = tuple(c for _, _, c in BATCH_POOLS)
#: What a pool's size counts.
UNITS = {"mamba": "states"}
#: DeepSeek V4's pools in its ``Initialize ...Pool with`` line: field -> pool.
_DSV4_POOLS = {"swa_size": "swa", "c4_size": "c4", "c128_size": "c128",
               "c4_state_pool_size": "c4_state", "c128_state_pool_size": "c128_state"}
#: The invariant checker's per-pool line: ``[full] total=N, available=N, evictable=N, ...``.
_POOL_STATE = re.compile(r"\[(\w+)\] +total=(\d+), +available=(\d+), +evictable=(\d+)")
#: The unified radix cache's account of its pools in an out-of-memory message
#: (``available_and_evictable_str``): "Available full tokens: 320512 (full_available_size=192 +
#: full_evictable_size_=320320)", "Available swa: 330496 (available_size=4864 +
#: component_evictable_size_=325632)"; the pool's size is not in it.
_POOL_ACCOUNT = re.compile(r"Available (?:(full) tokens|(\w+)): \d+ \((?:full_)?available_size=(\d+) \+ "
                           r"(?:full|component)_evictable_size_=(\d+)\)")
#: A rank's first KV records kept to place its pools (a target's two pools and their total).
MAX_RANK_RECORDS = 4
#: Retractions kept with the pool that bound them (the first ones).
MAX_BINDINGS = 16
POST_CAPTURE_ENV = "SGLANG_ENABLE_POST_CAPTURE_KV_SIZING"
#: Buckets of a pool's use over time kept at most (``Series``): bounds its memory on any log.
SERIES_POINTS = 64


def stamp(ts: str | None) -> str | None:
    """A record's stamp to the second, as the bulk reader's rows give it back (``clock``)."""
    sec = seconds(ts)
    return None if sec is None else iso(sec, bool(ts and ts[4:5] == "-"))


def _better(usage: float, line: int, point: list[Any]) -> bool:
    """Whether (usage, line) replaces a bucket's point: higher usage, or as high and earlier."""
    return usage > point[0] or (usage == point[0] and line < point[1])


@dataclass
class Series:
    """One pool's use over the log: at most ``SERIES_POINTS`` buckets of ``width`` log lines
    (a power of two, doubled as the log grows), each its highest usage and the first line
    that printed it, so the pool's peak is always a point and memory is bounded whatever
    the log's length. The highest of each bucket does not depend on the order lines come
    in, so the series of two parts of a log merge into the whole's (``merge``)."""

    width: int = 1
    #: line // width -> [usage, line, rank, stamp (to the second), count used]
    buckets: dict[int, list[Any]] = field(default_factory=dict)

    def takes(self, line: int, usage: float) -> bool:
        got = self.buckets.get(line // self.width)
        return got is None or _better(usage, line, got)

    def add(self, point: list[Any]) -> None:
        key = point[1] // self.width
        got = self.buckets.get(key)
        if got is None:
            self.buckets[key] = point
            if len(self.buckets) > SERIES_POINTS:
                self._coarsen(self.width * 2)
        elif _better(point[0], point[1], got):
            self.buckets[key] = point

    def _coarsen(self, width: int) -> None:
        while True:
            merged: dict[int, list[Any]] = {}
            for point in self.buckets.values():
                key = point[1] // width
                got = merged.get(key)
                if got is None or _better(point[0], point[1], got):
                    merged[key] = point
            self.width, self.buckets = width, merged
            if len(merged) <= SERIES_POINTS:
                return
            width *= 2

    def merge(self, later: Series) -> None:
        if later.width > self.width:
            self._coarsen(later.width)
        for point in later.buckets.values():
            self.add(point)
        if len(self.buckets) > SERIES_POINTS:
            self._coarsen(self.width * 2)

    def to_dict(self) -> dict[str, Any]:
        return {"lines_per_point": self.width,
                "points": [{"line": line, "usage": u, "used": n, "rank": rank, "ts": ts}
                           for u, line, rank, ts, n in sorted(self.buckets.values(), key=lambda p: p[1])]}


def _where(ev: Event) -> dict[str, Any]:
    return {"file": ev.file, "line": ev.line, "rank": ev.rank, "ts": ev.ts, "text": ev.text}


@dataclass
class Pools:
    """The pools of one run as the log shows them (mutable while observing)."""

    #: pool -> {size, unit, gib, evidence}: the first record that sized it (the target
    #: model's; a draft model's pool is printed after it)
    sizes: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: pool -> {peak, peak_at, last, last_at, peak_used, last_used}
    usage: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: rank -> its first records of the target's KV, in order (``MAX_RANK_RECORDS``): each
    #: {kind: "kv" | "total", label, gib, tokens, where}; placed in pools by ``placed``
    rank_kv: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: the first records of start-up's order: real KV allocation, VA reservation, capture
    first_kv: dict[str, Any] | None = None
    first_va: dict[str, Any] | None = None
    first_capture: dict[str, Any] | None = None
    post_capture: list[dict[str, Any]] = field(default_factory=list)
    #: pool -> (usage, where) of the last batch line that printed it
    current: dict[str, tuple[float, dict[str, Any]]] = field(default_factory=dict)
    #: retractions with the pool that bound them; ``usages`` None until the merge fills it
    bindings: list[dict[str, Any]] = field(default_factory=list)
    bound_by: dict[str, int] = field(default_factory=dict)
    #: pool -> its usage over the log, bucketed (``Series``)
    series: dict[str, Series] = field(default_factory=dict)

    # -- observing -----------------------------------------------------------------------
    def size(self, pool: str, tokens: Any, ev: Event, gib: float | None = None) -> None:
        if tokens is None or pool in self.sizes:
            return
        self.sizes[pool] = {"size": tokens, "unit": UNITS.get(pool, "tokens"), "gib": gib, "evidence": _where(ev)}

    def kv_record(self, rank: str, rec: dict[str, Any]) -> None:
        kept = self.rank_kv.setdefault(rank, [])
        if len(kept) < MAX_RANK_RECORDS:
            kept.append(rec)

    def placed(self, rank: str) -> dict[str, Any] | None:
        """A rank's target KV pools, from its first records: an ``SWAKVPool`` line after two
        unlabelled allocation lines (SWA pool, then full pool, as SWAKVPool allocates them),
        or a ``SWA`` and a ``Full`` labelled line. {gib: {pool: GiB}, total, tokens, where}
        of the record that completes them, or None while they are incomplete."""
        unlabelled: list[dict[str, Any]] = []
        labelled: dict[str, dict[str, Any]] = {}
        for rec in self.rank_kv.get(rank, []):
            if rec["kind"] == "total":
                gib = ({"swa": unlabelled[0]["gib"], "full": unlabelled[1]["gib"]}
                       if len(unlabelled) == 2 else {})
                return {"gib": gib, "total": rec["gib"], "tokens": rec["tokens"], "where": rec["where"]}
            if rec["label"] in ("swa", "full"):
                labelled.setdefault(rec["label"], rec)
                if len(labelled) == 2 and None not in (labelled["swa"]["gib"], labelled["full"]["gib"]):
                    return {"gib": {k: v["gib"] for k, v in labelled.items()},
                            "total": round(labelled["swa"]["gib"] + labelled["full"]["gib"], 4),
                            "tokens": labelled["full"]["tokens"], "where": rec["where"]}
            elif not rec["label"]:
                unlabelled.append(rec)
        return None

    def batch(self, ev: Event, usages: tuple[Any, ...], counts: tuple[Any, ...]) -> None:
        at = None
        for (pool, _, _), u, n in zip(BATCH_POOLS, usages, counts):
            if u is None and n is None:
                continue
            at = at or _where(ev)
            rec = self.usage.get(pool)
            if rec is None:
                rec = self.usage[pool] = {"peak": None, "peak_at": None, "last": None, "last_at": None,
                                          "peak_used": None, "last_used": None}
            if u is not None:
                if rec["peak"] is None or u > rec["peak"]:
                    rec["peak"], rec["peak_at"] = u, at
                rec["last"], rec["last_at"] = u, at
                self.current[pool] = (u, at)
                series = self.series.get(pool)
                if series is None:
                    series = self.series[pool] = Series()
                if series.takes(ev.line, u):
                    series.add([u, ev.line, ev.rank, stamp(ev.ts), n])
            if n is not None:
                if rec["peak_used"] is None or n > rec["peak_used"]:
                    rec["peak_used"] = n
                rec["last_used"] = n

    def retraction(self, ev: Event) -> None:
        if len(self.bindings) >= MAX_BINDINGS and not self.current:
            return
        usages = {p: (u, at) for p, (u, at) in self.current.items()} if self.current else None
        b: dict[str, Any] = {"at": _where(ev), "usages": usages}
        _bind(b)
        pool = b.get("pool")
        if pool:
            self.bound_by[pool] = self.bound_by.get(pool, 0) + 1
        if len(self.bindings) < MAX_BINDINGS:
            self.bindings.append(b)

    def merge(self, later: Pools) -> None:
        """One pass over both parts: sizes and start-up records first seen, use extended
        (peak the larger, last the later's), and a later part's retractions before its first
        batch line bound by the pools this part left current."""
        for pool, s in later.sizes.items():
            self.sizes.setdefault(pool, s)
        for pool, rec in later.usage.items():
            mine = self.usage.get(pool)
            if mine is None:
                self.usage[pool] = rec
                continue
            if rec["peak"] is not None and (mine["peak"] is None or rec["peak"] > mine["peak"]):
                mine["peak"], mine["peak_at"] = rec["peak"], rec["peak_at"]
            if rec["peak_used"] is not None and (mine["peak_used"] is None or rec["peak_used"] > mine["peak_used"]):
                mine["peak_used"] = rec["peak_used"]
            for key in ("last", "last_at", "last_used"):
                if rec[key] is not None:
                    mine[key] = rec[key]
        for rank, items in later.rank_kv.items():
            for rec in items:
                self.kv_record(rank, rec)
        self.first_kv = self.first_kv or later.first_kv
        self.first_va = self.first_va or later.first_va
        self.first_capture = self.first_capture or later.first_capture
        self.post_capture.extend(later.post_capture[:max(0, 8 - len(self.post_capture))])
        for b in later.bindings:
            if b["usages"] is None and self.current:
                b["usages"] = dict(self.current)
                _bind(b)
                if b.get("pool"):
                    later.bound_by[b["pool"]] = later.bound_by.get(b["pool"], 0) + 1
        self.bindings.extend(later.bindings[:max(0, MAX_BINDINGS - len(self.bindings))])
        for pool, n in later.bound_by.items():
            self.bound_by[pool] = self.bound_by.get(pool, 0) + n
        for pool, cur in later.current.items():
            self.current[pool] = cur
        for pool, series in later.series.items():
            mine_s = self.series.get(pool)
            if mine_s is None:
                self.series[pool] = series
            else:
                mine_s.merge(series)


def _bind(b: dict[str, Any]) -> None:
    """The fullest pool of a retraction's usages binds it; the others' room is kept."""
    usages = b.get("usages")
    if not usages:
        return
    pool, (u, at) = max(usages.items(), key=lambda kv: kv[1][0])
    b["pool"], b["usage"], b["usage_at"] = pool, u, at
    b["others"] = {p: v for p, (v, _) in usages.items() if p != pool}


# -- handlers ---------------------------------------------------------------------------
@handles("swa_pool")
def on_swa_pool(m: RunModel, ev: Event) -> None:
    """``Use sliding window memory pool. full_layer_tokens=N, swa_layer_tokens=M``: the two
    pools' sizes (a post-capture resize prints the same figures after capture)."""
    f = ev.fields
    p = m.pools
    if f.get("post_capture"):  # the resize after capture replaces the reserved sizes
        _post_capture(p, ev)
        for key, pool in (("full_layer_tokens", "full"), ("swa_layer_tokens", "swa")):
            if f.get(key) is not None:
                p.sizes.pop(pool, None)
    p.size("full", f.get("full_layer_tokens"), ev)
    p.size("swa", f.get("swa_layer_tokens"), ev)


@handles("swa_kv_pool")
def on_swa_kv_pool(m: RunModel, ev: Event) -> None:
    """``SWAKVPool mem usage: G GB, swa size: M, full size: N``: both sizes and the total;
    the rank's unlabelled allocation lines before it were its SWA pool, then its full pool."""
    f = ev.fields
    p = m.pools
    p.size("full", f.get("full_size"), ev)
    p.size("swa", f.get("swa_size"), ev)
    if f.get("mem_usage_gib") is not None:
        _kv_record(m, ev, {"kind": "total", "label": None, "gib": f["mem_usage_gib"], "tokens": f.get("full_size")})


@handles("mamba_cache_alloc")
def on_mamba_cache_alloc(m: RunModel, ev: Event) -> None:
    """``Mamba Cache is allocated. max_mamba_cache_size: N, conv_state size: ..GB, ...``:
    the pool of Mamba states (N states, one per request or prefix checkpoint)."""
    f = ev.fields
    parts = [f.get(k) for k in ("conv_state_size_gib", "ssm_state_size_gib", "intermediate_ssm_state_cache_size_gib",
                                "intermediate_conv_window_cache_size_gib")]
    gib = round(sum(x for x in parts if x is not None), 4) if any(x is not None for x in parts) else None
    m.pools.size("mamba", f.get("max_mamba_cache_size"), ev, gib)


@handles("kv_pool_init")
def on_kv_pool_init(m: RunModel, ev: Event) -> None:
    """DeepSeek V4's ``Initialize DeepSeekV4TokenToKVPool with swa_size=.. c4_size=..``."""
    f = ev.fields
    for key, pool in _DSV4_POOLS.items():
        m.pools.size(pool, f.get(key), ev)


@handles("pool_check")
def on_pool_check(m: RunModel, ev: Event) -> None:
    """A bare ``[full] total=.., available=.., evictable=..`` line outside a traceback (the watchdog's
    ``Scheduler debug info:`` block, a leak warning's next pools): each pool's state, as the
    exception messages that carry it give it (``summarize``'s ``messages``)."""
    m.notices.add("pool_check", ev)


@handles("post_capture_kv")
def on_post_capture_kv(m: RunModel, ev: Event) -> None:
    _post_capture(m.pools, ev)
    m.notices.add("post_capture_kv", ev)


def _post_capture(p: Pools, ev: Event) -> None:
    if len(p.post_capture) < 8:
        p.post_capture.append(_where(ev))


def on_kv_alloc(m: RunModel, ev: Event) -> None:
    """A ``KV Cache is allocated`` record (from ``startup.on_kv_cache_alloc``): the labelled
    pool's size, or the record kept until the rank's ``SWAKVPool`` line places it; and the
    first real allocation (not a virtual reservation) for the order of start-up."""
    f = ev.fields
    p = m.pools
    if f.get("va_upper_bound"):
        p.first_va = p.first_va or _where(ev)
        return
    p.first_kv = p.first_kv or _where(ev)
    if f.get("post_capture"):
        _post_capture(p, ev)
    if f.get("role") == "draft":
        return
    kv = f.get("kv_gib")
    if kv is None and f.get("k_gib") is not None:
        kv = round(f["k_gib"] + (f.get("v_gib") or 0.0), 4)
    label = (f.get("label") or "").lower()
    if label in ("full", "swa"):
        p.size(label, f.get("tokens"), ev)
    if label in ("full", "swa", ""):
        _kv_record(m, ev, {"kind": "kv", "label": label, "gib": kv, "tokens": f.get("tokens")})


def _kv_record(m: RunModel, ev: Event, rec: dict[str, Any]) -> None:
    rank = ev.rank or "-"
    m.pools.kv_record(rank, dict(rec, where=_where(ev)))
    place_rank(m, rank)


def place_rank(m: RunModel, rank: str) -> None:
    """Once a rank's target pools are placed (``Pools.placed``), its KV is their total (the
    first such: a draft's pools come later) and its KV tokens the full pool's (SGLang's
    max_total_num_tokens); ``rank.merge`` gives ``KV_HYBRID`` precedence over the first
    allocation line. Called again after a merge, where a rank's records span both parts."""
    r = m.timeline.ranks.get(rank)
    if r is None or KV_HYBRID in r.memory:
        return
    placed = m.pools.placed(rank)
    if placed is None or placed["total"] is None:
        return
    w = placed["where"]
    r.memory[KV_HYBRID] = w["line"]
    r.memory["kv_gib"] = placed["total"]
    if placed["tokens"] is not None:
        r.memory["kv_tokens"] = placed["tokens"]
    r.evidence_of("kv_cache_alloc", w["file"], w["line"], w["rank"], w["text"])


def on_capture(m: RunModel, ev: Event) -> None:
    """The first ``Capture ... graph begin`` (from ``startup.on_capture_begin``)."""
    m.pools.first_capture = m.pools.first_capture or _where(ev)


def take_rows(p: Pools, usage: list[Sequence[float]], count: list[Sequence[float]], ints: list[bool],
              where: Callable[[int], dict[str, Any]], lines: Sequence[int],
              point: Callable[[int], tuple[str | None, str | None]]) -> None:
    """The per-pool fields of a segment's batch rows (the bulk reader's), as ``Pools.batch``
    of each row in turn: ``usage[k]`` and ``count[k]`` the columns of ``BATCH_POOLS[k]``
    (NaN: the row has no such field), ``ints[k]`` whether the count is an integer,
    ``where(i)`` row ``i``'s {file, line, rank, ts, text}, ``lines[i]`` its line and
    ``point(i)`` its rank and stamp to the second (``stamp``). Each column is walked once
    (twice with the series); a row's place is made only for the rows a pool's peak or last
    value comes from, and its point only for the highest row of a series' bucket."""
    places: dict[int, dict[str, Any]] = {}

    def at(i: int) -> dict[str, Any]:
        got = places.get(i)
        if got is None:
            got = places[i] = where(i)
        return got

    firsts = []
    for k in range(len(BATCH_POOLS)):
        rows = [f for f in (_first(usage[k]), _first(count[k])) if f >= 0]
        if rows:
            firsts.append((min(rows), k))
    for _, k in sorted(firsts):  # records made in the order their pools first appear
        pool = BATCH_POOLS[k][0]
        rec = p.usage.get(pool)
        if rec is None:
            rec = p.usage[pool] = {"peak": None, "peak_at": None, "last": None, "last_at": None,
                                   "peak_used": None, "last_used": None}
        u = usage[k]
        last = _last(u)
        if last >= 0:
            peak = _peak(u, rec["peak"])
            if peak >= 0:
                rec["peak"], rec["peak_at"] = u[peak], at(peak)
            rec["last"], rec["last_at"] = u[last], at(last)
        n = count[k]
        last = _last(n)
        if last >= 0:
            peak = _peak(n, rec["peak_used"])
            conv = int if ints[k] else float
            if peak >= 0:
                rec["peak_used"] = conv(n[peak])
            rec["last_used"] = conv(n[last])
    # the pools' current use, new ones in the order their first use appears
    for _, k in sorted((f, k) for k in range(len(BATCH_POOLS)) if (f := _first(usage[k])) >= 0):
        pool = BATCH_POOLS[k][0]
        rec = p.usage[pool]
        p.current[pool] = (rec["last"], rec["last_at"])
        series = p.series.get(pool)
        if series is None:
            series = p.series[pool] = Series()
        _series_rows(series, usage[k], count[k], int if ints[k] else float, lines, point)


def _series_rows(series: Series, u: Sequence[float], n: Sequence[float], conv: Callable[[float], Any],
                 lines: Sequence[int], point: Callable[[int], tuple[str | None, str | None]]) -> None:
    """A segment's column into a pool's series: the highest row of each bucket first, then
    those the series takes (the first row of a bucket's highest value, as line by line)."""
    width = series.width
    best: dict[int, int] = {}
    for i, x in enumerate(u):
        if x == x:  # (not NaN)
            key = lines[i] // width
            j = best.get(key)
            if j is None or x > u[j]:
                best[key] = i
    for i in best.values():
        if series.takes(lines[i], u[i]):
            rank, ts = point(i)
            series.add([u[i], lines[i], rank, ts, conv(n[i]) if n[i] == n[i] else None])


def _first(col: Sequence[float]) -> int:
    """The first row with a value (not NaN), or -1."""
    return next((i for i, x in enumerate(col) if x == x), -1)


def _last(col: Sequence[float]) -> int:
    """The last row with a value (not NaN), or -1."""
    for i in range(len(col) - 1, -1, -1):
        if col[i] == col[i]:
            return i
    return -1


def _peak(col: Sequence[float], above: float | None) -> int:
    """The first row of the column's largest value, when that is above ``above``; else -1
    (``Pools.batch``: a later equal value is no new peak)."""
    best, at = (float("-inf") if above is None else above), -1
    for i, x in enumerate(col):
        if x > best:  # (NaN is never)
            best, at = x, i
    return at


def on_batch(m: RunModel, ev: Event) -> None:
    """A batch line (from ``throughput``'s handlers): the per-pool fields, if it has any."""
    f = ev.fields
    if not any(name in f for name in POOL_FIELDS):
        return
    m.pools.batch(ev, tuple(map(f.get, _USAGE_FIELDS)), tuple(map(f.get, _COUNT_FIELDS)))


# -- summary ----------------------------------------------------------------------------
def summarize(p: Pools, env: dict[str, str], env_evidence: list[dict[str, Any]],
              messages: list[tuple[str, dict[str, Any]]]) -> dict[str, Any] | None:
    """The run's pools for the summary, or None when the log shows no pool of its own.

    ``messages``: texts that may carry the invariant checker's per-pool lines (exception
    messages, warnings), each with where it was printed."""
    pools: dict[str, dict[str, Any]] = {}
    gibs: dict[str, tuple[int, float, dict[str, Any]]] = {}
    for rank in p.rank_kv:
        placed = p.placed(rank)
        for pool, value in ((placed or {}).get("gib") or {}).items():
            line = placed["where"]["line"] if placed else 0
            if value is not None and (pool not in gibs or line < gibs[pool][0]):
                gibs[pool] = (line, value, placed["where"] if placed else {})
    for name, s in p.sizes.items():
        pools.setdefault(name, {}).update({"size": s["size"], "unit": s["unit"],
                                           "gib": s.get("gib") if s.get("gib") is not None
                                           else gibs[name][1] if name in gibs else None,
                                           "size_at": _at(s["evidence"])})
    for name, u in p.usage.items():
        rec = pools.setdefault(name, {"unit": UNITS.get(name, "tokens")})
        rec.update({"peak_usage": u["peak"], "peak_at": _at(u["peak_at"]), "last_usage": u["last"],
                    "last_at": _at(u["last_at"]), "peak_used": u["peak_used"], "last_used": u["last_used"]})
    for text, where in messages:
        for name, total, available, evictable in _POOL_STATE.findall(text or ""):
            rec = pools.setdefault(name, {"unit": UNITS.get(name, "tokens")})
            rec.setdefault("size", int(total))
            rec["state"] = {"total": int(total), "available": int(available), "evictable": int(evictable),
                            "at": _at(where)}
        for full, name, available, evictable in _POOL_ACCOUNT.findall(text or ""):
            rec = pools.setdefault(full or name, {"unit": UNITS.get(full or name, "tokens")})
            rec["state"] = {"total": None, "available": int(available), "evictable": int(evictable), "at": _at(where)}
    order = _order(p, env, env_evidence)
    if not pools and order is None:
        return None
    bindings = [{"at": _at(b["at"]), "pool": b.get("pool"), "usage": b.get("usage"),
                 "usage_at": _at(b.get("usage_at")), "others": b.get("others") or {}}
                for b in p.bindings]
    out = {"pools": dict(sorted(pools.items())), "bound_by": dict(sorted(p.bound_by.items())),
           "retractions": bindings, "order": order}
    if p.series:
        out["series"] = {pool: s.to_dict() for pool, s in sorted(p.series.items())}
    return out


def _at(where: dict[str, Any] | None) -> dict[str, Any] | None:
    if not where:
        return None
    return {k: where.get(k) for k in ("file", "line", "rank", "text")}


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def _order(p: Pools, env: dict[str, str], env_evidence: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Which order start-up shows: the KV pool allocated before CUDA graphs were captured
    (SGLang's default) or after them (post-capture sizing), and whether the environment
    asked for post-capture sizing that did not happen."""
    kv, cap = p.first_kv, p.first_capture
    asked = _truthy(env.get(POST_CAPTURE_ENV))
    if kv is None or cap is None:
        if not (asked or p.post_capture or p.first_va):
            return None
        how = None
    else:
        how = "kv_before_graphs" if kv["line"] < cap["line"] else "graphs_before_kv"
    if p.post_capture and (cap is None or any(x["line"] > cap["line"] for x in p.post_capture)):
        how = "graphs_before_kv"
    return {"order": how, "kv_at": _at(kv), "capture_at": _at(cap), "va_at": _at(p.first_va),
            "post_capture_at": [_at(x) for x in p.post_capture[:4]],
            "env_set": asked, "env_at": [_at(e) for e in env_evidence if POST_CAPTURE_ENV in (e.get("text") or "")][:2],
            "fell_back": asked and how == "kv_before_graphs" and not p.post_capture}
