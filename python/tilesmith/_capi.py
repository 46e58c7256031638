"""tilesmith's C ABI (runtime/include/tilesmith/tilesmith.h) through ctypes: the library found and
loaded once, every signature declared (without argtypes ctypes would pass Python ints as 32-bit C
ints, silently truncating 64-bit device pointers and sizes), the descriptors as Structures laid out
as the C compiler lays them out, and a status turned into an exception carrying the library's
message. Needs no torch: the benchmarks in bench/ use it too."""
import ctypes
import os

DTYPE = {"f16": 0, "bf16": 1, "f32": 2}                     # enum tilesmith_dtype
ROW_OP = {"softmax": 0, "layernorm": 1, "rmsnorm": 2,       # enum tilesmith_row_op
          "layernorm_act_residual": 3, "rmsnorm_act_residual": 4}
ROW_BACKWARD_OP = {"softmax_backward": 0, "layernorm_backward": 1,  # enum tilesmith_row_backward_op
                   "rmsnorm_backward": 2}
ACTIVATION = {None: 0, "none": 0, "relu": 1, "gelu": 2, "silu": 3}  # enum tilesmith_activation
ROW_MAJOR, COLUMN_MAJOR = 0, 1                               # enum tilesmith_layout
BSHD, BHSD = 0, 1                                            # enum tilesmith_attention_layout
INVALID_ARGUMENT = 2                                         # enum tilesmith_status

_vp, _i64, _int = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int


class MatmulDesc(ctypes.Structure):  # tilesmith_matmul_desc; zero strides are the packed ones
    _fields_ = [("a", _vp), ("b", _vp), ("c", _vp),
                ("batch", _i64), ("m", _i64), ("n", _i64), ("k", _i64),
                ("dtype", _int), ("out_dtype", _int), ("a_layout", _int), ("b_layout", _int),
                ("bias", _vp), ("residual", _vp), ("activation", _int),
                ("lda", _i64), ("ldb", _i64), ("ldc", _i64), ("ld_residual", _i64),
                ("strided_batches", _int),
                ("batch_stride_a", _i64), ("batch_stride_b", _i64), ("batch_stride_c", _i64),
                ("batch_stride_residual", _i64)]


class RowsDesc(ctypes.Structure):  # tilesmith_rows_desc
    _fields_ = [("op", _int), ("x", _vp), ("y", _vp), ("rows", _i64), ("cols", _i64),
                ("dtype", _int), ("out_dtype", _int), ("weight", _vp), ("bias", _vp),
                ("residual", _vp), ("mean", _vp), ("rstd", _vp), ("activation", _int),
                ("epsilon", ctypes.c_double), ("x_stride", _i64), ("y_stride", _i64),
                ("residual_stride", _i64)]


class RowsBackwardDesc(ctypes.Structure):  # tilesmith_rows_backward_desc
    _fields_ = [("op", _int), ("x", _vp), ("dy", _vp), ("dx", _vp), ("rows", _i64),
                ("cols", _i64), ("dtype", _int), ("out_dtype", _int), ("weight", _vp),
                ("mean", _vp), ("rstd", _vp), ("dweight", _vp), ("dbias", _vp),
                ("x_stride", _i64), ("dy_stride", _i64), ("dx_stride", _i64)]


class AttentionDesc(ctypes.Structure):  # tilesmith_attention_desc
    _fields_ = [("q", _vp), ("k", _vp), ("v", _vp), ("o", _vp), ("lse", _vp),
                ("batch", _i64), ("heads", _i64), ("kv_heads", _i64), ("seq_q", _i64),
                ("seq_k", _i64), ("head_dim", _i64), ("dtype", _int), ("causal", _int),
                ("layout", _int), ("scale", ctypes.c_double),
                ("q_strides", _i64 * 3), ("k_strides", _i64 * 3), ("v_strides", _i64 * 3),
                ("o_strides", _i64 * 3)]


class AttentionBackwardDesc(ctypes.Structure):  # tilesmith_attention_backward_desc
    _fields_ = [("forward", AttentionDesc), ("d_o", _vp), ("dq", _vp), ("dk", _vp), ("dv", _vp),
                ("do_strides", _i64 * 3), ("dq_strides", _i64 * 3), ("dk_strides", _i64 * 3),
                ("dv_strides", _i64 * 3)]


class TilesmithError(RuntimeError):
    """A call of the C ABI failed; the message is the library's (tilesmith_last_error)."""


class InvalidArgument(TilesmithError, ValueError):
    """The call's arguments were refused (TILESMITH_INVALID_ARGUMENT)."""


