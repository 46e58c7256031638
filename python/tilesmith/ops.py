"""Every op of every family on torch tensors, as torch.library custom ops (namespace
`tilesmith`): each runs on torch's current stream of its tensors' device, through that device's
runtime (the tuned winner, else the nearest tuned shape's, else the default config), and has a
fake implementation, so the ops trace under torch.compile and replay inside CUDA graphs. The
norms, softmax and attention are differentiable through tilesmith's own backward kernels; matmul
through two more matmuls.

What the kernels cannot take is refused with a ValueError naming it (a CPU tensor, a dtype the op
does not have, a last dimension that is not contiguous); what they can take after a copy is
copied (other strides, a pointer off 16-byte alignment)."""
import ctypes
import functools
import threading

import torch

from . import _capi

_TORCH_DTYPE = {torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32"}
_DTYPE_OF = {name: dtype for dtype, name in _TORCH_DTYPE.items()}
_lock = threading.Lock()
_lib = None
_runtimes = {}  # device index -> tilesmith_runtime*
_database = None  # set by use_database()


def use_database(path):
    """The database the runtimes read (default: $TILESMITH_DB, else the user's cache). Takes
    effect for devices whose runtime is not made yet: call it before the first op."""
    global _database
    with _lock:
        if _runtimes:
            raise RuntimeError("tilesmith.use_database: a runtime already exists; call it first")
        _database = str(path) if path else None


def library():
    """libtilesmith, loaded and declared once (tilesmith._capi.load)."""
    global _lib
    with _lock:
        if _lib is None:
            _lib = _capi.load()
        return _lib


def _index(device):
    return device.index if device.index is not None else torch.cuda.current_device()


def _runtime(device):
    index = _index(device)
    runtime = _runtimes.get(index)  # the warm path takes no lock
    if runtime is not None:
        return runtime
    lib = library()
    with _lock:
        if index not in _runtimes:
            _runtimes[index] = _capi.create_runtime(lib, _database, index)
        return _runtimes[index]


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _stream(device):
    """torch's current stream on `device`, as a CUstream: the raw getter where this torch has
    it (a Stream object costs ~5 us to make, more than the launch)."""
    if _raw_stream is not None:
        return _raw_stream(_index(device))
    return torch.cuda.current_stream(device).cuda_stream


def _dtype(tensor, op, allowed=("f16", "bf16", "f32")):
    name = _TORCH_DTYPE.get(tensor.dtype)
    if name not in allowed:
        raise ValueError(f"tilesmith.{op}: dtype {tensor.dtype} is not one of "
                         f"{', '.join(str(_DTYPE_OF[a]) for a in allowed)}")
    return _capi.DTYPE[name]


def _cuda(op, *tensors):
    """The device of `tensors`, all of which must be CUDA tensors on one device."""
    present = [t for t in tensors if t is not None]
    for t in present:
        if not t.is_cuda:
            raise ValueError(f"tilesmith.{op}: tensors must be on a CUDA device (got {t.device})")
        if t.device != present[0].device:
            raise ValueError(f"tilesmith.{op}: tensors on {present[0].device} and {t.device}")
    return present[0].device


def _packed(t):
    """t contiguous and starting on a 16-byte boundary (a view into a tensor may start
    anywhere): t itself where it already is, else a copy."""
    t = t.contiguous()
    return t if t.data_ptr() % 16 == 0 else t.clone()


def _ptr(t):
    return t.data_ptr() if t is not None else None


def _rows(op, x):
    """x as rows x cols with unit column stride: (the 2D view, its row stride)."""
    if x.dim() == 0:
        raise ValueError(f"tilesmith.{op}: needs at least one dimension")
    x2 = x.reshape(-1, x.shape[-1]) if x.dim() != 2 else x
    if x2.stride(-1) != 1 or x2.data_ptr() % 16:
        x2 = _packed(x2)
    return x2, x2.stride(0)


def _same_rows(op, x, name, t):
    if t is not None and t.shape != x.shape:
        raise ValueError(f"tilesmith.{op}: {name} has shape {tuple(t.shape)}, x {tuple(x.shape)}")


def _vector(op, name, t, cols):
    """Checks a per-column vector (weight, bias). Only shapes, dtypes and devices are looked at
    outside the custom ops: torch.compile traces these checks, and data pointers do not trace."""
    if t is not None and t.shape != (cols,):
        raise ValueError(f"tilesmith.{op}: {name} must have shape ({cols},), got {tuple(t.shape)}")
    return t


# ---- matmul ---------------------------------------------------------------------------------

def _matrix_layout(op, name, t):
    """A 2D or 3D operand's storage: (tensor, layout, leading dimension, batch stride)."""
    if t.dim() not in (2, 3):
        raise ValueError(f"tilesmith.{op}: {name} must be 2D or 3D (batched), got {t.dim()}D")
    rows, cols = t.shape[-2], t.shape[-1]
    s_row, s_col = t.stride(-2), t.stride(-1)
    if s_col == 1 and (s_row >= cols or rows == 1):
        layout, ld = _capi.ROW_MAJOR, max(s_row, cols)
    elif s_row == 1 and (s_col >= rows or cols == 1):
        layout, ld = _capi.COLUMN_MAJOR, max(s_col, rows)
    else:
        layout = None  # strides the kernels cannot read in place
    if layout is None or t.data_ptr() % 16:
        t = _packed(t)
        layout, ld = _capi.ROW_MAJOR, cols
    batch_stride = t.stride(0) if t.dim() == 3 else 0
    return t, layout, ld, batch_stride


def _matmul_desc(a, b, c, out_dtype, bias, residual, activation):
    """The descriptor of a @ b into c (None: for a config query), and the operands it points at,
    which must outlive it."""
    op = "matmul"
    a, a_layout, lda, stride_a = _matrix_layout(op, "a", a)
    b, b_layout, ldb, stride_b = _matrix_layout(op, "b", b)
    batch = max(a.shape[0] if a.dim() == 3 else 1, b.shape[0] if b.dim() == 3 else 1)
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    desc = _capi.MatmulDesc(
        a=_ptr(a), b=_ptr(b), c=_ptr(c), batch=batch, m=m, n=n, k=k,
        dtype=_dtype(a, op), out_dtype=_capi.DTYPE[_TORCH_DTYPE[out_dtype]], a_layout=a_layout,
        b_layout=b_layout,
        bias=_ptr(bias), residual=_ptr(residual), activation=_capi.ACTIVATION[activation],
        lda=lda, ldb=ldb, ldc=n, ld_residual=n if residual is not None else 0,
        strided_batches=1, batch_stride_a=stride_a, batch_stride_b=stride_b,
        batch_stride_c=m * n if batch > 1 else 0,
        batch_stride_residual=m * n if residual is not None and residual.dim() == 3 else 0)
    return desc, (a, b)


def _matmul_out_shape(a, b):
    batch = [max(a.shape[0] if a.dim() == 3 else 1, b.shape[0] if b.dim() == 3 else 1)]
    return (batch if a.dim() == 3 or b.dim() == 3 else []) + [a.shape[-2], b.shape[-1]]


def _check_matmul(a, b, bias, residual, activation, out_dtype):
    op = "matmul"
    _cuda(op, a, b, bias, residual)
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"tilesmith.matmul: a is {tuple(a.shape)}, b {tuple(b.shape)}: "
                         f"the inner dimensions differ")
    if a.dim() == 3 and b.dim() == 3 and a.shape[0] != b.shape[0]:
        raise ValueError(f"tilesmith.matmul: batches differ ({a.shape[0]} and {b.shape[0]})")
    if a.dtype != b.dtype:
        raise ValueError(f"tilesmith.matmul: a is {a.dtype}, b {b.dtype}: one input dtype")
    if activation not in _capi.ACTIVATION:
        raise ValueError(f"tilesmith.matmul: activation {activation!r} is not one of none, relu, "
                         f"gelu, silu")
    out = out_dtype or a.dtype
    if out not in (a.dtype, torch.float32):
        raise ValueError(f"tilesmith.matmul: out_dtype {out} is not {a.dtype} or torch.float32")
    n = b.shape[-1]
    if bias is not None and (bias.shape != (n,) or bias.dtype != out):
        raise ValueError(f"tilesmith.matmul: bias must be ({n},) of {out}, got "
                         f"{tuple(bias.shape)} of {bias.dtype}")
    if residual is not None and (list(residual.shape) != _matmul_out_shape(a, b) or
                                 residual.dtype != out):
        raise ValueError(f"tilesmith.matmul: residual must be {_matmul_out_shape(a, b)} of {out}, "
                         f"got {list(residual.shape)} of {residual.dtype}")
    return out


