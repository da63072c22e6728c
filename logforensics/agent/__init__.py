"""For coding agents: the tools ``logforensics mcp`` serves (``tools.py``) and the server (``server.py``)."""
