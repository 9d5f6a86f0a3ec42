"""Names a scenario takes from registries it may not import, checked before anything starts.

The scenario layer sits below the mock and noise packages (pyproject.toml's import layers), so its
models cannot see the mock's profiles or the noise kinds a cluster can place. `kvbench validate`
and `kvbench run` call check_names() right after validation: a typo there is one line listing the
known names and exit 2, not a mock that dies on start (exit 1) or a run that fails mid-way.
"""

from __future__ import annotations

from kvbench.errors import UsageError
from kvbench.scenario import Scenario


def check_names(scn: Scenario) -> None:
    """UsageError (one line, the known names) for a name no registry knows."""
    _mock_profile(scn)
    _noise_kind(scn)


def _mock_profile(scn: Scenario) -> None:
    from kvbench.mock.profiles import is_profile_path, load_profile, profile_names

    name = scn.target.mock_profile
    known = profile_names()
    if name not in known and not is_profile_path(name):
        raise UsageError(f"target.mock_profile: unknown mock profile {name!r} (known: {', '.join(known)})")
    if scn.target.base_url is None:
        # the embedded mock applies these at start; a bad field must not surface as "mock did not start"
        overrides = {**scn.test.mock_defaults, **scn.target.mock_overrides}
        if is_profile_path(name):
            load_profile(name)  # a missing or invalid file: one line naming it, before the overrides
        try:
            load_profile(name, overrides)
        except UsageError as exc:
            raise UsageError(f"target.mock_overrides: {exc.message}") from None


def _noise_kind(scn: Scenario) -> None:
    from kvbench.noise import LOCAL, noise_kinds

    cluster = LOCAL if scn.cluster.backend == "local" else scn.cluster.backend
    known = noise_kinds(cluster)
    if scn.noise.kind not in known:
        where = "" if cluster == LOCAL else f" on cluster {cluster!r}"
        raise UsageError(
            f"noise.kind: unknown noise kind {scn.noise.kind!r}{where} (known: {', '.join(known)})"
        )
