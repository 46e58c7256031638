#!/usr/bin/env python3
"""Compiles templates/matmul/matmul_sm90.cuh with NVRTC the way the tilesmith pipeline does (one
translation unit per config, instantiated through a name expression, sm_90a, C++17, -I templates)
and reports the compile time, the lowered name and NVRTC's log. No GPU needed.

Usage: python3 bench/matmul_sm90_nvrtc.py [--out DIR] [BM,BN,BK,CONSUMERS,CM,CN,KIN,KOUT ...]
  --out DIR: also write DIR/cfg<i>.cubin and DIR/cfg<i>.name (lowered name) for the probe's
  configs (matmul_sm90_probe --nvrtc DIR checks them on the GPU); i is the probe's config index.
  The ring's depth (stages) and the tile order (group_m) are kernel arguments: the probe passes
  them at launch.
"""
import ctypes
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
lib = ctypes.CDLL(os.environ.get("NVRTC", "/usr/local/cuda/lib64/libnvrtc.so.13"))
c_char_pp = ctypes.POINTER(ctypes.c_char_p)
lib.nvrtcCreateProgram.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p,
                                   ctypes.c_char_p, ctypes.c_int, c_char_pp, c_char_pp]
lib.nvrtcCompileProgram.argtypes = [ctypes.c_void_p, ctypes.c_int, c_char_pp]
lib.nvrtcAddNameExpression.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
lib.nvrtcGetLoweredName.argtypes = [ctypes.c_void_p, ctypes.c_char_p, c_char_pp]
lib.nvrtcGetProgramLogSize.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
lib.nvrtcGetProgramLog.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
lib.nvrtcGetCUBINSize.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
lib.nvrtcGetCUBIN.argtypes = [ctypes.c_void_p, ctypes.c_char_p]


def compile_one(args, cubin_out=None):
    # The probe's configs leave layout, epilogue, swap_ab, the cluster's K slices, ping-pong and
    # the in-grid split sum at their defaults (row-major, none, 0, 1, 0, 0).
    expr = "&tilesmith::matmul_sm90<%s,0,0,0,1,0,0>" % ",".join(str(a) for a in args)
    src = b'#include "matmul/matmul_sm90.cuh"\n'
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), src, b"matmul_sm90_tu.cu", 0, None, None) == 0
    assert lib.nvrtcAddNameExpression(prog, expr.encode()) == 0
    opts = [b"--gpu-architecture=sm_90a", b"-std=c++17", b"-I" + os.path.join(ROOT, "templates").encode(),
            b"--ptxas-options=-v"]
    arr = (ctypes.c_char_p * len(opts))(*opts)
    t0 = time.time()
    rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
    dt = time.time() - t0
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    lowered = ctypes.c_char_p()
    if rc == 0:
        lib.nvrtcGetLoweredName(prog, expr.encode(), ctypes.byref(lowered))
        if cubin_out:
            lib.nvrtcGetCUBINSize(prog, ctypes.byref(size))
            buf = ctypes.create_string_buffer(size.value)
            lib.nvrtcGetCUBIN(prog, buf)
            open(cubin_out, "wb").write(buf.raw)
    return rc, dt, lowered.value, log.value.decode(errors="replace")


# The probe's configs (bench/matmul_sm90_probe.cu, all_configs()), by index, with BK = 64.
PROBE_CONFIGS = {
    0: [128, 256, 64, 2, 1, 1, 1, 1], 1: [128, 256, 64, 2, 2, 1, 1, 1],
    3: [256, 128, 64, 2, 2, 1, 1, 1], 4: [256, 128, 64, 2, 1, 2, 1, 1],
    7: [192, 128, 64, 3, 2, 1, 1, 1], 9: [128, 256, 64, 2, 2, 1, 0, 0],
    10: [128, 256, 64, 2, 2, 1, 1, 2], 12: [128, 64, 64, 2, 1, 2, 0, 2],
}


def main():
    args = sys.argv[1:]
    if args[:1] == ["--out"]:
        out = args[1]
        os.makedirs(out, exist_ok=True)
        failed = 0
        for i, cfg in PROBE_CONFIGS.items():
            rc, dt, lowered, log = compile_one(cfg, os.path.join(out, f"cfg{i}.cubin"))
            print(f"cfg{i} {','.join(map(str, cfg)):32s} rc={rc} {dt:.3f}s")
            if rc != 0:
                print(log)
                failed += 1
                continue
            open(os.path.join(out, f"cfg{i}.name"), "w").write(lowered.decode() + "\n")
        sys.exit(1 if failed else 0)
    configs = [a.split(",") for a in args] or [
        [128, 256, 64, 2, 2, 1, 1, 1], [128, 256, 64, 2, 1, 1, 1, 1],
        [256, 128, 64, 2, 1, 2, 1, 1], [192, 128, 64, 3, 2, 1, 0, 2],
        [128, 128, 64, 1, 1, 1, 1, 0]]
    failed = 0
    for cfg in configs:
        rc, dt, lowered, log = compile_one(cfg)
        regs = [l.strip() for l in log.splitlines() if "Used" in l or "spill" in l or "arning" in l]
        print(f"{','.join(map(str, cfg)):32s} rc={rc} {dt:.3f}s {lowered.decode() if lowered else ''}")
        for l in regs:
            print("    " + l)
        if rc != 0:
            print(log)
            failed += 1
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
