"""Every error kvbench reports to a user, in one place.

KvbenchError            exit 1, one line, no traceback unless --verbose
├── ColdUnverified      exit 1, a cold start that `cache.verify: required` could not verify
├── UsageError          exit 2, bad CLI value or bad input file
│   └── ConfigFileError exit 2, one `field.path: message` line per problem (any input file)
│       └── ScenarioError        ... in a scenario
└── TargetUnreachable   exit 3, the server refused before the first phase
    └── PromptTooLarge  exit 3, HTTP 413: a body limit on the way refuses prompts this long

An OSError that reaches the CLI (a file a command reads or writes: read-only, full, missing, a
directory where a file goes) is one `path: why` line from `describe_os_error`, exit 2.

Areas add subclasses that carry their own fields, beside the code that raises them:
engines.install (EngineInstallError, InstallImpossible), engines.serve (EngineStartError),
engines.adapters.base (TierUnsupported, TierOperationFailed), lab.system (LabError, LabUnavailable).
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator


class KvbenchError(Exception):
    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def lines(self) -> list[str]:
        return [self.message]


class UsageError(KvbenchError):
    exit_code = 2


class ConfigFileError(UsageError):
    """An input file (or its --set overrides) that does not validate; one line per problem."""

    def __init__(self, problems: list[str], source: str | None = None) -> None:
        self.problems = problems
        self.source = source
        super().__init__("; ".join(problems))

    def lines(self) -> list[str]:
        prefix = f"{self.source}: " if self.source else ""
        return [prefix + p for p in self.problems]


class ScenarioError(ConfigFileError):
    """A scenario that does not validate."""


class TargetUnreachable(KvbenchError):
    exit_code = 3


class ColdUnverified(KvbenchError):
    """The cold start could not be verified and the scenario requires it."""


class PromptTooLarge(TargetUnreachable):
    """The server (or a proxy in front of it) refuses a request body this large: HTTP 413.

    Exit 3, as for every refusal by the target before the first phase: the scenario is valid
    and another deployment of the same server would take it; what must change is the body limit
    on the way (or the prompt lengths).
    """


_WHY = {
    errno.EACCES: "permission denied",
    errno.EPERM: "not permitted",
    errno.EROFS: "read-only file system",
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.ENOENT: "no such file or directory",
    errno.EISDIR: "a directory where a file is expected",
    errno.ENOTDIR: "a file where a directory is expected",
    errno.EEXIST: "already exists",
}


def describe_os_error(exc: OSError, what: str | None = None) -> str:
    """One line for a file error: the path (or `what`) and why, in words, never a traceback."""
    why = _WHY.get(exc.errno or -1) or exc.strerror or type(exc).__name__
    name = what or exc.filename
    if exc.errno == errno.EEXIST and name is not None and not os.path.isdir(name):
        why = "a file where a directory is expected"
    if name is None:
        return f"cannot read or write (standard output?): {why}"
    return f"{name}: {why}"


@contextlib.contextmanager
def file_errors() -> Iterator[None]:
    """An offline command's file errors are bad input (exit 2), not a failed run: `path: why`.

    A run's own `results.files.WriteFailed` (exit 1 mid-run) carries the path and errno; it is the
    same mistake here, a folder the user named that cannot take the files.
    """
    try:
        yield
    except OSError as exc:
        raise UsageError(describe_os_error(exc)) from None
    except KvbenchError as exc:
        if exc.exit_code != 1 or not hasattr(exc, "errno") or not hasattr(exc, "path"):
            raise
        raise UsageError(describe_os_error(OSError(exc.errno, "", str(exc.path)))) from None
