"""Errors the engine raises, each able to say where (file, line, column) and what to do about it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Problem:
    """One problem in a user's file, with a 1-based position and an optional hint."""

    message: str
    file: Path | None = None
    line: int | None = None
    column: int | None = None
    hint: str | None = None
    end_line: int | None = None
    end_column: int | None = None

    def location(self) -> str:
        """``file:line:column`` (as much as is known), the form editors and terminals link."""
        parts = [str(self.file) if self.file else "<config>"]
        if self.line is not None:
            parts.append(str(self.line))
            if self.column is not None:
                parts.append(str(self.column))
        return ":".join(parts)

    def __str__(self) -> str:
        text = f"{self.location()}: error: {self.message}"
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text

    def to_dict(self) -> dict[str, object]:
        return {
            "message": self.message,
            "file": str(self.file) if self.file else None,
            "line": self.line,
            "column": self.column,
            "end_line": self.end_line,
            "end_column": self.end_column,
            "hint": self.hint,
        }


class GpuemuError(Exception):
    """Base of every error the engine raises on purpose."""


@dataclass
class ConfigError(GpuemuError):
    """A workspace configuration that cannot be used; carries every problem found, not just the first."""

    problems: list[Problem] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__(str(self))

    def __str__(self) -> str:
        return "\n".join(str(p) for p in self.problems)


class UsageError(GpuemuError):
    """A command line or API call that asks for something that does not exist (exit code 2)."""


class StoreError(GpuemuError):
    """The result store cannot be opened, read or written: damaged, read-only, from a newer gpuemu, or on a full
    disk. The message names the file and what to do; every face turns it into that message and exit code 2,
    never a traceback (``reason`` is one of ``damaged``, ``read-only``, ``newer``, ``disk-full``, ``path-too-long``,
    ``io``)."""

    def __init__(self, message: str, *, path: Path | None = None, reason: str = "io") -> None:
        super().__init__(message)
        self.path = path
        self.reason = reason
