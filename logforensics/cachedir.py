"""The one directory where compiled forms of the package's own texts are kept between runs.

Two things are kept: Lark's analysed grammar (its parse tables, as a pickle) and Jinja's
compiled rules and report template (as marshalled code). Both are code that the next run
loads, so whoever can write the directory can run code as the user who reads it. Lark's own
default (``cache=True``) is a file of a predictable name in the shared temporary directory,
which any other user of the machine can create first; it is never used. Instead every cache
lives in one directory of the user's own, ``logforensics-cache-UID`` in the temporary
directory, made with mode 0700 and used only while it is a real directory (not a link), owned
by the user and closed to everyone else. Anything else, or ``LOGFORENSICS_NO_CACHE=1``,
means no cache: everything is compiled anew, as on a first run.
"""

from __future__ import annotations

import os
import stat
import tempfile
from functools import lru_cache


def disabled() -> bool:
    """``LOGFORENSICS_NO_CACHE=1``: keep nothing between runs."""
    return os.environ.get("LOGFORENSICS_NO_CACHE", "").strip() in ("1", "yes", "true")


@lru_cache(maxsize=1)
def private_dir() -> str | None:
    """The user's own cache directory (made if missing), or None when caching is off or no
    directory can be trusted (see the module)."""
    if disabled() or not hasattr(os, "getuid"):
        return None
    path = os.path.join(tempfile.gettempdir(), f"logforensics-cache-{os.getuid()}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    return path if trusted(path) else None


def trusted(path: str) -> bool:
    """Whether ``path`` is a directory (not a link) that only this user can write into."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077
