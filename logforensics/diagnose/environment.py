"""What differs between two runs besides their settings: the environment.

A regression that looks like a code change is often the machine: another driver, a
PCIe box instead of an NVLink one, a container given 2 CPUs instead of 64. Each run's
environment is what the files beside its logs say (``RunSummary.artefacts``), with the
versions the log itself prints (``versions``) where no file gives them. Only facts both
runs show are compared; the others are listed as shown by one side only.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..artefacts.environment import KEYS, cpu_figure, cpu_value, memory_figure, memory_value, slurm_bytes, slurm_cores
from ..artefacts.types import Cited
from ..model.run import RunSummary
from .sides import Evidence


@dataclass(frozen=True)
class EnvDelta:
    """One environment fact that differs, with where each side's value was read."""

    key: str
    label: str
    baseline: str
    failing: str
    evidence: tuple[Evidence, ...]


@dataclass(frozen=True)
class EnvFacts:
    """The environments compared: what differs, what is equal, what one side lacks."""

    differs: tuple[EnvDelta, ...]
    same: tuple[str, ...]
    one_side: tuple[str, ...]
    #: whether both runs show any environment fact at all
    compared: bool

    @staticmethod
    def empty() -> EnvFacts:
        return EnvFacts((), (), (), False)

    @property
    def evidence(self) -> tuple[Evidence, ...]:
        return tuple(e for d in self.differs for e in d.evidence)

    def words(self, limit: int = 4) -> str:
        """``GPU topology NVLink (NV18) -> PCIe only (PHB, SYS), driver 550.54.15 -> 535.104.05``."""
        shown = [f"{d.label} {d.baseline} -> {d.failing}" for d in self.differs[:limit]]
        more = f" and {len(self.differs) - limit} more" if len(self.differs) > limit else ""
        return ", ".join(shown) + more


#: Slurm's variables in a job's environment (the launch line's or an ``export`` the log
#: shows) -> the allocation they state
SLURM_VARS = {"SLURM_CPUS_ON_NODE": "cpu_limit", "SLURM_JOB_CPUS_PER_NODE": "cpu_limit",
              "SLURM_CPUS_PER_TASK": "cpu_limit", "SLURM_MEM_PER_NODE": "memory_limit"}


def environment_of(run: RunSummary) -> dict[str, Cited]:
    """A run's environment facts: the artefacts', then the versions its log prints and the
    allocation its Slurm variables state."""
    facts = dict(run.artefacts.environment.facts) if run.artefacts and run.artefacts.environment else {}
    for key, value in (run.versions or {}).items():
        if key in KEYS and key not in facts and value not in (None, ""):
            facts[key] = Cited(str(value), run.file or "", 0)
    for var, key in SLURM_VARS.items():
        given = (run.env or {}).get(var)
        if given and key not in facts:
            text = f"{var}={given}"
            facts[key] = Cited(memory_value(slurm_bytes(given), text) if key == "memory_limit"
                               else cpu_value(slurm_cores(given), text), run.file or "", 0)
    return facts


def same_value(key: str, a: str, b: str) -> bool:
    """Whether two values of a fact are the same (a version with and without a leading ``v``)."""
    if key == "memory_limit":  # 64Gi and 65536M are one allocation
        return memory_figure(a) == memory_figure(b)
    if key == "cpu_limit":  # 2000m, 2 and NanoCpus 2000000000 are one allocation: 2 cores
        ca, cb = cpu_figure(a), cpu_figure(b)
        if ca is not None and cb is not None:
            return ca == cb
    if key in ("sglang", "torch", "flashinfer", "cuda", "nccl"):  # 0.4.6 and v0.4.6, 2.5.1+cu124 and 2.5.1
        return a.lstrip("v").split("+")[0] == b.lstrip("v").split("+")[0] and (
            "+" not in a or "+" not in b or a == b)
    return " ".join(a.split()) == " ".join(b.split())


def env_facts(failing: RunSummary, baseline: RunSummary) -> EnvFacts:
    return compare(environment_of(baseline), environment_of(failing))


def compare(b: dict[str, Cited], f: dict[str, Cited]) -> EnvFacts:
    """Two environments' facts (baseline ``b``, failing ``f``) compared, key by key in
    :data:`KEYS` order; not compared at all when one side has none."""
    if not b or not f:
        return EnvFacts((), (), tuple(KEYS[k] for k in KEYS if k in b or k in f), False)
    differs, same, one = [], [], []
    for key, label in KEYS.items():
        bv, fv = b.get(key), f.get(key)
        if bv is None and fv is None:
            continue
        if bv is None or fv is None:
            one.append(label)
        elif same_value(key, bv.value, fv.value):
            same.append(label)
        else:
            evidence = tuple(Evidence(c.file, c.line or None, None, f"{label}: {c.value}") for c in (fv, bv))
            differs.append(EnvDelta(key, label, bv.value, fv.value, evidence))
    return EnvFacts(tuple(differs), tuple(same), tuple(one), True)