def _signatures():
    cfg = [ctypes.c_char_p, _int, ctypes.POINTER(_int)]  # config buffer, capacity, tuned
    p = ctypes.POINTER
    return {
        "tilesmith_runtime_create": ([ctypes.c_char_p, _int, p(_vp)], _int),
        "tilesmith_runtime_destroy": ([_vp], None),
        "tilesmith_matmul": ([_vp, _vp, _vp, _vp, _i64, _i64, _i64, _int, _int, _vp], _int),
        "tilesmith_matmul_config": ([_vp, _i64, _i64, _i64, _int, _int] + cfg, _int),
        "tilesmith_matmul_ex": ([_vp, p(MatmulDesc), _vp], _int),
        "tilesmith_matmul_ex_config": ([_vp, p(MatmulDesc)] + cfg, _int),
        "tilesmith_rows": ([_vp, p(RowsDesc), _vp], _int),
        "tilesmith_rows_config": ([_vp, p(RowsDesc)] + cfg, _int),
        "tilesmith_rows_backward": ([_vp, p(RowsBackwardDesc), _vp], _int),
        "tilesmith_rows_backward_config": ([_vp, p(RowsBackwardDesc)] + cfg, _int),
        "tilesmith_multi_sum": ([_vp, _vp, _i64, _i64, _int, _int, _vp, _int, _vp], _int),
        "tilesmith_multi_sum_config": ([_vp, _i64, _i64, _int, _int, _int] + cfg, _int),
        "tilesmith_attention": ([_vp, p(AttentionDesc), _vp], _int),
        "tilesmith_attention_config": ([_vp, p(AttentionDesc)] + cfg, _int),
        "tilesmith_attention_backward": ([_vp, p(AttentionBackwardDesc), _vp], _int),
        "tilesmith_attention_backward_config": ([_vp, p(AttentionBackwardDesc)] + cfg, _int),
        "tilesmith_last_error": ([], ctypes.c_char_p),
    }


def library_candidates():
    """Where the library is looked for, in order: $TILESMITH_LIB; the copy installed inside this
    package (pip install of python/ with a built library); a build folder of the repository
    this file sits in; the system's loader path."""
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = []
    if os.environ.get("TILESMITH_LIB"):
        candidates.append(os.environ["TILESMITH_LIB"])
    candidates.append(os.path.join(here, "lib", "libtilesmith.so.0"))
    candidates.append(os.path.join(os.path.dirname(os.path.dirname(here)), "build", "libtilesmith.so.0"))
    candidates.append("libtilesmith.so.0")
    return candidates


def load(path=None):
    """Loads libtilesmith (path, else the first of library_candidates() that loads) and declares
    every signature. Raises TilesmithError naming what was tried."""
    tried = []
    for candidate in [path] if path else library_candidates():
        if os.sep in candidate and not os.path.isfile(candidate):
            tried.append(f"{candidate}: no such file")
            continue
        try:
            lib = ctypes.CDLL(candidate)
            break
        except OSError as error:
            tried.append(f"{candidate}: {error}")
    else:
        raise TilesmithError("cannot load libtilesmith (set TILESMITH_LIB to it): " + "; ".join(tried))
    try:
        for name, (argtypes, restype) in _signatures().items():
            function = getattr(lib, name)
            function.argtypes, function.restype = argtypes, restype
    except AttributeError as error:  # another library, or an older tilesmith
        raise TilesmithError(f"{candidate} lacks a function of tilesmith's C ABI: {error}") from None
    return lib


def check(lib, status, what):
    """Raises for a non-zero status, with the library's message for this thread."""
    if status != 0:
        message = (lib.tilesmith_last_error() or b"").decode(errors="replace")
        kind = InvalidArgument if status == INVALID_ARGUMENT else TilesmithError
        raise kind(f"{what}: {message}")


def create_runtime(lib, database=None, device=0):
    """A tilesmith_runtime* (database None or "": $TILESMITH_DB, else the user's cache)."""
    handle = ctypes.c_void_p()
    check(lib, lib.tilesmith_runtime_create(database.encode() if database else None, device,
                                            ctypes.byref(handle)), "tilesmith_runtime_create")
    return handle


def config_of(lib, function, *args):
    """Calls one of the *_config functions: (config text, whether it is tuned)."""
    buffer = ctypes.create_string_buffer(1024)
    tuned = ctypes.c_int()
    check(lib, function(*args, buffer, len(buffer), ctypes.byref(tuned)), function.__name__)
    return buffer.value.decode(), bool(tuned.value)
