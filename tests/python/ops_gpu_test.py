#!/usr/bin/env python3
"""The Python package on the GPU: every op of every family on torch tensors against torch's own
(fp32 or fp64 references, fresh random inputs, odd shapes, outputs that would show unwritten
elements), gradients through tilesmith's backward kernels, clear errors for what the ops cannot
take, torch.compile and a CUDA graph around the custom ops, and the loop of misses closed from
Python: an unseen shape recorded, `tune --misses`, the next process served the winner without
compiling. (The host overhead of a tiny matmul is bench/python_overhead.py's.)

usage: PYTHONPATH=python python3 tests/python/ops_gpu_test.py   (skips without torch or a GPU)
Exit status 0 when every check passed."""
import os, subprocess, sys, tempfile

try:
    import torch
except ImportError:
    print("ops_gpu_test: skipped: torch is not installed here")
    sys.exit(0)
if not torch.cuda.is_available():
    print("ops_gpu_test: skipped: no CUDA GPU")
    sys.exit(0)

workdir = tempfile.mkdtemp(prefix="tilesmith-python-")
os.environ["TILESMITH_DB"] = os.path.join(workdir, "ops.db")
import tilesmith  # noqa: E402

failures = []
TOLERANCE = {torch.bfloat16: 1e-2, torch.float16: 2e-3, torch.float32: 5e-4}


def check(name, condition, detail=""):
    print(("ok   " if condition else "FAIL ") + name + (f"  ({detail})" if detail else ""), flush=True)
    if not condition:
        failures.append(name)


def close(name, got, expected, tolerance):
    """Relative Frobenius error of got against expected (computed in fp64), NaN never passing."""
    got64, expected64 = got.detach().double(), expected.detach().double()
    error = float((got64 - expected64).norm() / expected64.norm().clamp_min(1e-30))
    check(name, not torch.isnan(got).any() and error <= tolerance, f"rel error {error:.2e}")


def random(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape, device="cuda", dtype=torch.float32).to(dtype)


torch.manual_seed(7)

# -- matmul: plain, x @ W^T (a transposed view, read in place), batched with a shared B, the
# fused epilogue, fp32 out, fp32 in (as tf32), and its gradients.
for dtype in (torch.bfloat16, torch.float16):
    a, b = random(257, 517, dtype=dtype), random(517, 1031, dtype=dtype)
    close(f"matmul {dtype} 257x1031x517", tilesmith.matmul(a, b), a.float() @ b.float(), TOLERANCE[dtype])
x, w = random(33, 4096), random(1000, 4096)
close("matmul x @ W.t() (column-major B in place)", tilesmith.matmul(x, w.t()), x.float() @ w.float().t(), 1e-2)
a3, b2 = random(3, 100, 200), random(200, 136)
close("matmul batched, one B for every batch", tilesmith.matmul(a3, b2), a3.float() @ b2.float(), 1e-2)
bias, residual = random(136), random(3, 100, 136)
expected = torch.nn.functional.gelu(a3.float() @ b2.float() + bias.float()) + residual.float()
close("matmul bias + gelu + residual", tilesmith.matmul(a3, b2, bias=bias, residual=residual,
                                                        activation="gelu"), expected, 1e-2)
close("matmul fp32 out", tilesmith.matmul(a, b, out_dtype=torch.float32), a.float() @ b.float(), 2e-3)
af, bf = random(300, 136, dtype=torch.float32), random(136, 200, dtype=torch.float32)
close("matmul fp32 in (tf32)", tilesmith.matmul(af, bf), af.double() @ bf.double(), 5e-3)
# The warm path (a key seen before: the descriptor reused with new pointers) on new operands,
# on a view off 16 bytes with the same shape and strides (a copy, through the full path), and
# with the epilogue's operands new too.
for turn in range(3):
    a, b = random(257, 517), random(517, 1031)
    close(f"matmul warm call {turn} on new operands", tilesmith.matmul(a, b), a.float() @ b.float(), 1e-2)
off = random(257 * 517 + 1)[1:].view(257, 517)  # strides (517, 1) as a's, 2 bytes off 16
close("matmul warm key, pointer off 16 bytes", tilesmith.matmul(off, b), off.float() @ b.float(), 1e-2)
for turn in range(2):
    bias, residual = random(136), random(3, 100, 136)
    expected = torch.nn.functional.gelu(a3.float() @ b2.float() + bias.float()) + residual.float()
    close(f"matmul bias + gelu + residual, warm call {turn}",
          tilesmith.matmul(a3, b2, bias=bias, residual=residual, activation="gelu"), expected, 1e-2)
