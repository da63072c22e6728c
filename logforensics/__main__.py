"""``python -m logforensics``."""

from .cli import main

main(prog_name="logforensics")
