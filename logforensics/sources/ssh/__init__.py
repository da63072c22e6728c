"""Follow a log file on another machine over SSH (paramiko), surviving reconnects.

``connect`` opens and authenticates connections, ``tail`` is the remote script and the
parser of its output (how bytes and offsets stay exact is explained there), ``discover``
finds the SGLang servers on a host and their log files, ``fetch`` copies a whole file (for
the commands that read a log to its end), ``follower`` is the iterator that
ties them together and reconnects.
"""

from .discover import ServerProcess, _parse_discovery, discover_server_logs
from .fetch import copy_file
from .follower import SSHFollower
from .tail import _TailStream

__all__ = ["SSHFollower", "copy_file", "ServerProcess", "_TailStream", "_parse_discovery", "discover_server_logs"]