# Calls by everything the checks and the descriptor depend on but the pointers (shapes,
# strides, devices, dtypes, epilogue), for operands read in place: a call seen before skips both
# (filling in a Structure field by field costs ~10 us, more than the launch; a copy with new
# pointers ~1 us) and costs about what torch.matmul does. Each Python call on this path costs
# ~0.2 us, so it makes few.
_matmul_plans = {}


class _MatmulPlan:
    __slots__ = ("desc", "out_shape", "out_dtype", "device", "runtime", "launch", "stream")

    def __init__(self, desc, out_shape, out_dtype, device):
        self.desc = _capi.MatmulDesc.from_buffer_copy(desc)
        self.out_shape, self.out_dtype, self.device = out_shape, out_dtype, device
        self.runtime, self.launch = _runtime(device), library().tilesmith_matmul_ex
        self.stream = (functools.partial(_raw_stream, _index(device)) if _raw_stream is not None
                       else functools.partial(_stream, device))


def _matmul_key(a, b, bias, residual, activation, out_dtype):
    return (a.shape, a.stride(), a.get_device(), b.shape, b.stride(), b.get_device(), a.dtype,
            b.dtype, out_dtype, activation,
            bias is not None and (bias.shape, bias.stride(), bias.dtype, bias.get_device()),
            residual is not None and (residual.shape, residual.stride(), residual.dtype,
                                      residual.get_device()))


