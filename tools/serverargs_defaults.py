#!/usr/bin/env python3
"""Write logforensics/model/serverargs_defaults.tsv from published sglang wheels.

The defaults are the ones ``class ServerArgs`` declares in ``python/sglang/srt/server_args.py``
of each wheel, read with ``ast`` (nothing is imported or run). A field whose default is not
a literal (a ``field(default_factory=...)``, a name, a call) is written as its source text
in brackets and never compared. ``__post_init__`` resolves many ``None`` defaults
(mem_fraction_static, chunked_prefill_size, ...) per GPU and model: the log shows the
resolved value, so ``None`` defaults are not compared either.

    pip download --no-deps sglang==0.5.10 -d /tmp/w
    python tools/serverargs_defaults.py /tmp/w/sglang-0.5.10-py3-none-any.whl [more wheels]
"""

from __future__ import annotations

import ast
import re
import sys
import zipfile
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "logforensics" / "model" / "serverargs_defaults.tsv"


def defaults(source: str) -> dict[str, str]:
    tree = ast.parse(source)
    cls = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "ServerArgs")
    out: dict[str, str] = {}
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            try:
                out[node.target.id] = repr(ast.literal_eval(node.value))
            except ValueError:
                out[node.target.id] = "[" + ast.unparse(node.value) + "]"
    return out


def main(wheels: list[str]) -> None:
    rows = ["version\tfield\tdefault\tsource"]
    for wheel in wheels:
        version = re.search(r"sglang-([^-]+)-", Path(wheel).name).group(1)
        with zipfile.ZipFile(wheel) as z:
            src = z.read("sglang/srt/server_args.py").decode("utf-8")
        for name, value in defaults(src).items():
            rows.append(f"{version}\t{name}\t{value}\tsglang {version} wheel, python/sglang/srt/server_args.py ServerArgs")
    OUT.write_text("\n".join(rows) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1:])