ga, gb = random(64, 96).requires_grad_(), random(96, 80).requires_grad_()
dc = random(64, 80)
tilesmith.matmul(ga, gb).backward(dc)
close("matmul grad a", ga.grad, dc.float() @ gb.detach().float().t(), 1e-2)
close("matmul grad b", gb.grad, ga.detach().float().t() @ dc.float(), 1e-2)

# -- row ops, forward and backward (rows of 1, 7, 1023 and 4097 columns; one row).
for rows, cols, dtype in ((5, 4097, torch.bfloat16), (1, 7, torch.float32), (64, 1023, torch.float16),
                          (300, 1, torch.float32)):
    tol = TOLERANCE[dtype]
    x = random(rows, cols, dtype=dtype).requires_grad_()
    weight, bias = random(cols, dtype=dtype).requires_grad_(), random(cols, dtype=dtype).requires_grad_()
    dy = random(rows, cols, dtype=dtype)
    ref_x = x.detach().double().requires_grad_()
    ref_w, ref_b = weight.detach().double().requires_grad_(), bias.detach().double().requires_grad_()
    shape = f"{rows}x{cols} {dtype}"

    y = tilesmith.softmax(x)
    ref = torch.softmax(ref_x, -1)
    close(f"softmax {shape}", y, ref, tol)
    (gx,) = torch.autograd.grad(y, x, dy)
    (rgx,) = torch.autograd.grad(ref, ref_x, dy.double())
    close(f"softmax grad {shape}", gx, rgx, tol)

    y = tilesmith.layernorm(x, weight, bias, eps=1e-5)
    ref = torch.nn.functional.layer_norm(ref_x, (cols,), ref_w, ref_b, 1e-5)
    close(f"layernorm {shape}", y, ref, tol)
    if cols > 1:  # one column: every gradient is 0 (a relative error means nothing)
        got = torch.autograd.grad(y, (x, weight, bias), dy)
        want = torch.autograd.grad(ref, (ref_x, ref_w, ref_b), dy.double())
        for name, g, r in zip(("dx", "dweight", "dbias"), got, want):
            close(f"layernorm {name} {shape}", g, r, tol * 2)

    y = tilesmith.rmsnorm(x, weight, eps=1e-5)
    ref = torch.nn.functional.rms_norm(ref_x, (cols,), ref_w, 1e-5)
    close(f"rmsnorm {shape}", y, ref, tol)
    got = torch.autograd.grad(y, (x, weight), dy)
    want = torch.autograd.grad(ref, (ref_x, ref_w), dy.double())
    for name, g, r in zip(("dx", "dweight"), got, want):
        close(f"rmsnorm {name} {shape}", g, r, tol * 2)

    res = random(rows, cols, dtype=dtype)
    with torch.no_grad():
        y = tilesmith.layernorm_act_residual(x, res, weight, bias, activation="gelu")
        ref = torch.nn.functional.gelu(torch.nn.functional.layer_norm(
            ref_x, (cols,), ref_w, ref_b, 1e-5)) + res.double()
        close(f"layernorm_act_residual gelu {shape}", y, ref, tol)
        y = tilesmith.rmsnorm_act_residual(x, res, weight, activation="silu")
        ref = torch.nn.functional.silu(torch.nn.functional.rms_norm(ref_x, (cols,), ref_w, 1e-5)) + res.double()
        close(f"rmsnorm_act_residual silu {shape}", y, ref, tol)

# A strided view (every other row) is read through its row stride.
base = random(64, 2048)
view = base[::2, :1000]
close("layernorm of a strided view", tilesmith.layernorm(view), torch.nn.functional.layer_norm(
    view.double(), (1000,)), 1e-2)

# -- multi_sum: 300 tensors of 1 to 300k elements.
lengths = torch.randint(1, 300_000, (300,)).tolist()
tensors = [random(n, dtype=torch.float32) for n in lengths]
close("multi_sum of 300 tensors", tilesmith.multi_sum(tensors), torch.stack([t.double().sum() for t in tensors]), 1e-5)
close("multi_sum means", tilesmith.multi_sum(tensors, mean=True), torch.stack([t.double().mean() for t in tensors]), 1e-5)

# -- attention: BSHD and BHSD, GQA, causal with unequal lengths, odd lengths; gradients.
def sdpa_reference(q, k, v, causal, layout):
    """fp64 attention with the causal mask aligned bottom-right, as tilesmith's."""
    if layout == "bshd":
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    q, k, v = q.double(), k.double(), v.double()
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        sq, sk = q.shape[2], k.shape[2]
        mask = torch.ones(sq, sk, dtype=torch.bool, device=q.device).tril(sk - sq)
        scores = scores.masked_fill(~mask, float("-inf"))
    out = torch.softmax(scores, -1) @ v
    return out.transpose(1, 2) if layout == "bshd" else out


