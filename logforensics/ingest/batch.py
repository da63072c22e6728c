"""A whole file into a fresh LiveRun: on several cores when large, else block by block."""

from __future__ import annotations

import os
from collections.abc import Callable

from .. import native
from ..read.fastpath import LineClassifier
from .files import blocks, is_plain_file, text_warning
from .live import LiveRun
from .parallel import read_in_parallel

#: Bytes per block when the compiled path reads a file into a run model. The lines of a block
#: are at least one segment of the scanner's, and the run model takes each segment for a fixed
#: cost of Python besides its lines (``model/columns.py``): at 2 MiB rather than 1 MiB a 1 GiB
#: log read 4-6% faster, for 5 MiB more memory (``bench/README.md``). The writers of ``parse``
#: keep 1 MiB (``parallel.BULK_BLOCK_SIZE``): their pieces grow with the block.
RUN_BLOCK_SIZE = 2 << 20


def read_file(path: str | os.PathLike[str], *, name: str | None = None,
              progress: Callable[[int], None] | None = None, node: str | None = None,
              memo: LineClassifier | None = None) -> LiveRun:
    """Read the whole file (or ``-``, standard input) into a new run, closed.

    ``memo``: a classifier whose learned line shapes this read shares (plans depend on
    neither the file nor the line, so reading several files learns each shape once).

    A large regular file is read on several cores by ``parallel.read_in_parallel``, with
    the same LiveRun code in each worker (on either reading path); everything else is read
    here, block by block (which also reports unreadable files as ``InputError``).
    """
    name = name or os.fspath(path)
    # A compressed or UTF-16 file is not its text byte for byte: never cut into ranges.
    ranges = read_in_parallel(path, name=name, progress=progress, node=node) if is_plain_file(path) else None
    if ranges is not None:
        warning = text_warning(path)
        if warning:
            ranges.parser.stats.warnings.append(warning)
        return ranges
    if native.available():
        run = LiveRun(name, node=node)
        if memo is not None:
            run.parser.classifier.share_memo(memo)
        # buffers read into again and again (feed_bulk keeps nothing of a block), by a thread
        # while the scanner works without the GIL
        for block in blocks(path, progress, RUN_BLOCK_SIZE, warn=run.parser.stats.warnings.append, reuse=True,
                            ahead=True):
            run.feed_bulk(block)
        run.close()
        return run
    run = LiveRun(name, node=node)
    if memo is not None:
        run.parser.classifier.share_memo(memo)
    for block in blocks(path, progress, warn=run.parser.stats.warnings.append):
        run.feed(block)
    run.close()
    return run
