"""Every error kvbench reports to a user, in one place.

KvbenchError            exit 1, one line, no traceback unless --verbose
├── ColdUnverified      exit 1, a cold start that `cache.verify: required` could not verify
├── UsageError          exit 2, bad CLI value or bad input file
│   └── ConfigFileError exit 2, one `field.path: message` line per problem (any input file)
│       └── ScenarioError        ... in a scenario
└── TargetUnreachable   exit 3, the server refused before the first phase
    └── PromptTooLarge  exit 3, HTTP 413: a body limit on the way refuses prompts this long

Areas add subclasses that carry their own fields, beside the code that raises them:
engines.install (EngineInstallError, InstallImpossible), engines.serve (EngineStartError),
engines.adapters.base (TierUnsupported, TierOperationFailed), lab.system (LabError, LabUnavailable).
"""

from __future__ import annotations


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
