"""The store's tables: Arrow schemas, one per table, and the schema version.

Every part file of a table is written with its table's schema, so a column that is
null in one scan still has its type, and readers that merge files (DuckDB, Spark,
Trino, pandas) see one schema. ``docs/fleet.md`` describes every column; a change to a
schema that is not a new nullable column at the end raises ``SCHEMA_VERSION``.
"""

from __future__ import annotations

import pyarrow as pa

#: Version of the store's layout and schemas, kept in ``_meta/store.json``.
SCHEMA_VERSION = 1

#: The tables, each a directory of Hive-style partitions ``scan_date=YYYY-MM-DD``.
TABLES = ("runs", "ranks", "findings", "events", "summaries", "environments")

#: The partition column (in directory names, not inside the files).
PARTITION = "scan_date"

_s, _i, _f, _b = pa.string(), pa.int64(), pa.float64(), pa.bool_()
_t = pa.timestamp("us")

RUNS = pa.schema([
    ("run_id", _s), ("source", _s), ("files", pa.list_(_s)), ("nodes", pa.list_(_s)),
    ("outcome", _s), ("outcome_reason", _s), ("first_rank", _s), ("crash_phase", _s),
    ("exception", _s), ("fingerprint", _s), ("fingerprint_exception", _s), ("fingerprint_function", _s),
    ("crash_node", _s), ("crash_file", _s), ("crash_line", _i),
    ("sglang_version", _s), ("model", _s),
    ("tp_size", _i), ("dp_size", _i), ("pp_size", _i), ("ep_size", _i),
    ("gpu_device", _s), ("gpu_total_gib", _f),
    ("settings_hash", _s), ("settings", _s),
    ("start_time", _t), ("end_time", _t), ("file_mtime", _t),
    ("lines", _i), ("bytes", _i), ("events", _i), ("lines_unrecognised", _i), ("recognised_pct", _f),
    ("ranks_seen", _i), ("missing_ranks", pa.list_(_s)), ("decode_tok_s_median", _f),
])

#: Per-rank figures copied from the summary's ``memory`` (GiB, seconds, tokens).
RANK_FIGURES: tuple[tuple[str, pa.DataType], ...] = (
    ("load_begin_avail_gib", _f), ("weights_gib", _f), ("load_end_avail_gib", _f), ("load_elapsed_s", _f),
    ("kv_tokens", _i), ("kv_gib", _f), ("pool_end_avail_gib", _f), ("capture_begin_avail_gib", _f),
    ("capture_mem_gib", _f), ("capture_end_avail_gib", _f), ("capture_elapsed_s", _f),
    ("max_total_num_tokens", _i),
)

RANKS = pa.schema([
    ("run_id", _s), ("node", _s), ("file", _s), ("rank", _s), ("phase_reached", _s), ("milestone", _s),
    ("last_line", _i), ("last_ts", _s), ("crashed", _b),
    *RANK_FIGURES,
    ("decode_tok_s_median", _f), ("decode_batches", _i),
])

FINDINGS = pa.schema([
    ("run_id", _s), ("baseline_run_id", _s), ("baseline_source", _s), ("rule", _s), ("name", _s),
    ("severity", _s), ("title", _s), ("explanation", _s), ("evidence", _s), ("verdict", _s),
])

#: Numeric event fields given their own typed column (every field is also in ``fields``).
EVENT_NUMBERS = ("avail_gib", "mem_usage_gib", "elapsed_s", "gen_throughput_tok_s", "input_throughput_tok_s",
                 "running_req", "queue_req", "token_usage", "new_token", "cached_token", "tokens")

EVENTS = pa.schema([
    ("run_id", _s), ("node", _s), ("file", _s), ("line", _i), ("end_line", _i), ("rank", _s), ("ts", _s),
    ("kind", _s), *[(n, _f) for n in EVENT_NUMBERS], ("fields", _s), ("text", _s),
])

SUMMARIES = pa.schema([("run_id", _s), ("summary", _s)])

#: One row per run with an environment beside its logs (``artefacts.environment``): each
#: fact in its own column (``gpu_count`` a number), ``provenance`` the file:line of each.
ENV_COLUMNS = ("sglang", "torch", "cuda", "driver", "driver_cuda", "rocm", "nccl", "flashinfer", "sgl_kernel",
               "triton", "transformers", "vllm", "python", "gpu", "compute_capability", "topology",
               "cpu_limit", "memory_limit", "hypervisor", "ulimit_soft")
ENVIRONMENTS = pa.schema([
    ("run_id", _s), *[(k, _s) for k in ENV_COLUMNS], ("gpu_count", _i), ("provenance", _s),
    ("ended_by", _s), ("end_cause", _s), ("end_exit_code", _i), ("end_at", _s),
])

SCHEMAS: dict[str, pa.Schema] = {"runs": RUNS, "ranks": RANKS, "findings": FINDINGS, "events": EVENTS,
                                 "summaries": SUMMARIES, "environments": ENVIRONMENTS}
