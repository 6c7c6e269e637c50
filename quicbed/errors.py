"""Errors a user can act on. The CLI prints them as one line and exits with their code."""

from __future__ import annotations


class QuicbedError(Exception):
    """A problem the user can fix; printed without a traceback."""

    exit_code = 1


class InputError(QuicbedError):
    """Bad input (a file, a flag, a value). Exit code 2, as the issues ask."""

    exit_code = 2

    def __init__(
        self, message: str, file: str | None = None, line: int | None = None, field: str | None = None
    ) -> None:
        self.file, self.line, self.field, self.detail = file, line, field, message
        where = ""
        if file:
            where = f"{file}:{line}: " if line else f"{file}: "
        prefix = f"{field}: " if field else ""
        super().__init__(f"{where}{prefix}{message}")


class PathMismatch(QuicbedError):
    """Calibration found a path that does not match its profile: we refuse to measure."""

    exit_code = 3


class EnvironmentProblem(QuicbedError):
    """Something on the machine is missing (Docker not running, no UML, not root)."""

    exit_code = 4


class HostProblem(EnvironmentProblem):
    """A problem of this host that no condition gets past (a link backend that cannot run here,
    Docker down, an image not built): a run stops at once with one line, instead of failing
    every condition and experiment in turn."""


def install_excepthook() -> None:
    """Uncaught QuicbedErrors end the process with their one line and exit code; anything
    else keeps Python's traceback."""
    import os
    import sys

    default = sys.excepthook

    def hook(kind, value, tb):
        if not isinstance(value, QuicbedError):
            default(kind, value, tb)
            return
        print(f"quicbed: {value}", file=sys.stderr)
        sys.stderr.flush()
        os._exit(value.exit_code)  # sys.exit() cannot leave an excepthook

    sys.excepthook = hook
