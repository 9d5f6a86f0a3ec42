"""Moved to the `kvbench.audit` package; this re-export keeps old imports working for one release."""

from kvbench.audit import ClaimsFile, Ledger, audit, audit_file, format_ledger, load_claims, parse_claims
from kvbench.model.prefill import (
    cold_reuse_speedup,
    fit_prefill,
    required_shared_fraction,
    shared_fraction_for_suffix,
    suffix_time,
)

__all__ = [
    "ClaimsFile",
    "Ledger",
    "audit",
    "audit_file",
    "cold_reuse_speedup",
    "fit_prefill",
    "format_ledger",
    "load_claims",
    "parse_claims",
    "required_shared_fraction",
    "shared_fraction_for_suffix",
    "suffix_time",
]
