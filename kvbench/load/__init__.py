"""What is sent and when: prompt sets (prompts.py), schedules (schedule.py), and where the
workers run (backends.py). Pure and seeded wherever it can be: testable without a network."""

from kvbench.load.backends import BACKENDS, LoadBackend, LocalBackend, load_backend
from kvbench.load.schedule import (
    Issue,
    WorkItem,
    arrival_offsets,
    request_order,
    run_closed_loop,
    run_open_loop,
    work_items,
)

__all__ = [
    "BACKENDS",
    "Issue",
    "LoadBackend",
    "LocalBackend",
    "WorkItem",
    "arrival_offsets",
    "load_backend",
    "request_order",
    "run_closed_loop",
    "run_open_loop",
    "work_items",
]