def _planned_matmul(a, b, bias, residual, activation, out_dtype):
    """c = a @ b (with the epilogue) by the plan of a call like this one; None where there is
    none yet, or where a pointer is off 16 bytes (a view starting mid-row), which the full path
    copies."""
    plan = _matmul_plans.get(_matmul_key(a, b, bias, residual, activation, out_dtype))
    if plan is None:
        return None
    pa, pb = a.data_ptr(), b.data_ptr()
    p_bias = bias.data_ptr() if bias is not None else 0
    p_residual = residual.data_ptr() if residual is not None else 0
    if (pa | pb | p_bias | p_residual) & 15:
        return None
    c = torch.empty(*plan.out_shape, dtype=plan.out_dtype, device=plan.device)
    desc = _capi.MatmulDesc.from_buffer_copy(plan.desc)
    desc.a, desc.b, desc.c = pa, pb, c.data_ptr()
    if p_bias or p_residual:
        desc.bias, desc.residual = p_bias, p_residual
    status = plan.launch(plan.runtime, desc, plan.stream())
    if status:
        _capi.check(library(), status, "tilesmith.matmul")
    return c


def _matmul_impl(a, b, bias, residual, activation, out_dtype):
    c = _planned_matmul(a, b, bias, residual, activation, out_dtype)
    if c is not None:
        return c
    device = a.device
    c = torch.empty(_matmul_out_shape(a, b), dtype=out_dtype, device=device)
    bias_read = _packed(bias) if bias is not None else None
    residual_read = _packed(residual) if residual is not None else None
    desc, keep = _matmul_desc(a, b, c, out_dtype, bias_read, residual_read, activation)
    lib = library()
    _capi.check(lib, lib.tilesmith_matmul_ex(_runtime(device), ctypes.byref(desc), _stream(device)),
                "tilesmith.matmul")
    if keep[0] is a and keep[1] is b and bias_read is bias and residual_read is residual:
        if len(_matmul_plans) >= 4096:  # a program sweeping shapes: start over
            _matmul_plans.clear()
        key = _matmul_key(a, b, bias, residual, activation, out_dtype)
        _matmul_plans[key] = _MatmulPlan(desc, tuple(c.shape), out_dtype, device)
    del keep
    return c


@torch.library.custom_op("tilesmith::matmul", mutates_args=())
def _matmul_op(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None,
               residual: torch.Tensor | None, activation: str, out_dtype: torch.dtype) -> torch.Tensor:
    return _matmul_impl(a, b, bias, residual, activation, out_dtype)


def _direct(a, b, bias, residual):
    """Whether a call may skip torch's dispatcher (~15 us a call for a custom op, more than a
    small kernel's launch) and run the implementation itself: outside torch.compile's tracing,
    on plain tensors (no fake or functional subclasses), with no gradient to record. Anything
    else goes through the registered custom op."""
    if torch.compiler.is_compiling():
        return False
    grad = torch.is_grad_enabled()
    for t in (a, b) if bias is None and residual is None else (a, b, bias, residual):
        if t is not None and (type(t) is not torch.Tensor or (grad and t.requires_grad)):
            return False
    return True


@_matmul_op.register_fake
def _(a, b, bias, residual, activation, out_dtype):
    return a.new_empty(_matmul_out_shape(a, b), dtype=out_dtype)


def _matmul_setup(ctx, inputs, output):
    a, b, bias, residual, activation, out_dtype = inputs
    if activation != "none" or bias is not None:
        ctx.differentiable = False
    else:
        ctx.differentiable = True
        ctx.save_for_backward(a, b)
    ctx.has_residual = residual is not None


