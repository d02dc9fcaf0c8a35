"""Reads the environment of every ancestor process through /proc (the evaluator's own, with
its API keys) and raises an exception quoting what it found, so the secret would land in
the verdict's message and log, which are saved to disk. The evaluator redacts every value of
its environment that workers do not get: the test checks the marker value never appears."""
import os

EXPECT = "compile_error/"
TASK = "gelu"
STATIC = True  # the static check (kernels/static.py) finds it too
NEEDS = ()

found, pid = [], os.getppid()
while pid > 1:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            found += [e.decode(errors="replace") for e in f.read().split(b"\0") if b"API_KEY" in e.split(b"=")[0]]
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError):
        break
raise RuntimeError(f"ancestors' keys: {found[:2]}")
