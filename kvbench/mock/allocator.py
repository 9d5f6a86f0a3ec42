"""glibc's allocator told to keep a request's large buffers between requests (the mock's process).

Why: a 120k-token request body is ~700 KB, and on its way through aiohttp it is held in several
buffers that large. glibc serves a block above M_MMAP_THRESHOLD (128 KB at start, raised only when
such a block is freed) with a fresh mmap, and gives the top of its heap back to the kernel past
M_TRIM_THRESHOLD: so each request faults its buffers' pages in again, every page zeroed by the
kernel, and the mock's CPU per request is mostly page faults. With both thresholds raised the
buffers come from the heap and are used again warm. Measured with benchmarks/mock_cpu.py's bare
aiohttp server (it only reads the body and streams 16 tokens): 700 KB cost it 1.3 ms of CPU above a
16-token body as glibc starts, 0.45 ms with these settings.

The cost: up to TRIM_BYTES of freed memory stays in the process (the mock keeps up to 128 MB of
bodies in its memo anyway). Linux with glibc only (mallopt elsewhere is absent or a no-op);
KVBENCH_MOCK_MALLOPT=0 leaves the allocator as it starts. Nothing here imports kvbench.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

M_TRIM_THRESHOLD = -1  # malloc.h
M_MMAP_THRESHOLD = -3
MMAP_BYTES = 32 << 20  # blocks below this come from the heap (a 130k-token body is ~0.8 MB)
TRIM_BYTES = 128 << 20  # free memory at the heap's top kept for the next request


def keep_large_buffers() -> bool:
    """Raise glibc's mmap and trim thresholds in this process; whether it was done."""
    if os.environ.get("KVBENCH_MOCK_MALLOPT", "1") == "0" or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt to speak of)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_BYTES)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_BYTES))
