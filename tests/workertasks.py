"""Calls for the contained-runner tests (tests/test_verify.py), in a module of their own: a spawned worker
imports the module of each function it runs, and this one imports nothing heavy."""

from __future__ import annotations

import os
import time


def double(x):
    return x * 2


def crash():
    os._exit(3)


def hang():
    time.sleep(600)


def cuda_like_error():
    raise RuntimeError("CUDA error: an illegal memory access was encountered")