def _matmul_backward(ctx, grad):
    if not ctx.differentiable:
        raise RuntimeError("tilesmith.matmul: the backward of a fused bias or activation is not "
                           "built; call tilesmith.matmul without them and add torch's")
    a, b = ctx.saved_tensors
    grad = grad.to(a.dtype)
    grad_a = matmul(grad, b.transpose(-1, -2), out_dtype=a.dtype)
    if b.dim() == 2 and grad.dim() == 3:  # one B for every batch: sum over the batches
        grad_b = matmul(a.reshape(-1, a.shape[-1]).t(), grad.reshape(-1, grad.shape[-1]),
                        out_dtype=b.dtype)
    else:
        grad_b = matmul(a.transpose(-1, -2), grad, out_dtype=b.dtype)
    return grad_a, grad_b, None, (grad if ctx.has_residual else None), None, None


_matmul_op.register_autograd(_matmul_backward, setup_context=_matmul_setup)


def matmul(a, b, *, bias=None, residual=None, activation=None, out_dtype=None):
    """act(a @ b + bias) + residual. a: (M, K) or (batch, M, K); b: (K, N) or (batch, K, N) (a
    transposed view, e.g. W.t() of a linear layer's weight, is read in place); bf16 or f16 in
    (f32 in runs as tf32); out_dtype: a's dtype (default) or torch.float32; bias: (N,)
    and residual: like the output, of the output's dtype; activation: None, "relu", "gelu" (the
    erf form) or "silu"."""
    if _direct(a, b, bias, residual):
        # Operands like these passed the checks before: their plan runs unchecked.
        c = _planned_matmul(a, b, bias, residual, activation or "none", out_dtype or a.dtype)
        if c is not None:
            return c
        out = _check_matmul(a, b, bias, residual, activation, out_dtype)
        return _matmul_impl(a, b, bias, residual, activation or "none", out)
    out = _check_matmul(a, b, bias, residual, activation, out_dtype)
    return _matmul_op(a, b, bias, residual, activation or "none", out)


# ---- row ops ----------------------------------------------------------------------------------

def _rows_call(op, x, y, weight=None, bias=None, residual=None, mean=None, rstd=None,
               activation=None, eps=1e-5):
    device = x.device
    x2, x_stride = _rows(op, x)
    residual2, residual_stride = _rows(op, residual) if residual is not None else (None, 0)
    weight = _packed(weight) if weight is not None else None
    bias = _packed(bias) if bias is not None else None
    desc = _capi.RowsDesc(
        op=_capi.ROW_OP[op], x=_ptr(x2), y=_ptr(y), rows=x2.shape[0], cols=x2.shape[1],
        dtype=_dtype(x, op), out_dtype=_dtype(y, op), weight=_ptr(weight), bias=_ptr(bias),
        residual=_ptr(residual2), mean=_ptr(mean), rstd=_ptr(rstd),
        activation=_capi.ACTIVATION[activation], epsilon=eps, x_stride=x_stride,
        y_stride=y.shape[-1], residual_stride=residual_stride)
    lib = library()
    _capi.check(lib, lib.tilesmith_rows(_runtime(device), ctypes.byref(desc), _stream(device)),
                f"tilesmith.{op}")


def _stats_shape(x):
    return tuple(x.shape[:-1])


