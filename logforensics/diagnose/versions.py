"""The SGLang versions of two runs, and the declared defaults that changed between them.

An upgrade changes settings nobody typed: a flag left at its default takes the new
version's default. Each run's version is what the files beside its logs say (``check_env``,
``pip``) or its log prints (``diagnose.environment.environment_of``), with the git commit
where the version names one (``0.0.0.dev1+ge55646ff8``). The defaults are SGLang's declared
``ServerArgs`` defaults of each release (``model/serverargs_defaults.tsv``); a version the
table lacks is said to be "not in the table", never matched to a neighbour, since a
neighbouring release may have other defaults. A changed default is a suspect when the
failing run used it: not set on its command line, and not shown with the same value in both
runs' ``server_args``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..model.defaults import defaults_table, table_version, version_key
from ..model.run import RunSummary
from .environment import environment_of, same_value
from .sides import Evidence

_COMMIT = re.compile(r"(?:\+g|\.g|git[.-]?)([0-9a-f]{7,40})\b")


@dataclass(frozen=True)
class DefaultChange:
    """One ``ServerArgs`` field whose declared default differs between the two versions."""

    field: str
    baseline: str
    failing: str
    #: why it is not a suspect (``set on the failing run's command line``, ``the same value in
    #: both logs``), or None: the failing run took the new default
    cleared: str | None


@dataclass(frozen=True)
class VersionDelta:
    """The two runs' SGLang versions and what their declared defaults say.

    ``status``: ``unknown`` (a run shows no version), ``same``, ``compared`` (both versions
    are in the table: ``changed`` lists the defaults that differ) or ``not in the table``
    (``missing`` names the versions the table lacks)."""

    baseline: str | None
    failing: str | None
    baseline_commit: str | None
    failing_commit: str | None
    status: str
    changed: tuple[DefaultChange, ...]
    missing: tuple[str, ...]
    #: the versions the table has
    known: tuple[str, ...]
    evidence: tuple[Evidence, ...]

    @staticmethod
    def empty() -> VersionDelta:
        return VersionDelta(None, None, None, None, "unknown", (), (), (), ())

    @property
    def suspects(self) -> tuple[DefaultChange, ...]:
        """The changed defaults the failing run used."""
        return tuple(c for c in self.changed if c.cleared is None)

    @property
    def names(self) -> str:
        """``0.4.6 -> 0.5.10`` with the commits where the versions name them."""
        def one(v: str | None, c: str | None) -> str:
            return f"{v}" + (f" (commit {c})" if c and c not in str(v) else "")
        return f"{one(self.baseline, self.baseline_commit)} -> {one(self.failing, self.failing_commit)}"

    def words(self, limit: int = 6) -> str:
        """``chunked_prefill_size None -> 8192, ...``: the suspects, then how many more."""
        shown = [f"{c.field} {c.baseline} -> {c.failing}" for c in self.suspects[:limit]]
        more = f" and {len(self.suspects) - limit} more" if len(self.suspects) > limit else ""
        return ", ".join(shown) + more


def commit_of(version: str) -> str | None:
    """The git commit a version string names (``0.0.0.dev1+ge55646ff8`` -> ``e55646ff8``)."""
    m = _COMMIT.search(version)
    return m.group(1) if m else None


def version_delta(failing: RunSummary, baseline: RunSummary) -> VersionDelta:
    b, f = environment_of(baseline).get("sglang"), environment_of(failing).get("sglang")
    if b is None or f is None:
        return VersionDelta.empty()
    evidence = tuple(Evidence(c.file, c.line or None, None, f"SGLang {c.value}") for c in (f, b))
    known = tuple(sorted(defaults_table(), key=version_key))
    common = (b.value, f.value, commit_of(b.value), commit_of(f.value))
    if same_value("sglang", b.value, f.value):
        return VersionDelta(*common, "same", (), (), known, evidence)
    tb, tf = table_version(b.value), table_version(f.value)
    if tb is None or tf is None:
        missing = tuple(v.value for v, t in ((b, tb), (f, tf)) if t is None)
        return VersionDelta(*common, "not in the table", (), missing, known, evidence)
    table = defaults_table()
    old, new = table[tb], table[tf]
    given = set(failing.launch_args or {})
    changed = []
    for name in sorted(set(old) & set(new)):
        if old[name] == new[name]:
            continue
        changed.append(DefaultChange(name, old[name], new[name], _cleared(name, given, failing, baseline)))
    return VersionDelta(*common, "compared", tuple(changed), (), known, evidence)


def _cleared(name: str, given: set[str], failing: RunSummary, baseline: RunSummary) -> str | None:
    if name in given:
        return "set on the failing run's command line"
    fv: Any = (failing.server_args or {}).get(name, _ABSENT)
    bv: Any = (baseline.server_args or {}).get(name, _ABSENT)
    if fv is not _ABSENT and bv is not _ABSENT and fv == bv:
        return "the same value in both logs' server_args"
    return None


_ABSENT = object()
