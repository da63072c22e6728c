"""Which runs live under some paths: a log file is a run, the per-node files of one directory are one.

A directory's files that name their node (``node0.log`` / ``node1.log``, Slurm's
``%x_%j_node$SLURM_NODEID.out``, ``node_rank1.log``) and agree on the rest of their name
form one run; ``group_by="dir"`` makes every directory one run. A path named on the
command line is a run whatever its name; inside directories only the names that
``summary DIR`` reads are taken (``*.log``, ``*.out``, ``*.err``, compressed or not).
Each run's ``source`` is a path ``summary`` accepts: the file, the directory, or a glob.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from ..ingest.runset import _NODE, is_artefact, is_log_name, node_from_name


@dataclass(frozen=True)
class RunSource:
    """One run to parse: the path that names it and its files, each with its node label.

    ``source`` is the file for a one-file run, else the directory (or, when a directory
    holds several groups, a glob of the group's files). ``nodes`` is parallel to
    ``files``: ``node0``, ``node1``... from the file name, or None.
    """

    source: str
    files: tuple[str, ...]
    nodes: tuple[str | None, ...]
    #: the artefacts beside the run's files (``artefacts.sniff``), for a run named by its
    #: directory: the directory's files whose content is an environment, an orchestrator's
    #: records or a dump
    artefacts: tuple[str, ...] = ()


def _node_key(name: str) -> tuple[str, int] | None:
    """The name with its node number cut out (what node files of one run share), and the number."""
    m = _NODE.search(name)
    if not m:
        return None
    return name[:m.start(1)] + "#" + name[m.end(1):], int(m.group(1))


def _walk(path: str) -> Iterable[str]:
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if is_log_name(name):
                yield os.path.join(root, name)


def discover(paths: Iterable[str], group_by: str = "file") -> tuple[list[RunSource], list[str]]:
    """The runs under ``paths`` and the paths that do not exist (for a one-line warning each)."""
    missing: list[str] = []
    files: list[str] = []
    seen: set[str] = set()
    for p in paths:
        if not os.path.lexists(p):
            missing.append(p)
            continue
        found = list(_walk(p)) if os.path.isdir(p) else [p]
        for f in found:
            a = os.path.abspath(f)
            if a not in seen:
                seen.add(a)
                files.append(a)
    by_dir: dict[str, list[str]] = defaultdict(list)
    for f in files:
        by_dir[os.path.dirname(f)].append(f)
    runs: list[RunSource] = []
    for d in sorted(by_dir):
        beside = _beside(d, by_dir)
        logs = [f for f in sorted(by_dir[d]) if f not in beside]
        # a run named by its directory has the directory's artefacts, as ``summary DIR`` does
        runs.extend(replace(r, artefacts=beside) if beside and r.source == d else r
                    for r in _group_dir(d, logs, group_by))
    return runs, missing


def _beside(directory: str, runs: Mapping[str, object]) -> tuple[str, ...]:
    """The artefacts in a directory of runs and in its subfolders that hold no logs (SGLang's
    ``<crash-dump-folder>/<host>/`` layout, as ``summary DIR`` reads it); a subfolder with
    logs (one of ``runs``) holds runs of its own, and its artefacts are theirs."""
    out: list[str] = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and os.path.join(root, d) not in runs)
        out += [p for n in sorted(files) if not n.startswith(".") and os.path.isfile(p := os.path.join(root, n))
                and is_artefact(p)]
    return tuple(out)


def _group_dir(directory: str, files: list[str], group_by: str) -> list[RunSource]:
    if group_by == "dir":
        return [RunSource(directory, tuple(files), tuple(node_from_name(f) for f in files))]
    groups: dict[str, list[tuple[int, str]]] = defaultdict(list)
    single: list[str] = []
    for f in files:
        found = _node_key(os.path.basename(f))
        if found is None:
            single.append(f)
        else:
            groups[found[0]].append((found[1], f))
    runs = [RunSource(f, (f,), (None,)) for f in single]
    multi = {k: sorted(v) for k, v in groups.items() if len({n for n, _ in v}) > 1}
    for key, members in groups.items():
        if key not in multi:
            runs.extend(RunSource(f, (f,), (node_from_name(f),)) for _, f in members)
    for key, members in sorted(multi.items()):
        only_group = not single and len(groups) == 1
        source = directory if only_group else os.path.join(directory, key.replace("#", "*"))
        runs.append(RunSource(source, tuple(f for _, f in members), tuple(f"node{n}" for n, _ in members)))
    return sorted(runs, key=lambda r: r.source)
