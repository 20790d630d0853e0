"""A module that takes IMPORT_S to import in a worker process, as a module that imports torch and
tilelang does on a busy machine (tests/test_verify.py: the import is not part of a call's time limit)."""

from __future__ import annotations

import multiprocessing
import time

IMPORT_S = 3.0

if multiprocessing.parent_process() is not None:
    time.sleep(IMPORT_S)


def double(x):
    return x * 2
