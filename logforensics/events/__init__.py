"""Typed events: what one record of an SGLang log means.

An :class:`Event` is immutable and cheap. It is a ``NamedTuple`` rather than a frozen
dataclass because a serving log holds millions of ``Decode batch`` records and tuple
construction is several times cheaper; it is still typed, immutable and
field-addressable. Every event keeps its provenance: the file, the 1-based physical
line number (as ``grep -n`` counts), the rank label as SGLang printed it and the
timestamp.

Field names carry their units: ``avail_gib`` (SGLang's "GB" is GiB, bytes / 2**30),
``elapsed_s``, ``gen_throughput_tok_s``.

Which fields each kind has, and each field's one type, is the event schema
(:mod:`.schema`, derived from the reader's declarations); :func:`.batch.to_batch` turns one
kind's events into an Arrow batch of that schema. Neither is imported here: reading a log
needs no pyarrow.

``node`` names the machine the record came from when a run spans several (``node1``, a
pod name, a Ray worker's IP): from the file name, the launch line, or a wrapper that
another tool put in front of the line. None when nothing names it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

#: Start-up phases in the order a scheduler rank goes through them.
PHASES: tuple[str, ...] = (
    "init_distributed",
    "load_weights",
    "kv_cache_alloc",
    "cuda_graph_capture",
    "warmup",
    "serving",
)

#: The launcher's own phase before any rank started: it parses and checks the server
#: arguments (``prepare_server_args``, ``ServerArgs.__post_init__``, ``check_server_args``).
#: A crash can be in it; no rank goes through it, so it is not one of :data:`PHASES`.
LAUNCH = "launch"

#: Event kinds that open a phase on the rank that printed them.
PHASE_OF_KIND: dict[str, str] = {
    "init_dist_begin": "init_distributed",
    "init_dist_end": "init_distributed",
    "nccl_version": "init_distributed",
    "custom_ar_disabled": "init_distributed",
    "gloo_connected": "init_distributed",
    "gloo_not_connected": "init_distributed",
    "load_weight_begin": "load_weights",
    "load_weight_end": "load_weights",
    # "Using FP8 KV cache but no scaling factors provided. ...": the KV scales set after loading
    "kv_scale_default": "load_weights",
    # the FP8 quantization's config, made while the model is built (after "Load weight begin")
    "fp8_checkpoint": "load_weights",
    # a model's load_weights skipping a checkpoint tensor it has no parameter for
    "param_not_loaded": "load_weights",
    "params_not_initialized": "load_weights",
    "jax_weights_loaded": "load_weights",
    "jax_kv_tokens": "kv_cache_alloc",
    "jax_kv_buffers": "kv_cache_alloc",
    "kv_cache_alloc": "kv_cache_alloc",
    "mamba_cache_alloc": "kv_cache_alloc",
    "swa_kv_pool": "kv_cache_alloc",
    "memory_pool_end": "kv_cache_alloc",
    "kv_budget_reserve": "kv_cache_alloc",
    "max_total_tokens_cap": "kv_cache_alloc",
    "host_kv_pool": "kv_cache_alloc",
    "capture_begin": "cuda_graph_capture",
    "capture_bs": "cuda_graph_capture",
    "capture_progress": "cuda_graph_capture",
    "capture_end": "cuda_graph_capture",
    "capture_registered": "cuda_graph_capture",
    "jax_precompile": "cuda_graph_capture",
    "max_total_tokens": "warmup",
    "prefill_batch": "serving",
    "decode_batch": "serving",
    # the scheduler watchdog's dump of the batch in flight ("self.cur_batch.batch_size()=N, ...")
    "watchdog_detail": "serving",
    # "KV cache pool is full. Retract requests.": requests of a decode batch taken back
    "retract": "serving",
    # "Detected errors during sampling! NaN in the logits.": the sampler's check of a forward pass
    "sampling_nan": "serving",
    # "Prefill transfer failed for request rank=4 ...": one request of a PD server failing, and
    # "Some requests fail to receive KV Cache transfer done signal ...": its queue's timers
    # "Cache flushed successfully!" / "Cache not flushed because there are pending requests.": the
    # scheduler answering a flush of its caches, which only a running server receives
    "cache_flush": "serving",
    "kv_transfer_failed": "serving",
    "pd_timeout": "serving",
}


#: Kinds that SGLang may print after the next phase's first record: HiCache's host pool is
#: allocated in the scheduler's cache set-up, after its ``max_total_num_tokens=...`` line; a
#: speculative decoding's draft model loads its weights after the target model's KV pool and
#: graphs (its ``Load weight begin/end`` on the same rank). They place a rank in their phase only
#: where it is not past it already (never a step back; a restart steps back at its own
#: ``Init torch distributed begin``).
PLACE_IF_NOT_PAST: frozenset[str] = frozenset({"host_kv_pool", "load_weight_begin", "load_weight_end"})


class Event(NamedTuple):
    """One record of a log, typed by ``kind``.

    ``fields`` holds the record's own values, unit-suffixed, as a read-only mapping: for
    a parsed record a ``grammar.Fields``, which converts a value when it is read (most
    values of a serving log are never read); for an assembled traceback a dict. ``text``
    is the record's text as read (after wrappers such as docker-compose prefixes were
    removed), so a finding can quote its evidence. ``end_line`` is set for records
    assembled from several physical lines (tracebacks); otherwise it equals ``line``.
    """

    kind: str
    line: int
    rank: str | None
    ts: str | None
    fields: Mapping[str, Any]
    text: str
    file: str | None = None
    end_line: int | None = None
    node: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of ``parse --format jsonl``: provenance first, then fields."""
        out: dict[str, Any] = {
            "kind": self.kind,
            "rank": self.rank,
            "ts": self.ts,
            "file": self.file,
            "line": self.line,
        }
        if self.node is not None:
            out["node"] = self.node
        if self.end_line is not None and self.end_line != self.line:
            out["end_line"] = self.end_line
        for key, value in self.fields.items():
            if key not in out:
                out[key] = value
        out["text"] = self.text
        return out
