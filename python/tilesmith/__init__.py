"""tilesmith from Python: every op of every family on torch tensors (torch.library custom ops,
usable under torch.compile and in CUDA graphs), the kernel a call would run, and tuning.

    import torch, tilesmith
    c = tilesmith.matmul(a, b)                       # the tuned winner for this shape, if any
    y = tilesmith.layernorm(x, w, b)                 # differentiable through tilesmith's backward
    o = tilesmith.attention(q, k, v, causal=True)
    tilesmith.describe("matmul", a, b)               # ('block_k=64,...', True)
    tilesmith.tune("matmul", "bf16", "4096x4096x4096", budget="30s")

The shared library is found as tilesmith._capi.library_candidates() says ($TILESMITH_LIB first);
the database is $TILESMITH_DB, else the user's cache, unless use_database() names another."""
import os
import shutil
import subprocess

from . import ops
from ._capi import InvalidArgument, TilesmithError
from .ops import (attention, describe, layernorm, layernorm_act_residual, library, matmul,
                  multi_sum, rmsnorm, rmsnorm_act_residual, softmax, use_database)

__all__ = ["matmul", "softmax", "layernorm", "rmsnorm", "layernorm_act_residual",
           "rmsnorm_act_residual", "multi_sum", "attention", "describe", "tune", "use_database",
           "cli_path", "TilesmithError", "InvalidArgument"]


def cli_path():
    """The tilesmith command: $TILESMITH_CLI; the copy installed inside this package; a build
    folder of the repository this package sits in; else `tilesmith` on PATH."""
    here = os.path.dirname(os.path.abspath(__file__))
    for candidate in (os.environ.get("TILESMITH_CLI"), os.path.join(here, "bin", "tilesmith"),
                      os.path.join(os.path.dirname(os.path.dirname(here)), "build", "tilesmith")):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("tilesmith")
    if not found:
        raise TilesmithError("the tilesmith command is not installed (set TILESMITH_CLI to it)")
    return found


def tune(op=None, dtype=None, shape=None, *, options=None, budget=None, strategy=None,
         misses=False, stale=False, database=None, extra=(), check=True):
    """Runs `tilesmith tune` (a sweep on the local GPU, its winners stored in the database) and
    returns its output. shape: "4096x4096x4096", a tuple of ints, or a list of either; options:
    {"b": "col", ...}; budget: "30s" or a candidate count; misses/stale: also tune what the
    runtime missed / what is stale here. Raises TilesmithError when the command fails."""
    command = [cli_path(), "tune"]
    if op:
        command += ["--op", op]
    if dtype:
        command += ["--dtype", dtype]
    shapes = shape if isinstance(shape, list) else [shape] if shape is not None else []
    for one in shapes:
        command += ["--shape", one if isinstance(one, str) else "x".join(map(str, one))]
    for name, value in (options or {}).items():
        command += ["--option", f"{name}={value}"]
    if budget is not None:
        command += ["--budget", str(budget)]
    if strategy:
        command += ["--strategy", strategy]
    if misses:
        command.append("--misses")
    if stale:
        command.append("--stale")
    database = database or ops._database
    if database:
        command += ["--db", str(database)]
    command += list(extra)
    result = subprocess.run(command, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise TilesmithError(f"{' '.join(command)} failed ({result.returncode}):\n"
                             f"{result.stderr.strip() or result.stdout.strip()}")
    return result.stdout