for layout, causal, (b, h, kvh, sq, sk, d) in (("bshd", False, (2, 4, 2, 100, 100, 64)),
                                                 ("bshd", True, (1, 8, 2, 77, 300, 128)),
                                                 ("bhsd", True, (2, 2, 1, 3000, 3000, 64))):
    shape = lambda s, heads: (b, s, heads, d) if layout == "bshd" else (b, heads, s, d)
    q = random(*shape(sq, h)).requires_grad_()
    k, v = random(*shape(sk, kvh)).requires_grad_(), random(*shape(sk, kvh)).requires_grad_()
    name = f"attention {layout} causal={causal} B{b} H{h} KV{kvh} Sq{sq} Sk{sk} D{d}"
    o = tilesmith.attention(q, k, v, causal=causal, layout=layout)
    refs = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref = sdpa_reference(*refs, causal, layout)
    close(name, o, ref, 1e-2)
    do = random(*o.shape)
    got = torch.autograd.grad(o, (q, k, v), do)
    want = torch.autograd.grad(ref, refs, do.double())
    for grad_name, g, r in zip(("dq", "dk", "dv"), got, want):
        close(f"{name} {grad_name}", g, r, 2e-2)

# -- what the ops refuse, with errors that say why.
def refuses(name, call, words):
    try:
        call()
        check(name, False, "accepted")
    except (ValueError, tilesmith.TilesmithError) as error:
        check(name, all(w in str(error) for w in words), str(error)[:150])

refuses("matmul refuses CPU tensors", lambda: tilesmith.matmul(torch.ones(4, 4), torch.ones(4, 4)), ["CUDA"])
refuses("matmul refuses int tensors", lambda: tilesmith.matmul(torch.ones(4, 4, device="cuda", dtype=torch.int32),
                                                                torch.ones(4, 4, device="cuda", dtype=torch.int32)), ["dtype"])
refuses("matmul refuses mismatched shapes", lambda: tilesmith.matmul(random(4, 5), random(6, 7)), ["inner"])
refuses("layernorm refuses a wrong weight", lambda: tilesmith.layernorm(random(4, 8), random(9)), ["weight", "(8,)"])
refuses("attention refuses fp32", lambda: tilesmith.attention(*(random(1, 8, 2, 64, dtype=torch.float32) for _ in range(3))), ["dtype"])
refuses("attention refuses head dim 59", lambda: tilesmith.attention(*(random(1, 8, 2, 59) for _ in range(3))), ["59"])

# -- torch.compile over the custom ops, and a CUDA graph around 100 calls.
def block(x, w, gamma):
    return tilesmith.matmul(tilesmith.layernorm(x, gamma), w)

x, w, gamma = random(128, 512), random(512, 256), random(512)
eager = block(x, w, gamma)
compiled = torch.compile(block, fullgraph=True)(x, w, gamma)
close("torch.compile(fullgraph) of layernorm + matmul", compiled, eager.float(), 1e-3)

static_in = random(256, 256)
weights = [random(256, 256) for _ in range(10)]
def hundred_calls(t):
    for i in range(100):
        t = tilesmith.rmsnorm(tilesmith.matmul(t, weights[i % 10]))
    return t
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):  # warm on the capture's stream: kernels and workspaces made
    expected = hundred_calls(static_in)
torch.cuda.synchronize()
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph, stream=side):
    static_out = hundred_calls(static_in)
graph.replay()
torch.cuda.synchronize()
close("CUDA graph of 100 matmul + rmsnorm calls, replayed", static_out, expected.float(), 1e-3)
static_in.copy_(random(256, 256))
graph.replay()
torch.cuda.synchronize()
close("the graph replayed on new inputs", static_out, hundred_calls(static_in).float(), 1e-3)

# -- describe, and the loop of misses closed from Python.
da, db = random(257, 517), random(517, 1031)
config, tuned = tilesmith.describe("matmul", da, db)
check("describe matmul", "block" in config and tuned is False, f"{config}, tuned={tuned}")
unseen = random(192, 320), random(320, 448)
tilesmith.matmul(*unseen)  # a miss, recorded in the database
print(tilesmith.tune(misses=True, budget=6).strip().splitlines()[-1])
probe = subprocess.run([sys.executable, "-c", (
    "import torch, tilesmith; a = torch.randn(192, 320, device='cuda', dtype=torch.bfloat16);"
    "b = torch.randn(320, 448, device='cuda', dtype=torch.bfloat16);"
    "c, t = tilesmith.describe('matmul', a, b); print(t)")], capture_output=True, text=True, env=os.environ)
check("after tune --misses the next process hits the tuned winner", probe.stdout.strip() == "True",
      probe.stdout.strip() + probe.stderr.strip()[-300:])

print(f"\n{len(failures)} failures" + (": " + ", ".join(failures) if failures else ""))
sys.exit(1 if failures else 0)
