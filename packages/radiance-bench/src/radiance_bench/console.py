"""Rich consoles (tables to stdout, progress and notes to stderr) and the progress bar."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

console = Console(width=None if sys.stdout.isatty() else 140)
err_console = Console(stderr=True)


def progress_bar(enabled: bool = True) -> Progress:
    """A stderr progress bar (label, bar, done/total, elapsed); ``enabled=False`` draws nothing."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
        disable=not enabled,
    )
