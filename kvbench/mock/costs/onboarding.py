"""Where one request's onboarding time went, for the mock's ground truth (report.attribution reads it).

Pure: the stage ends and bytes of one onboarding in, two splits of its time out.
"""

from __future__ import annotations

# The link each onboarding stage moves bytes over: G4 reads cross the fabric (where the noise
# competes), G3 reads come off the node's own disks, every byte then crosses host->GPU (PCIe).
STAGE_LINK = {"G4": "fabric", "G3": "disk", "G2": "pcie"}


def split_onboarding(
    total: float, stage_ends: dict[str, float], moved: dict[str, float]
) -> tuple[dict[str, float], dict[str, float]]:
    """Split one request's onboarding time by the source tier of its bytes and by the bounding link.

    The stages run as a pipeline (module docstring), so the onboarding lasts as long as the stage
    that ends last: that stage is the critical path. `stage_ends` holds each stage's end on any one
    clock ("G3"/"G4": the reads into host memory; "G2": the host->GPU copy of every byte); `moved`
    the bytes per source tier. A read on the critical path gives the whole time to its tier; the
    host->GPU copy on the critical path splits it by bytes among the tiers the bytes came from (a
    G2 hit is only that copy). Both splits sum to `total` exactly.
    """
    tiers = dict.fromkeys(("G2", "G3", "G4"), 0.0)
    links = dict.fromkeys(STAGE_LINK.values(), 0.0)
    if total <= 0 or not stage_ends:
        return tiers, links
    critical = max(stage_ends, key=lambda k: (stage_ends[k], k != "G2"))  # a tie goes to the read
    links[STAGE_LINK[critical]] = total
    if critical in ("G3", "G4"):
        tiers[critical] = total
        return tiers, links
    nbytes = {t: moved.get(t, 0.0) for t in tiers}
    whole = sum(nbytes.values())
    for t, b in nbytes.items():
        tiers[t] = total * b / whole if whole > 0 else (total if t == "G2" else 0.0)
    return tiers, links