@torch.library.custom_op("tilesmith::softmax", mutates_args=())
def _softmax_op(x: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    y = torch.empty(x.shape, dtype=out_dtype, device=x.device)
    _rows_call("softmax", x, y)
    return y


@_softmax_op.register_fake
def _(x, out_dtype):
    return x.new_empty(x.shape, dtype=out_dtype)


@torch.library.custom_op("tilesmith::layernorm", mutates_args=())
def _layernorm_op(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                  eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    mean = torch.empty(_stats_shape(x), dtype=torch.float32, device=x.device)
    rstd = torch.empty_like(mean)
    _rows_call("layernorm", x, y, weight, bias, mean=mean, rstd=rstd, eps=eps)
    return y, mean, rstd


@_layernorm_op.register_fake
def _(x, weight, bias, eps):
    stats = x.new_empty(_stats_shape(x), dtype=torch.float32)
    return x.new_empty(x.shape), stats, torch.empty_like(stats)


@torch.library.custom_op("tilesmith::rmsnorm", mutates_args=())
def _rmsnorm_op(x: torch.Tensor, weight: torch.Tensor | None,
                eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    rstd = torch.empty(_stats_shape(x), dtype=torch.float32, device=x.device)
    _rows_call("rmsnorm", x, y, weight, rstd=rstd, eps=eps)
    return y, rstd


@_rmsnorm_op.register_fake
def _(x, weight, eps):
    return x.new_empty(x.shape), x.new_empty(_stats_shape(x), dtype=torch.float32)


@torch.library.custom_op("tilesmith::norm_act_residual", mutates_args=())
def _norm_act_residual_op(op: str, x: torch.Tensor, residual: torch.Tensor,
                          weight: torch.Tensor | None, bias: torch.Tensor | None,
                          activation: str, eps: float) -> torch.Tensor:
    y = torch.empty(x.shape, dtype=residual.dtype, device=x.device)
    _rows_call(op, x, y, weight, bias, residual=residual, activation=activation, eps=eps)
    return y


@_norm_act_residual_op.register_fake
def _(op, x, residual, weight, bias, activation, eps):
    return x.new_empty(x.shape, dtype=residual.dtype)


def _rows_backward_call(op, x, dy, dx, weight=None, mean=None, rstd=None, dweight=None,
                        dbias=None):
    device = x.device
    x2, x_stride = _rows(op, x)
    dy2, dy_stride = _rows(op, dy)
    weight = _packed(weight) if weight is not None else None
    desc = _capi.RowsBackwardDesc(
        op=_capi.ROW_BACKWARD_OP[op], x=_ptr(x2), dy=_ptr(dy2), dx=_ptr(dx), rows=x2.shape[0],
        cols=x2.shape[1], dtype=_dtype(dx, op), out_dtype=_dtype(dy, op), weight=_ptr(weight),
        mean=_ptr(mean), rstd=_ptr(rstd), dweight=_ptr(dweight), dbias=_ptr(dbias),
        x_stride=x_stride, dy_stride=dy_stride, dx_stride=dx.shape[-1])
    lib = library()
    _capi.check(lib, lib.tilesmith_rows_backward(_runtime(device), ctypes.byref(desc),
                                                 _stream(device)), f"tilesmith.{op}")


@torch.library.custom_op("tilesmith::softmax_backward", mutates_args=())
def _softmax_backward_op(y: torch.Tensor, dy: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    dx = torch.empty(y.shape, dtype=dtype, device=y.device)
    _rows_backward_call("softmax_backward", y, dy, dx)
    return dx


@_softmax_backward_op.register_fake
def _(y, dy, dtype):
    return y.new_empty(y.shape, dtype=dtype)


@torch.library.custom_op("tilesmith::norm_backward", mutates_args=())
def _norm_backward_op(op: str, x: torch.Tensor, dy: torch.Tensor, weight: torch.Tensor | None,
                      mean: torch.Tensor | None, rstd: torch.Tensor,
                      want_dbias: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dx, dweight and dbias; the last two empty where there is no weight or no bias."""
    dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    cols = x.shape[-1]
    dweight = torch.empty(cols if weight is not None else 0, dtype=x.dtype, device=x.device)
    dbias = torch.empty(cols if want_dbias else 0, dtype=x.dtype, device=x.device)
    _rows_backward_call(op, x, dy, dx, weight, mean, rstd, dweight if weight is not None else None,
                        dbias if want_dbias else None)
    return dx, dweight, dbias


@_norm_backward_op.register_fake
def _(op, x, dy, weight, mean, rstd, want_dbias):
    cols = x.shape[-1]
    return (x.new_empty(x.shape), x.new_empty(cols if weight is not None else 0),
            x.new_empty(cols if want_dbias else 0))


def _softmax_setup(ctx, inputs, output):
    ctx.save_for_backward(output)
    ctx.x_dtype = inputs[0].dtype


def _softmax_backward(ctx, grad):
    (y,) = ctx.saved_tensors
    return _softmax_backward_op(y, grad.to(y.dtype).contiguous(), ctx.x_dtype), None


_softmax_op.register_autograd(_softmax_backward, setup_context=_softmax_setup)


def _layernorm_setup(ctx, inputs, output):
    x, weight, bias, eps = inputs
    _, mean, rstd = output
    ctx.save_for_backward(x, weight, mean, rstd)
    ctx.has_bias = bias is not None


def _layernorm_backward(ctx, grad_y, grad_mean, grad_rstd):
    x, weight, mean, rstd = ctx.saved_tensors
    dx, dweight, dbias = _norm_backward_op("layernorm_backward", x, grad_y.contiguous(), weight,
                                           mean, rstd, ctx.has_bias)
    return dx, dweight if weight is not None else None, dbias if ctx.has_bias else None, None


_layernorm_op.register_autograd(_layernorm_backward, setup_context=_layernorm_setup)


def _rmsnorm_setup(ctx, inputs, output):
    x, weight, eps = inputs
    ctx.save_for_backward(x, weight, output[1])


def _rmsnorm_backward(ctx, grad_y, grad_rstd):
    x, weight, rstd = ctx.saved_tensors
    dx, dweight, _ = _norm_backward_op("rmsnorm_backward", x, grad_y.contiguous(), weight, None,
                                       rstd, False)
    return dx, dweight if weight is not None else None, None


_rmsnorm_op.register_autograd(_rmsnorm_backward, setup_context=_rmsnorm_setup)


def _check_rows(op, x, *, weight=None, bias=None, residual=None,
                allowed=("f16", "bf16", "f32")):
    _cuda(op, x, weight, bias, residual)
    _dtype(x, op, allowed)
    cols = x.shape[-1] if x.dim() else 0
    for name, t in (("weight", weight), ("bias", bias)):
        _vector(op, name, t, cols)
        if t is not None and t.dtype != x.dtype:
            raise ValueError(f"tilesmith.{op}: {name} is {t.dtype}, x {x.dtype}: one dtype")
    _same_rows(op, x, "residual", residual)


def softmax(x, *, out_dtype=None):
    """softmax over the last dimension, fp32 inside; differentiable."""
    _check_rows("softmax", x)
    return _softmax_op(x, out_dtype or x.dtype)


def layernorm(x, weight=None, bias=None, eps=1e-5):
    """torch.nn.functional.layer_norm over the last dimension; differentiable (x, weight, bias)."""
    _check_rows("layernorm", x, weight=weight, bias=bias)
    return _layernorm_op(x, _vector("layernorm", "weight", weight, x.shape[-1]),
                         _vector("layernorm", "bias", bias, x.shape[-1]), float(eps))[0]


def rmsnorm(x, weight=None, eps=1e-5):
    """torch.nn.functional.rms_norm over the last dimension; differentiable (x, weight)."""
    _check_rows("rmsnorm", x, weight=weight)
    return _rmsnorm_op(x, _vector("rmsnorm", "weight", weight, x.shape[-1]), float(eps))[0]


def layernorm_act_residual(x, residual, weight=None, bias=None, activation=None, eps=1e-5):
    """act(layer_norm(x)) + residual in one pass; the output has residual's dtype. Forward only."""
    _check_rows("layernorm_act_residual", x, weight=weight, bias=bias, residual=residual)
    return _norm_act_residual_op("layernorm_act_residual", x, residual,
                                 _vector("layernorm_act_residual", "weight", weight, x.shape[-1]),
                                 _vector("layernorm_act_residual", "bias", bias, x.shape[-1]),
                                 activation or "none", float(eps))


def rmsnorm_act_residual(x, residual, weight=None, activation=None, eps=1e-5):
    """act(rms_norm(x)) + residual in one pass; the output has residual's dtype. Forward only."""
    _check_rows("rmsnorm_act_residual", x, weight=weight, residual=residual)
    return _norm_act_residual_op("rmsnorm_act_residual", x, residual,
                                 _vector("rmsnorm_act_residual", "weight", weight, x.shape[-1]),
                                 None, activation or "none", float(eps))


# ---- multi_sum --------------------------------------------------------------------------------

@torch.library.custom_op("tilesmith::multi_sum", mutates_args=())
def _multi_sum_op(tensors: list[torch.Tensor], mean: bool) -> torch.Tensor:
    device = tensors[0].device
    flat = [t.contiguous() for t in tensors]  # any start: the kernel reads elements
    # The table of {data, length} is copied from the host: multi_sum cannot be captured in a
    # CUDA graph (torch allocates the device copy on this stream, so it outlives the kernel).
    table = torch.tensor([v for t in flat for v in (t.data_ptr(), t.numel())],
                         dtype=torch.int64).to(device)
    out = torch.empty(len(flat), dtype=torch.float32, device=device)
    total = sum(t.numel() for t in flat)
    lib = library()
    _capi.check(lib, lib.tilesmith_multi_sum(_runtime(device), table.data_ptr(), len(flat), total,
                                             _dtype(flat[0], "multi_sum"), _capi.DTYPE["f32"],
                                             out.data_ptr(), int(mean), _stream(device)),
                "tilesmith.multi_sum")
    return out


@_multi_sum_op.register_fake
def _(tensors, mean):
    return tensors[0].new_empty(len(tensors), dtype=torch.float32)


def multi_sum(tensors, *, mean=False):
    """The sums (means with mean=True) of many tensors of one dtype and any lengths, in one
    launch: an fp32 tensor of len(tensors) values."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError("tilesmith.multi_sum: no tensors")
    _cuda("multi_sum", *tensors)
    if len({t.dtype for t in tensors}) > 1:
        raise ValueError("tilesmith.multi_sum: the tensors must share one dtype")
    _dtype(tensors[0], "multi_sum")
    if any(t.numel() == 0 for t in tensors):
        raise ValueError("tilesmith.multi_sum: a tensor is empty")
    return _multi_sum_op(tensors, bool(mean))


# ---- attention --------------------------------------------------------------------------------

def _attention_layout(layout):
    if layout not in ("bshd", "bhsd"):
        raise ValueError(f"tilesmith.attention: layout {layout!r} is not 'bshd' or 'bhsd'")
    return _capi.BSHD if layout == "bshd" else _capi.BHSD


def _dims(t, layout):
    """(batch, heads, seq, head_dim) and the (batch, head, row) strides of a 4D tensor."""
    if layout == "bshd":
        b, s, h, d = t.shape
        return (b, h, s, d), (t.stride(0), t.stride(2), t.stride(1))
    b, h, s, d = t.shape
    return (b, h, s, d), (t.stride(0), t.stride(1), t.stride(2))


def _attention_desc(q, k, v, o, lse, causal, scale, layout):
    (b, h, sq, d), q_strides = _dims(q, layout)
    (_, kvh, sk, _), k_strides = _dims(k, layout)
    _, v_strides = _dims(v, layout)
    _, o_strides = _dims(o, layout)
    return _capi.AttentionDesc(
        q=_ptr(q), k=_ptr(k), v=_ptr(v), o=_ptr(o), lse=_ptr(lse), batch=b, heads=h,
        kv_heads=kvh, seq_q=sq, seq_k=sk, head_dim=d, dtype=_dtype(q, "attention", ("f16", "bf16")),
        causal=int(causal), layout=_attention_layout(layout), scale=scale,
        q_strides=(ctypes.c_int64 * 3)(*q_strides), k_strides=(ctypes.c_int64 * 3)(*k_strides),
        v_strides=(ctypes.c_int64 * 3)(*v_strides), o_strides=(ctypes.c_int64 * 3)(*o_strides))


def _lse_shape(q, layout):
    (b, h, sq, _), _ = _dims(q, layout)
    return (b, h, sq)


def _unit_last(t):
    return t if t.stride(-1) == 1 and t.data_ptr() % 16 == 0 else _packed(t)


@torch.library.custom_op("tilesmith::attention", mutates_args=())
def _attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float,
                  layout: str) -> tuple[torch.Tensor, torch.Tensor]:
    q, k, v = _unit_last(q), _unit_last(k), _unit_last(v)
    o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(_lse_shape(q, layout), dtype=torch.float32, device=q.device)
    desc = _attention_desc(q, k, v, o, lse, causal, scale, layout)
    lib = library()
    _capi.check(lib, lib.tilesmith_attention(_runtime(q.device), ctypes.byref(desc),
                                             _stream(q.device)), "tilesmith.attention")
    return o, lse


@_attention_op.register_fake
def _(q, k, v, causal, scale, layout):
    return q.new_empty(q.shape), q.new_empty(_lse_shape(q, layout), dtype=torch.float32)


@torch.library.custom_op("tilesmith::attention_backward", mutates_args=())
def _attention_backward_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                           lse: torch.Tensor, d_o: torch.Tensor, causal: bool, scale: float,
                           layout: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    q, k, v, o, d_o = (_unit_last(t) for t in (q, k, v, o, d_o))
    dq, dk, dv = (torch.empty(t.shape, dtype=t.dtype, device=t.device) for t in (q, k, v))
    forward = _attention_desc(q, k, v, o, lse, causal, scale, layout)
    strides = lambda t: (ctypes.c_int64 * 3)(*_dims(t, layout)[1])
    desc = _capi.AttentionBackwardDesc(
        forward=forward, d_o=_ptr(d_o), dq=_ptr(dq), dk=_ptr(dk), dv=_ptr(dv),
        do_strides=strides(d_o), dq_strides=strides(dq), dk_strides=strides(dk),
        dv_strides=strides(dv))
    lib = library()
    _capi.check(lib, lib.tilesmith_attention_backward(_runtime(q.device), ctypes.byref(desc),
                                                      _stream(q.device)),
                "tilesmith.attention_backward")
    return dq, dk, dv


@_attention_backward_op.register_fake
def _(q, k, v, o, lse, d_o, causal, scale, layout):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _attention_setup(ctx, inputs, output):
    q, k, v, causal, scale, layout = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse)
    ctx.causal, ctx.scale, ctx.layout = causal, scale, layout


def _attention_backward(ctx, grad_o, grad_lse):
    q, k, v, o, lse = ctx.saved_tensors
    dq, dk, dv = _attention_backward_op(q, k, v, o, lse, grad_o.to(q.dtype), ctx.causal,
                                        ctx.scale, ctx.layout)
    return dq, dk, dv, None, None, None


_attention_op.register_autograd(_attention_backward, setup_context=_attention_setup)


def attention(q, k, v, *, causal=False, scale=None, layout="bshd", return_lse=False):
    """softmax(q k^T * scale + causal mask) v without the score matrix; differentiable.
    layout "bshd": q (batch, seq_q, heads, head_dim), k and v (batch, seq_k, kv_heads,
    head_dim); "bhsd": (batch, heads, seq, head_dim). kv_heads divides heads (GQA, MQA); the
    causal mask is aligned bottom-right; scale defaults to 1/sqrt(head_dim). bf16 or f16."""
    op = "attention"
    _cuda(op, q, k, v)
    _attention_layout(layout)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError(f"tilesmith.attention: {name} must be 4D ({layout}), got {t.dim()}D")
        if t.dtype != q.dtype:
            raise ValueError(f"tilesmith.attention: {name} is {t.dtype}, q {q.dtype}: one dtype")
    _dtype(q, op, ("f16", "bf16"))
    if k.shape != v.shape:
        raise ValueError(f"tilesmith.attention: k is {tuple(k.shape)}, v {tuple(v.shape)}")
    o, lse = _attention_op(q, k, v, bool(causal), float(scale) if scale else 0.0, layout)
    return (o, lse) if return_lse else o


# ---- what a call would run --------------------------------------------------------------------

def describe(op, *args, **kwargs):
    """(config, tuned): the kernel config the runtime would use for `op` called on these tensors
    (the tuned winner's when `tuned`), without running it. The arguments are the op's own."""
    lib = library()
    if op == "matmul":
        a, b = args[:2]
        out = _check_matmul(a, b, kwargs.get("bias"), kwargs.get("residual"),
                            kwargs.get("activation"), kwargs.get("out_dtype"))
        desc, _ = _matmul_desc(a, b, None, out, kwargs.get("bias"), kwargs.get("residual"),
                               kwargs.get("activation"))
        return _capi.config_of(lib, lib.tilesmith_matmul_ex_config, _runtime(a.device),
                               ctypes.byref(desc))
    if op in _capi.ROW_OP:
        x = args[0]
        y_dtype = kwargs.get("residual", x).dtype if "residual" in kwargs else x.dtype
        x2, stride = _rows(op, x)
        present = lambda name: 16 if kwargs.get(name) is not None else None  # non-null, aligned: present
        desc = _capi.RowsDesc(op=_capi.ROW_OP[op], rows=x2.shape[0], cols=x2.shape[1],
                              dtype=_dtype(x, op), out_dtype=_capi.DTYPE[_TORCH_DTYPE[y_dtype]],
                              weight=present("weight"), bias=present("bias"),
                              residual=present("residual"),
                              activation=_capi.ACTIVATION[kwargs.get("activation")],
                              epsilon=kwargs.get("eps", 1e-5), x_stride=stride,
                              y_stride=x2.shape[1])
        return _capi.config_of(lib, lib.tilesmith_rows_config, _runtime(x.device), ctypes.byref(desc))
    if op == "attention":
        q, k, v = args[:3]
        layout = kwargs.get("layout", "bshd")
        desc = _attention_desc(q, k, v, q, None, kwargs.get("causal", False),
                               float(kwargs.get("scale") or 0.0), layout)
        return _capi.config_of(lib, lib.tilesmith_attention_config, _runtime(q.device),
                               ctypes.byref(desc))
    if op == "multi_sum":
        tensors = list(args[0])
        return _capi.config_of(lib, lib.tilesmith_multi_sum_config, _runtime(tensors[0].device),
                               len(tensors), sum(t.numel() for t in tensors),
                               _dtype(tensors[0], op), _capi.DTYPE["f32"],
                               int(kwargs.get("mean", False)))
    raise ValueError(f"tilesmith.describe: op {op!r} is not matmul, a row op, multi_sum or "
                     f"attention")
