"""Errors convdoctor raises on purpose.

`ConvdoctorError` carries a message meant for a person (what is wrong and what to do). The CLI
turns it into one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations


class ConvdoctorError(Exception):
    """An error with a message for the user; the CLI prints it and exits 2."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        # one line: what is wrong, then what to do
        return self.message if not self.hint else f"{self.message} ({self.hint})"


class UsageError(ConvdoctorError):
    """Bad command-line input: an unparseable shape, a missing file, an unknown option value."""


class DependencyMissing(ConvdoctorError):
    """An optional dependency (torch, onnx, cudnn-frontend) is needed for this command."""
