"""Helpers of the ipcring Python tests: the payload pattern, unique names, child processes."""

import itertools
import os
import re
import subprocess
import sys
import time

import numpy as np

import ipcring

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = os.path.join(HERE, "child.py")

_counter = itertools.count()

# The ringpub/ringsub payload pattern (tools/pattern.hpp): word k of frame `seq` is
#   x = seq * 0x9e3779b97f4a7c15 + k * 0xbf58476d1ce4e5b9 + 1 (mod 2**64);  x ^= x >> 31
_A = np.uint64(0x9E3779B97F4A7C15)
_B = np.uint64(0xBF58476D1CE4E5B9)


def pattern(seq, nbytes):
    """The little-endian uint64 words of frame `seq` (nbytes // 8 of them)."""
    k = np.arange(nbytes // 8, dtype=np.uint64)
    seq_term = np.array([seq], dtype=np.uint64) * _A  # array arithmetic wraps silently
    x = seq_term + k * _B + np.uint64(1)
    x ^= x >> np.uint64(31)
    return x.astype("<u8", copy=False)


def check_pattern(buf, seq):
    """True when the bytes-like `buf` carries frame `seq`'s pattern."""
    words = np.frombuffer(buf, dtype="<u8", count=len(memoryview(buf).cast("B")) // 8)
    return bool(np.array_equal(words, pattern(seq, words.size * 8)))


def unique_name(stem):
    stem = re.sub(r"[^A-Za-z0-9_-]", "-", stem)[:60]
    return "py-%s-%d-%d" % (stem, os.getpid(), next(_counter))


def slot_states(name):
    return [s["state"] for s in ipcring.inspect(name)["slots"]]


def spawn_child(*args, env=None, **kw):
    """Runs tests/child.py with the same interpreter and module path, stdout a pipe."""
    e = dict(os.environ)
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(ipcring.__file__)))
    e["PYTHONPATH"] = os.pathsep.join(
        [package_root, HERE] + [p for p in e.get("PYTHONPATH", "").split(os.pathsep) if p])
    e["PYTHONUNBUFFERED"] = "1"
    if env:
        e.update(env)
    return subprocess.Popen([sys.executable, CHILD] + [str(a) for a in args], env=e,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def expect_line(proc, prefix, timeout=30.0):
    """Reads the child's stdout until a line starting with `prefix`; returns that line."""
    deadline = time.monotonic() + timeout
    lines = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith(prefix):
            return line.strip()
    proc.kill()
    out, err = proc.communicate(timeout=10)
    raise AssertionError("child did not print %r; stdout=%r stderr=%r" % (
        prefix, "".join(lines) + (out or ""), err))


def wait_until(predicate, timeout=10.0, interval=0.01):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
