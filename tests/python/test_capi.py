#!/usr/bin/env python3
"""The Python package's C-ABI layer without torch (CI has no GPU and no torch): every ctypes
descriptor laid out exactly as the C compiler lays out tilesmith.h's (sizes and offsets printed
by capi_layout), every function of the ABI declared, and a runtime that cannot start (no GPU)
raising TilesmithError with the library's message rather than crashing.

usage: test_capi.py CAPI_LAYOUT_BINARY LIBTILESMITH"""
import ctypes, importlib.util, json, os, subprocess, sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
spec = importlib.util.spec_from_file_location("_capi", os.path.join(REPO, "python", "tilesmith", "_capi.py"))
capi = importlib.util.module_from_spec(spec)
spec.loader.exec_module(capi)  # the module alone: the package's __init__ needs torch

failures = []
layout = json.loads(subprocess.run([sys.argv[1]], check=True, capture_output=True, text=True).stdout)
structures = {"tilesmith_matmul_desc": capi.MatmulDesc, "tilesmith_rows_desc": capi.RowsDesc,
              "tilesmith_rows_backward_desc": capi.RowsBackwardDesc,
              "tilesmith_attention_desc": capi.AttentionDesc,
              "tilesmith_attention_backward_desc": capi.AttentionBackwardDesc}
for name, structure in structures.items():
    c = layout[name]
    if ctypes.sizeof(structure) != c["size"]:
        failures.append(f"{name}: ctypes size {ctypes.sizeof(structure)}, C {c['size']}")
    fields = [f[0] for f in structure._fields_]
    if fields != list(c["fields"]):
        failures.append(f"{name}: ctypes fields {fields}, C {list(c['fields'])}")
    for field, offset in c["fields"].items():
        if hasattr(structure, field) and getattr(structure, field).offset != offset:
            failures.append(f"{name}.{field}: ctypes offset {getattr(structure, field).offset}, C {offset}")

lib = capi.load(sys.argv[2])  # raises if a declared function is missing
try:
    runtime = capi.create_runtime(lib, os.path.join(os.environ.get("TMPDIR", "/tmp"), "capi-test.db"))
    print("a GPU is present: the runtime started")
except capi.TilesmithError as error:
    if "no CUDA driver/GPU found" not in str(error):
        failures.append(f"without a GPU the runtime's error should say so: {error}")
    print(f"without a GPU: {error}")
try:
    capi.load("/nonexistent/libtilesmith.so.0")
    failures.append("loading a missing library did not raise")
except capi.TilesmithError as error:
    if "/nonexistent/libtilesmith.so.0" not in str(error):
        failures.append(f"the load error does not name the path: {error}")

for failure in failures:
    print("FAILED:", failure)
print(f"{len(structures)} descriptors, {len(capi._signatures())} functions checked; "
      f"{len(failures)} failures")
sys.exit(1 if failures else 0)
