"""Progress display for long work (the planner's search, soak scripts), with Rich.

``with progress("searching layouts", total=n) as advance: ... advance()`` shows a Rich progress
bar on an interactive terminal and does nothing otherwise (stdout not a TTY, ``disable=True``, or
``TRAINC_NO_PROGRESS`` set), so piped and JSON output stays clean. Rich is imported only when a
bar is actually shown. The bar is drawn on stderr.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")
Advance = Callable[..., None]


def enabled(disable: bool = False) -> bool:
    """Whether a progress bar would be shown: an interactive stdout and stderr, not disabled by
    the caller or by the ``TRAINC_NO_PROGRESS`` environment variable."""
    if disable or os.environ.get("TRAINC_NO_PROGRESS"):
        return False
    return sys.stdout.isatty() and sys.stderr.isatty()


def _noop(advance: float = 1, **_: object) -> None:
    return None


@contextmanager
def progress(
    description: str, total: float | None = None, *, disable: bool = False
) -> Iterator[Advance]:
    """A context manager yielding ``advance(n=1, description=None)``.

    ``total`` None shows a spinner with a count instead of a bar. A no-op when :func:`enabled`
    is false.
    """
    if not enabled(disable):
        yield _noop
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = [
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    ]
    if total is not None:
        columns.append(TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=total)

        def advance(n: float = 1, *, description: str | None = None) -> None:
            if description is None:
                bar.advance(task, n)
            else:
                bar.update(task, advance=n, description=description)

        yield advance


def track(
    items: Iterable[T], description: str, total: float | None = None, *, disable: bool = False
) -> Iterator[T]:
    """Iterate ``items`` with a progress bar (``total`` defaults to ``len(items)`` if known)."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with progress(description, total, disable=disable) as advance:
        for item in items:
            yield item
            advance()
