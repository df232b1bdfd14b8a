"""Process-wide memory settings for the operator process (never for a library user's process).

* glibc gives each thread that allocates its own malloc arena (up to 8 per core); with the sync, create,
  informer and event threads the arenas' free space is RSS no one uses. Two arenas are enough: the
  threads mostly wait on the network. (Python's own allocator serves objects under 512 bytes; dicts,
  lists and strings of cached objects above that come from malloc.)
* the imports (cryptography, urllib3, prometheus_client, ~430 modules) are frozen out of the garbage
  collector's generations, so full collections do not walk them again and again.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging

log = logging.getLogger(__name__)

M_ARENA_MAX = -8  # glibc malloc.h
ARENAS = 2


def limit_malloc_arenas(arenas: int = ARENAS) -> bool:
    """mallopt(M_ARENA_MAX, arenas) before threads start; False where there is no glibc."""
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, arenas))


def freeze_imports() -> None:
    """Move everything alive now (modules, classes, functions) out of the collected generations."""
    gc.collect()
    gc.freeze()


def setup() -> None:
    if not limit_malloc_arenas():
        log.debug("malloc arenas not limited (no glibc)")
    freeze_imports()
