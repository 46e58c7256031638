// The matmul family's descriptor: its space, constraints, launch plans, reference and work.
// Five templates race in one space, told apart by the `variant` parameter:
//   variant 0: matmul.cuh, mma.sync + cp.async (sm_80+; any M, N, K);
//   variant 1: matmul_sm90.cuh, wgmma + TMA + warp specialization + clusters (sm_90a). TMA reads
//              rows that start on 16-byte boundaries: where K or N is not a multiple of 8, the
//              plan first copies A and B into padded rows in the workspace (counted in every
//              timing), so the tuner decides per shape whether padding pays;
//   variant 2: matmul_decode.cuh, decode shapes (M <= 32, x @ W^T, sm_80+): the weight streamed
//              once into mma.sync fragments straight from global memory;
//   variant 3: matmul_gemv.cuh, M <= 4 rows times a column-major weight (sm_80+): each CTA
//              reduces whole weight rows along K in fp32, as a row reduction reads;
//   variant 4: matmul_gemv_kn.cuh, M <= 32 rows times a row-major B read where it lies at any
//              alignment (sm_80+): a CTA's warps take K's rows in turn down adjacent columns,
//              in fp32 on CUDA cores.
//   Past their rows of A, variants 3 and 4 take C^T = B^T A^T (row_reader_shape): N's few
//   columns are their rows and A their weight, a matrix times a vector.
#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <numeric>
#include <string>

#include "templates/common/activation_reference.hpp"
#include "templates/embedded_files.hpp"
#include "templates/matmul/matmul_family.hpp"
#include "templates/common/copy_rows_params.h"
#include "templates/matmul/matmul_params.h"
#include "templates/matmul/matmul_sm90_params.h"

namespace tilesmith {
namespace {

// A matmul problem as its kernels see it: "MxNxK" or "BxMxNxK" (B batches) and the options
// that change the kernel: a=col and b=col (the operands' layouts, matmul_params.h), bias=1,
// act=relu|gelu|silu and residual=1 (the epilogue), aligned=0 (a call's strides break the
// 16-byte alignment the shape alone would give). Defaults are written by leaving the option
// out, so each problem has one key.
struct MatmulShape {
  long long batch = 1, m, n, k;
  bool a_columns = false, b_columns = false;
  bool strides_unaligned = false;
  int epilogue = 0;  // MatmulEpilogueBits
  long long in_bytes = 2;  // of an element of A and B
  // fp32 operands the sm_90a template reads in place through registers, in either order
  // (matmul_sm90.cuh: its MN-major tf32 A), where every other kernel transposes them first
  // (shape_for sets them from the config): a column-major A without swap_ab, and a row-major
  // B under swap_ab (B is then the kernel's A).
  bool a_in_registers = false;
  bool b_in_registers = false;
  // The sm_90a template's swapped tiles read a row-major B whose rows are off 16 bytes in
  // place, in row phases (reads_weight_in_phases), and A gathered to match (shape_for sets it
  // from the config).
  bool weight_phased = false;
  // The product as swapped() gives it, C^T = B^T A^T: C is written transposed.
  bool c_transposed = false;
  explicit MatmulShape(const Problem& problem)
      : in_bytes(static_cast<long long>(dtype_size(problem.dtype))) {
    const auto& dims = problem.shape;
    const std::size_t at = dims.size() == 4 ? 1 : 0;
    if (at) batch = dims.at(0);
    m = dims.at(at);
    n = dims.at(at + 1);
    k = dims.at(at + 2);
    a_columns = problem.option("a") == "col";
    b_columns = problem.option("b") == "col";
    const std::string act = problem.option("act");
    epilogue = act == "relu" ? kActRelu : act == "gelu" ? kActGelu : act == "silu" ? kActSilu : 0;
    if (problem.option("bias") == "1") epilogue |= kEpilogueBias;
    if (problem.option("residual") == "1") epilogue |= kEpilogueResidual;
    strides_unaligned = problem.option("aligned") == "0";
  }
  int layout() const { return (a_columns ? kColumnMajorA : 0) | (b_columns ? kColumnMajorB : 0); }
  // The stored matrices: A is m x k, or k x m when column-major; B is k x n, or n x k.
  long long a_rows() const { return a_columns ? k : m; }
  long long a_row_length() const { return a_columns ? m : k; }
  long long b_rows() const { return b_columns ? n : k; }
  long long b_row_length() const { return b_columns ? k : n; }
  // cp.async and TMA move 16 bytes: stored rows must start on 16-byte boundaries.
  long long per_16_bytes() const { return 16 / in_bytes; }
  // The elements a row reader (gemv, decode) loads at once from rows of K: 16 bytes in an
  // aligned problem, else as many as divide K (8, 4, 2 bytes or one element). A call whose
  // strides are off them is read element by element (checked by the kernel at run time).
  int row_vector() const {
    const int widest = static_cast<int>(per_16_bytes());
    int vector = widest;
    while (k % vector || (vector == widest && !aligned())) vector /= 2;
    return vector;
  }
  bool rows_aligned() const {
    return a_row_length() % per_16_bytes() == 0 && b_row_length() % per_16_bytes() == 0;
  }
  bool aligned() const { return rows_aligned() && !strides_unaligned; }
  // A copied operand's row (padded or transposed into the workspace): on 128-byte boundaries,
  // where TMA's 128-byte box rows then fill whole L2 lines; rows shorter than a line on 16.
  long long padded_row_length(long long length) const {
    const long long unit = length * in_bytes >= 128 ? 128 / in_bytes : per_16_bytes();
    return (length + unit - 1) / unit * unit;
  }
  // How many of A and B TMA reads in rows off 128-byte boundaries, taking the rows as stored:
  // a box row on one is one L2 line, where rows off it straddle two and cost two requests
  // (1152x4224x6424 against 6400: 192x128 tiles 1.8x slower, 128x256 pairs 1.14x, cuBLAS
  // 1.14x; docs/perf/matmul.md v23). Copied operands (transposed, or padded) are on them.
  int operands_off_lines() const { return a_off_lines() + b_off_lines(); }
  bool a_off_lines() const { return off_lines(a_row_length(), transposes_a() || weight_phased); }
  bool b_off_lines() const { return off_lines(b_row_length(), transposes_b()); }
  bool off_lines(long long row_length, bool copied) const {
    return !copied && row_length % per_16_bytes() == 0 && row_length * in_bytes % 128 != 0;
  }
  // Whether an aligned problem needs C's and the residual's strides on 16-byte boundaries too,
  // besides A's and B's (whose rows the kernels move in 16-byte pieces): only with row-major
  // B, where N is a multiple of 8 and the mma.sync kernel stores C's column pairs unchecked.
  // With column-major B every kernel checks C at run time, so x @ W^T with an odd N (a
  // vocabulary's logits) stays an aligned problem.
  bool output_strides_matter() const { return !b_columns; }
  bool has_bias() const { return epilogue & kEpilogueBias; }
  bool has_residual() const { return epilogue & kEpilogueResidual; }
  // The product as the swap_ab kernel computes it: C^T = B^T A^T, so the kernel's M is N, its
  // A is B read transposed (row-major where B is column-major) and its B is A transposed.
  MatmulShape swapped() const {
    MatmulShape t = *this;
    std::swap(t.m, t.n);
    t.a_columns = !b_columns;
    t.b_columns = !a_columns;
    t.c_transposed = !c_transposed;
    return t;
  }
  // fp32 inputs are multiplied as tf32, which both templates read K-major only (wgmma's rule;
  // ldmatrix's transposing form moves 16-bit halves): the plan first transposes a column-major
  // A or a row-major B into the workspace, its rows padded (padded_row_length), except an
  // operand read through registers (a_in_registers, b_in_registers).
  // A column-major A of at most 64 rows is transposed too where B is large (4M elements or
  // more): read row-major, a few rows take the swap_ab tiles that stream B, where a
  // column-major A held them to 128-row tiles (14x2200x9920 0.67 -> 1.58x cuBLAS; v22). From
  // 17 to 64 rows, in rounds: 0.95-1.80x on 22 shapes, 1.26x on the mean (41x14929x4904 cc
  // 0.0610 ms against 0.0801; 64x14336x4096 cc and 48x8192x8192 cr lost 3%, 48x4000x1100 cr
  // 5%: v39). Against a small B the transpose's launch costs more than it buys (2x410x168:
  // 0.87 -> 0.70x; v22).
  bool tf32() const { return in_bytes == 4; }
  bool transposes_a() const {
    return a_columns && !a_in_registers && !weight_phased &&
           (tf32() || (m <= 64 && n * k >= (4ll << 20)));
  }
  // A row-major B of a narrow N (up to 32 columns) under more than 64 rows of A is transposed
  // too, so that its K-major rows fill the narrow tiles of N (read MN-major, each stage of B is
  // 64 columns wide, mostly TMA's zeros): where that adds no launch (B's rows are copied anyway,
  // off 16 bytes, and A is read in place), or where N is at most 16 and A (8M elements or more)
  // streams long enough to pay for one. Elsewhere the launch cost more than the tiles saved
  // (155x16x104 cr 0.68x, 93x3x384 cr 0.77x, 8192x32x4096 0.95x; 4148x7x2568 gained 1.64x,
  // 16384x8x4096 1.23-1.29x: docs/perf/matmul.md v29).
  bool transposes_b() const {
    if (b_columns || b_in_registers) return false;
    if (tf32()) return true;
    if (n > 32 || m <= 64) return false;
    const bool b_copied = b_row_length() % per_16_bytes() != 0 || strides_unaligned;
    const bool a_in_place = a_row_length() % per_16_bytes() == 0 && !strides_unaligned;
    return (b_copied && a_in_place) || (n <= 16 && m * k >= (8ll << 20));
  }
  // Whether the mma.sync kernel may move every row it reads in 16-byte chunks: a transposed
  // copy's rows are padded; an operand read in place needs its rows and strides aligned.
  bool reads_aligned() const {
    const auto in_place_ok = [&](long long row_length) {
      return row_length % per_16_bytes() == 0 && !strides_unaligned;
    };
    return (transposes_a() || in_place_ok(a_row_length())) &&
           (transposes_b() || in_place_ok(b_row_length()));
  }
  // Whether the sm_90a template's swapped tiles (a few rows of A) read B in row phases
  // (MatmulSm90PhasedParams) instead of copying it into padded rows: a 16-bit row-major B whose
  // rows are off 16 bytes, one batch, and A (gathered to match the phases, a pass over it) no
  // larger than B, or copied anyway (its rows off 16 bytes too). The copy reads and writes all
  // of B before the product reads it again (40x4906x9568: 0.117 ms where cuBLAS reads B once
  // in 0.051; docs/perf/matmul.md v35). Tiles whose clusters share the weight (unswapped
  // tiles, a swapped pair along N) and swapped tiles of 128 rows of A or more (C^T out
  // through the staging slots, not the exchange buffer that adds up the phases) pad it as
  // before.
  bool reads_weight_in_phases() const {
    const bool b_rows_off = b_row_length() % per_16_bytes() != 0;
    const bool a_rows_off = a_row_length() % per_16_bytes() != 0;
    return in_bytes == 2 && !b_columns && batch == 1 && !strides_unaligned && b_rows_off &&
           !transposes_b() && (m <= n || a_rows_off);
  }
  // The product as the kernels read it, after those transposes (and A's gather).
  MatmulShape as_read() const {
    MatmulShape t = *this;
    if (transposes_a() || weight_phased) t.a_columns = false;
    if (transposes_b()) t.b_columns = true;
    return t;
  }
};

// How the sm_90a kernel reads a row-major weight whose rows are off 16 bytes
// (MatmulSm90PhasedParams): rows G q + h (phase h) lie G rows apart, G = 16 / gcd(row bytes,
// 16), which is a multiple of 16 bytes; each phase's rows padded to whole 128-byte k blocks.
// Fewer phases where K has fewer rows than G (each then one row).
struct WeightPhases {
  int stride;   // G: rows of one phase lie this many apart
  int phases;   // min(G, K)
  long long phase_k;  // k rows of each phase in the product, a multiple of the k block
  long long k() const { return phases * phase_k; }  // the product's K, permuted
  static WeightPhases of(long long k, long long row_bytes, long long in_bytes) {
    const long long block_k = 128 / in_bytes;
    const int g = static_cast<int>(16 / std::gcd(row_bytes, 16ll));
    const long long phase_rows = (k + g - 1) / g;
    return {g, static_cast<int>(std::min<long long>(g, k)),
            (phase_rows + block_k - 1) / block_k * block_k};
  }
  // The most K any row stride makes (the workspace of the gathered A).
  static long long most_k(long long k, long long in_bytes) {
    long long most = 0;
    for (long long row_bytes = in_bytes; row_bytes <= 16; row_bytes *= 2)
      most = std::max(most, of(k, row_bytes, in_bytes).k());
    return most;
  }
};

// The options matmul accepts, each with its values (the first is the default).
const OptionTable& matmul_options() {
  static const OptionTable options = {
      {"a", {"row", "col"}},
      {"b", {"row", "col"}},
      {"act", {"none", "relu", "gelu", "silu"}},
      {"bias", {"0", "1"}},
      {"residual", {"0", "1"}},
      {"aligned", {"1", "0"}}};
  return options;
}

// Where a call's matrices are, in elements: the rows of each stored matrix (A, B, the
// residual, C) `ld*` apart and its batches `stride_*` apart. A stride of 0 shares one matrix
// among every batch (A, B and the residual only). Packed unless the call says otherwise.
struct MatmulStrides {
  long long lda, ldb, ldr, ldc;
  long long stride_a, stride_b, stride_r, stride_c;

  static MatmulStrides packed(const MatmulShape& s) {
    return {s.a_row_length(), s.b_row_length(), s.n,          s.n,
            s.m * s.k,        s.k * s.n,        s.m * s.n,    s.m * s.n};
  }

  // The row stride a stored matrix of `rows` rows of `row_length` elements is read with, from
  // the call's (0: packed). A matrix of one row has none: the given stride only spaces its
  // batches where their own stride is unset (`batches_by_rows`; never closer than a row), so a
  // one-row operand that problem_for_call folded into its other layout, given a stride of one
  // element, reads packed.
  static long long row_stride(long long given_ld, long long row_length, long long rows,
                              bool batches_by_rows) {
    if (given_ld == 0) return row_length;
    if (rows > 1) return given_ld;
    return batches_by_rows ? std::max(given_ld, row_length) : row_length;
  }

  // The call's strides (CallScalars, tensors() order: A, B, [bias], [residual], C), checked:
  // rows no shorter than the matrix's and below 2^31, C's batches never overlapping, and,
  // unless the problem says aligned=0, every stride a multiple of 16 bytes (the shape's kernels
  // move rows in 16-byte chunks).
  static MatmulStrides of_call(const MatmulShape& s, const CallScalars& call) {
    MatmulStrides t = packed(s);
    std::size_t at = 0;
    auto take = [&](long long& ld, long long& stride, long long row_length, long long rows,
                    bool written, bool alignment_matters, const char* name) {
      const std::int64_t given_ld = call.row_strides.at(at);
      const std::optional<std::int64_t> given_stride = call.batch_strides.at(at);
      ++at;
      // The message is built only on failure: plan() runs on the runtime's hot path.
      auto fail = [&](const std::string& why) {
        throw InvalidArgument("matmul: " + std::string(name) + "'s " + why);
      };
      // (A matrix of one row takes any positive stride: row_stride.)
      const long long least = rows > 1 ? row_length : 1;
      if (given_ld != 0 && (given_ld < least || given_ld > (1ll << 31) - 1))
        fail("row stride " + std::to_string(given_ld) + " is outside " + std::to_string(least) +
             (rows > 1 ? " (its row length)" : "") + " .. 2^31-1");
      ld = row_stride(given_ld, row_length, rows, s.batch > 1 && !given_stride);
      stride = given_stride.value_or(rows * ld);
      // Inputs may share or overlap batches (0: one matrix for all); C's must be apart.
      const long long apart = written && s.batch > 1 ? (rows - 1) * ld + row_length : 0;
      if (stride < apart)
        fail("batch stride " + std::to_string(stride) + " is below " + std::to_string(apart) +
             (written ? ": its batches would overlap" : ""));
      if (alignment_matters && !s.strides_unaligned && s.rows_aligned() &&
          ((ld | stride) % s.per_16_bytes()))
        fail("strides (" + std::to_string(ld) + " per row, " + std::to_string(stride) +
             " per batch) are not multiples of " + std::to_string(s.per_16_bytes()) +
             " elements (16 bytes): the problem needs option aligned=0");
    };
    take(t.lda, t.stride_a, s.a_row_length(), s.a_rows(), false, true, "A");
    take(t.ldb, t.stride_b, s.b_row_length(), s.b_rows(), false, true, "B");
    if (s.has_bias()) ++at;
    if (s.has_residual())
      take(t.ldr, t.stride_r, s.n, s.m, false, s.output_strides_matter(), "the residual");
    take(t.ldc, t.stride_c, s.n, s.m, true, s.output_strides_matter(), "C");
    return t;
  }
};

constexpr int kMmaSync = 0, kWgmma = 1, kDecode = 2, kGemv = 3, kGemvKn = 4;

// The problem as a config's kernels read it: the sm_90a template reads an fp32 operand stored
// MN-major in place, through registers, where it is the kernel's A (MatmulShape::a_in_registers,
// b_in_registers); every other kernel reads it transposed first.
MatmulShape shape_for(const Problem& problem, const Config& config) {
  MatmulShape s(problem);
  const bool wgmma = s.tf32() && config.at("variant") == kWgmma;
  s.a_in_registers = wgmma && s.a_columns && config.at("swap_ab") == 0;
  s.b_in_registers = wgmma && !s.b_columns && config.at("swap_ab") == 1;
  s.weight_phased = config.at("variant") == kWgmma && config.at("swap_ab") == 1 &&
                    config.at("cluster_n") == 1 && config.at("block_n") < 128 &&
                    s.reads_weight_in_phases();
  return s;
}

// The most rows of A the row readers take: gemv (its sums in registers) and gemv_kn.
constexpr long long kGemvRows = 4, kGemvKnRows = 32;

// The product as a row reader computes it: A's few rows times the weight, or where A has more
// rows than it takes, C^T = B^T A^T (N's few columns as its rows, A read as the weight: a
// matrix times a vector), C written transposed.
MatmulShape row_reader_shape(const MatmulShape& s, long long most_rows) {
  return s.m > most_rows ? s.swapped() : s;
}
// Accumulator registers a ping-pong warpgroup may hold per thread (its whole tile): 232 after
// setmaxnreg, less the ~40 its descriptors, loop and epilogue need.
constexpr int kPingpongAccumulators = 192;
// The share of a tile's time that ping-pong hides (its epilogue under the other warpgroup's
// main loop), credited where each cluster takes three tiles or more (fit_waves).
constexpr double kPingpongEpilogueShare = 0.04;
// The least K the untuned decode default gives each slice of a split: a split costs a second
// launch and the partials' round trip, which a short slice does not win back (16x1752x704 in
// two 352-k slices 0.77x cuBLAS against 0.98x whole; 11x227x7448 in eight 931-k slices 1.80x
// against 1.34x in two: docs/perf/matmul.md v22).
constexpr long long kMinDecodeSliceK = 512;
// The untuned tiled default's estimate of a K split (split_time): a CTA's 64-k block takes
// about 0.35 us, whether its tile is MMA-bound (128x128 at ~6 TFLOP/s an SM) or streams its
// operand (swap_ab: 8 KB of weight a block, 132 CTAs at 3 TB/s); the partials are written and
// read back at about 2.5 TB/s. Fitted to v23's measurements (91x1002x5232: 8 slices 0.96x
// cuBLAS, 16 0.74x; 246x88x4184, 9x104x2984, 1x72x7040: 16 slices 1.09-1.16x faster than the
// fewer those would give; 102x1544x10080: 8 slices 0.86x, 4 0.73x).
constexpr double kKBlockUs = 0.35;
constexpr double kPartialsBytesPerUs = 2.5e6;
// How much slower than the default, by rough_time_us, a borrowed wgmma config may be estimated
// before the default runs in its place: the estimate ignores how well each tile streams, so
// only configs it puts well behind yield.
constexpr double kBorrowedSlack = 1.5;
// Under this K the untuned default does not split K, over few tiles or in the last wave's
// (the tail split): the second launch and the partials cost more than the slices save.
// Measured beside cuBLAS, split against whole in 64x64 tiles: 63x80x781 0.90x against 1.12x,
// 8x1408x1146 0.71x against 0.78x (v22), 498x382x1636 0.78x in eight 128x128 slices against
// 1.01-1.04x (v23); from ~2000 the split wins (16x160x2064 0.85x against 0.82x, 338x200x2732
// 0.99x against 0.88x: v22). Tail splits against K whole (v51): 0.83-1.04x over 20 shapes of
// K 506-1608 (0.98x on the mean), 0.92-1.05x over six of 1640-2056, 0.98-1.37x from 2088.
constexpr long long kMinSplitK = 2048;
// From this K, 65-128 rows of 16-bit A against a weight whose 64x64 tiles fill the SMs once
// stream it in 64x128 tiles, two K slices (v55: 1.01-1.42x over the pairs of whole K at K
// 6144-28672 on the H200, 0.84-0.96x at 2048-4096).
constexpr long long kSkinnySlicedK = 6144;
// Where even 64x64 tiles are too few for an eighth of the SMs, K splits from here (v22's
// shortest split that paid, 1146 in 8x1408x1146, rounded up; 44x88x1800: v23).
constexpr long long kMinFewTileSplitK = 1536;
// From this K, the untuned default's large tiles spend most of their time in the main loop, so
// the L2 requests of rows off 128-byte lines decide between them (fit_waves; v23).
constexpr long long kLineBoundK = 1536;
// Under kLineBoundK, with both operands' rows off L2's lines, a tile that reads more bytes from
// L2 a multiply than the base replaces it only at this share of the base's wave cost or less
// (v52: 0.75, a wave in four saved, won 4 of 6; 0.86-0.95 lost 9 of 10, up to 1.55x).
constexpr double kStraddlingCostShare = 0.8;
// From this K, fit_waves breaks a tie between two tiles of one area by their padding. Over
// three random draws (v26) the 128x192 pairs that padded less than 192x128 alone ran 34 shapes
// of K 1165 and more 1.11x faster on the geometric mean (0.97-1.35x); under it they lost 3%
// (7 shapes of K 530-1039: 0.92-1.06x).
constexpr long long kPaddedTieMinK = 1152;
// CTAs in clusters of 4 or 8 sharing operands that run at once on an H100's 132 SMs, one CTA
// an SM: a cluster's CTAs share a GPC, and the GPCs hold 120 such CTAs, 30 clusters of 4 or 15
// of 8 (docs/perf/matmul.md v14).
constexpr int kClusteredCtasOn132Sms = 120;
// Up to this K, a few rows needing padding are gathered where they lie instead (see
// default_config).
constexpr long long kMaxGatheredK = 512;
// Up to this K, up to 16 such rows are gathered however few CTAs the tiles give.
constexpr long long kMaxFewCtasGatheredK = 256;
// Up to this many bytes of weight, 17-32 rows of A over rows off 16 bytes are read in place by
// 8-warp decode CTAs, past it by 4-warp ones (see default_config).
constexpr long long kMaxInPlaceWeight32Rows = 2ll << 20;
// From this K up to kMaxGatheredK, one or two rows times a row-major B off 16 bytes take
// gemv_kn instead (default_config). On the H200, K 360-472: 1.20-1.59x the gathering tiles
// over 8 shapes; K 64-336: 0.98x over 13 (2x15973x336 f16 0.88x, 2x16291x208 0.89x); 11 fresh
// shapes of K 360-488 1.03-1.64x, 1.37x on the mean (v71).
constexpr long long kMinGemvKnGatheredK = 352;
// The largest product (batch x M x N x K) and K the mma.sync template takes by default on
// Hopper (choose_default).
constexpr long long kMaxTinyProduct = 1ll << 25;
constexpr long long kMaxTinyK = 512, kMaxTinyGatheredK = 384;
// Up to this K, a few-tile shape whose smaller tiles fill half the SMs runs them with K whole
// rather than 128x128 tiles in K slices (698x659x1576: 128x64 whole 1.28x cuBLAS, 128x128 in
// two slices 0.90x; v22); past it K-heavy shapes keep their slices (512x512x16384).
constexpr long long kMaxUnslicedK = 4096;
// Pairs of 128x256 tiles for operands whose rows both straddle L2's lines: from 12 pairs
// (paired_off_lines; 7 and 8 of them lost 0.85-0.98x, 12-40 gained: docs/perf/matmul.md v41).
constexpr long long kMinWidePairs = 12;
// few_tile_us's constants, fit to 53 measured pairs of configs (docs/perf/matmul.md v43: the
// default against swapped mid-width tiles on 19 few-tile shapes of 133-1313 rows; the fit
// ranks each shape's measured configs within 0.5% of its best on average): operand rows read
// from L2 by the CTAs at 7 TB/s (multicast boxes counted once), plus a CTA's multiply-adds at
// 70% of an H100 SM's peak, plus 24 us of each call that no tile changes (its start, ramp and
// end, and the waves' uneven finish, lumped).
constexpr double kL2ReadBytesPerUs = 7.0e6;
constexpr double kCtaMacsPerUs = 2.6e6;
constexpr double kFewTileFixedUs = 24.0;
// A swapped mid-width tile replaces the default where few_tile_us puts it at this share of the
// default's time or less (v43: on the measured pairs 0.95 gave up 1% on the mean against
// taking every predicted gain, 0.87 4%; the margin is for the fit's 12% rms error).
constexpr double kMidWidthShare = 0.95;
// A swapped mid-width tile's ring is as deep as keeps its CTAs' operand reads in flight (every
// stage's multicast boxes, all CTAs) within this many bytes, about L2's 7 TB/s times 1.8 us:
// over 17 shapes of 44-120 CTAs measured at 3-8 stages the fastest depth held 9-13 MB, and each
// stage past it lost 1-7% (300x4352x8216 rc at 5/6/7 stages: 57.1/60.1/64.5 us, where 76 CTAs
// of 103x9496x7864 were fastest at 7; docs/perf/matmul.md v44).
constexpr double kMidWidthBytesInFlight = 12.5e6;
// Swapped mid widths on 64 or 256 rows of N with one CTA along N (each reading its rows of M
// alone) only up to this many rows of M: past it they lost 0.93-0.99x on four shapes
// (2209x1176x4472 rc, 3142x568x2864 rc), under it they gained up to 1.33x (docs/perf/matmul.md
// v48).
constexpr long long kMaxLoneMidRows = 2048;
// The swapped mid widths of 16-bit inputs from this K (v42-v48 had kMinSplitK, which fp32
// keeps: not measured under it): against v48's default, 1.076x over 51 shapes of K 520-2040
// whose default changed (0.84-1.57x: 297x3400x1672 rr 0.0151 ms against 128x128 pairs'
// 0.0237; 199x1000x1376 rc in two slices 0.0121 against 0.0101; docs/perf/matmul.md v49).
// Shorter K: not measured.
constexpr long long kMinMidWidthK = 512;
// The rules for 65-224 rows over a wide weight measured on the H200 hold from this K, the
// shortest measured (v56: 65-112 rows over N's 64-row tiles, K 4640-18680; v57: 113-224 rows,
// K 4176-19784). Shorter K: not measured.
constexpr long long kMinWideWeightK = 4096;
// v59's pairs of swapped mid widths over 64-row boxes of the weight from this K (the shortest
// measured 2656). Shorter K: not measured.
constexpr long long kMinPairedMidK = 2048;
// Under kMinSplitK, the mid widths on 256 rows of N only from this N: 12 such tiles (v49: from
// 3496 columns 1.00-1.30x on eight shapes, up to 2352 0.81-0.99x on five, 2048x1024x1024 rr
// 0.81x).
constexpr long long kMinShortKWideRowsN = 3072;
// streaming_narrow's domain (a narrow N under this many rows of A or more: the draws measured
// were of 1024-32768 rows; at 256 instead it changed none of 3000 draws of 256-1023 rows) and
// the share of the streamed rows at which it replaces the default's pick before the swapped mid
// widths (the shapes measured changed at 0.42-0.75 of v46's picks, or at 1.0 where v46 took a
// 128-row swapped mid width of the same width and split: docs/perf/matmul.md v47).
constexpr long long kMinStreamingRows = 1024;
constexpr double kStreamingShare = 0.8;

// A wgmma tile the untuned default picks: its shape, consumer warpgroups and ring depth.
struct WgmmaTile {
  int block_m, block_n, consumers, stages;
  Config on(Config config) const {
    config.values["block_m"] = block_m;
    config.values["block_n"] = block_n;
    config.values["consumers"] = consumers;
    config.values["stages"] = stages;
    return config;
  }
};

// The parameters of each variant, with the values the tuner tries. Configs of one variant carry
// exactly its parameters plus `variant`, so each config has one canonical text.
std::vector<ParamSpec> variant_space(int variant) {
  if (variant == kMmaSync)
    // Small tiles (16 rows, 32 columns) give skinny shapes (decode: M = 16) enough blocks to
    // fill the SMs; they stream B, which is what bounds those shapes.
    return {{"block_m", {16, 32, 64, 128, 256}},
            {"block_n", {32, 64, 128, 256}},
            {"block_k", {32, 64}},
            {"warps_m", {1, 2, 4}},
            {"warps_n", {1, 2, 4}},
            {"stages", {2, 3, 4, 5}},
            {"group_m", {1, 8}}};
  // Non-powers of two (192) so the count of output tiles can be matched to the 132 SMs; split_k
  // for grids with fewer tiles than SMs (small, skinny and K-heavy shapes), its slices summed
  // through the workspace by a second launch, or (split_in_grid) by the product's own CTAs
  // once every slice is in, or (split_cluster) by the CTAs of one cluster through distributed
  // shared memory; where the tiles fill the SMs, split_k splits only the
  // last wave's tiles, if that wave leaves half the SMs idle (a tail split); swap_ab
  // (C^T = B^T A^T) for M below the 64-row wgmma tile, with 16- and 32-column tiles over M;
  // slice_major, the order of the workspace's K slices among the units (a tile's slices side
  // by side, or each slice over every tile); l2_promotion, the bytes L2 fetches from DRAM
  // around each of A's and B's missed rows (the tensor maps' attribute): 256 pays where a
  // weight streams (decode, M = 128), none where several tiles read every row (1000^3: -7%,
  // docs/perf/matmul.md v13).
  if (variant == kDecode)
    // Columns per CTA, the warps that split its K, the spans each warp loads before their
    // MMAs (what it keeps in flight), K split over CTAs where the columns are few, and the
    // bytes of a weight row one load reads (a span: 32 k at 64 bytes, up to 256 k at 512).
    return {{"block_n", {8, 16, 32, 64}},
            {"warps", {4, 8, 16}},
            {"unroll", {1, 2, 4, 8}},
            {"split_k", {1, 2, 4, 8}},
            {"row_bytes", {64, 128, 256, 512}}};
  if (variant == kGemv)
    // Weight rows per CTA (4 and 8 for short rows, where a CTA of two would do little but
    // start and sum), its warps (which split every row's K), and the chunks of each row a
    // thread loads before its products (a chunk: MatmulShape::row_vector() elements).
    return {{"block_n", {1, 2, 4, 8}}, {"warps", {2, 4, 8, 16}}, {"unroll", {1, 2, 4}}};
  if (variant == kGemvKn)
    // Columns a thread loads at once (2 to 16 bytes, as N's alignment allows), the warps of a
    // CTA (which take its K slice's rows in turn), the rows of B a thread loads before their
    // products (what it keeps in flight), and K split over CTAs where the columns are few.
    return {{"vector", {1, 2, 4, 8}},
            {"warps", {4, 8}},
            {"unroll", {4, 8, 16}},
            {"split_k", {1, 2, 4, 8, 16, 32, 64}}};
  return {{"block_m", {64, 128, 192, 256}},
          {"block_n", {16, 32, 64, 80, 88, 96, 104, 112, 128, 144, 160, 176, 192, 224, 256}},
          {"block_k", {32, 64}},  // one 128-byte row: 64 of bf16/f16, 32 of fp32 (tf32)
          {"stages", {3, 4, 5, 6, 7, 8, 10, 13, 16}},
          {"consumers", {1, 2, 3}},
          {"cluster_m", {1, 2, 4}},
          {"cluster_n", {1, 2}},
          {"group_m", {1, 8}},
          {"split_k", {1, 2, 4, 8, 16}},
          {"split_cluster", {0, 1}},
          {"swap_ab", {0, 1}},
          {"slice_major", {0, 1}},
          {"l2_promotion", {0, 256}},
          {"pingpong", {0, 1}},
          {"split_in_grid", {0, 1}}};
}

// Built once: every config the tuner prunes and every call's reject asks for it.
const VariantSpaces& variants() {
  static const VariantSpaces spaces{{variant_space(kMmaSync), variant_space(kWgmma),
                                     variant_space(kDecode), variant_space(kGemv),
                                     variant_space(kGemvKn)}};
  return spaces;
}

// The decode template's CTA (matmul_decode.cuh): block_n columns, `warps` warps splitting K,
// each loading `unroll` spans before their MMAs, a span the k of one load of `row_bytes` bytes
// of a weight row (32 k at 64 bytes); K split over split_k CTAs.
struct DecodeConfig {
  int block_n, warps, unroll, split_k, row_bytes;
  explicit DecodeConfig(const Config& config)
      : block_n(config.at("block_n")),
        warps(config.at("warps")),
        unroll(config.at("unroll")),
        split_k(config.at("split_k")),
        row_bytes(config.at("row_bytes")) {}
  int threads() const { return warps * 32; }
  // A's rows rounded up to the kernel's ROWS: 8, 16 or 32.
  static int rows(long long m) { return m <= 8 ? 8 : m <= 16 ? 16 : 32; }
  // 32-k chunks a span; past one, the loaded rows are handed out through shared memory.
  int span_chunks() const { return row_bytes / 64; }
  // The warps' partial tiles, summed through shared memory (a float4 per lane per MMA tile),
  // then each warp's staged spans.
  int smem_bytes(long long m) const {
    return warps * ((rows(m) + 15) / 16) * (block_n / 8) * 32 * 16 +
           (span_chunks() > 1 ? warps * unroll * block_n * row_bytes : 0);
  }
  // Per thread: two buffers of `unroll` spans, each a 16-byte piece per load of the CTA's
  // rows (block_n x row_bytes / 512 of them) and per chunk and 8 rows of A, the accumulators
  // twice (ptxas keeps copies around the MMAs), and ~40 of addresses and loop state. Checked
  // against ptxas -v over the space at 64-byte rows (M = 1, 16, 32; sm_90a): never under; up to
  // 90 over where ptxas overlaps the buffers. Pieces loaded in parts (rows off 16 bytes:
  // `vector` under 8) and the element-by-element fallback take ~40 more (16 rows, 16 warps:
  // 64 -> 104, 82 -> 128 with a spill, 102 -> 128 with 116 bytes of spills), and so do spans
  // handed out through shared memory (16 columns, 8 warps, M = 16: 120 -> 126 at 128 bytes,
  // one span; 184 -> 218 at 256).
  int registers(long long m, int vector) const {
    return 2 * unroll * 4 * (block_n * row_bytes / 512 + span_chunks() * rows(m) / 8) +
           8 * ((rows(m) + 15) / 16) * (block_n / 8) + 40 +
           (vector < 8 || span_chunks() > 1 ? 40 : 0);
  }
};

// The gemv template's CTA (matmul_gemv.cuh): block_n weight rows reduced along K by `warps`
// warps, each thread loading `unroll` chunks (of row_vector() k) of every row before their
// products.
struct GemvConfig {
  int block_n, warps, unroll;
  explicit GemvConfig(const Config& config)
      : block_n(config.at("block_n")), warps(config.at("warps")), unroll(config.at("unroll")) {}
  int threads() const { return warps * 32; }
  // A's rows rounded up to the kernel's ROWS: 1, 2 or 4.
  static int rows(long long m) { return m <= 1 ? 1 : m <= 2 ? 2 : 4; }
  // Per thread: the sums, `unroll` chunks (a register per 4 bytes, at least one) of every row
  // of W and A, ~60 of addresses, loop state and the epilogue. Checked against ptxas -v over
  // the space (M = 1, 3, 4, with and without the epilogue; sm_80, sm_90a): no spills.
  int registers(long long m, int vector, long long in_bytes) const {
    const long long chunk = (vector * in_bytes + 3) / 4;
    return static_cast<int>(rows(m) * block_n + chunk * unroll * (rows(m) + block_n) + 60);
  }
};

// The row-major-B gemv template's CTA (matmul_gemv_kn.cuh): 32 x `vector` columns, its `warps`
// warps taking the rows of its K slice in turn, each thread loading `unroll` rows of B before
// their products; K split over split_k CTAs.
struct GemvKnConfig {
  int vector, warps, unroll, split_k;
  explicit GemvKnConfig(const Config& config)
      : vector(config.at("vector")),
        warps(config.at("warps")),
        unroll(config.at("unroll")),
        split_k(config.at("split_k")) {}
  int threads() const { return warps * 32; }
  long long columns() const { return 32ll * vector; }  // a CTA's
  int round_rows() const { return warps * unroll; }  // rows of B a CTA loads at once
  // A's rows rounded up to the kernel's ROWS: a power of two up to 32.
  static int rows(long long m) { return static_cast<int>(std::bit_ceil(static_cast<unsigned long long>(m))); }
  // Per thread: the sums, `unroll` loads of `vector` elements, ~60 of addresses, loop state and
  // A's values (a register holds two 16-bit elements or one fp32). Checked against ptxas -v (M =
  // 1 and 26, vector 2, sm_90a: 32 and 128).
  int registers(long long m, long long in_bytes) const {
    return rows(m) * vector + unroll * (in_bytes == 4 ? vector : (vector + 1) / 2) + 60;
  }
};

// The sm_90a template's tile, stage ring, warpgroups and cluster (matmul_sm90.cuh's launch_info).
struct WgmmaConfig {
  int block_m, block_n, block_k, stages, consumers, cluster_m, cluster_n, group_m, split_k,
      split_cluster, swap_ab, slice_major, l2_promotion, pingpong, split_in_grid;
  // The parameters in the order of the fields, which is the wgmma space's (variant_space), the
  // order enumerate walks them in (checked there).
  static constexpr std::array<std::string_view, 15> kParameters = {
      "block_m", "block_n", "block_k", "stages", "consumers", "cluster_m", "cluster_n",
      "group_m", "split_k", "split_cluster", "swap_ab", "slice_major", "l2_promotion",
      "pingpong", "split_in_grid"};
  explicit WgmmaConfig(const Config& config)
      : WgmmaConfig([&](int i) { return config.at(kParameters[i]); }) {}
  // A point of the wgmma space as enumerate walks it: its values in the space's order.
  explicit WgmmaConfig(std::span<const int> space_values)
      : WgmmaConfig([&](int i) { return space_values[i]; }) {}
  int cluster_k() const { return split_cluster ? split_k : 1; }  // K slices in one cluster
  int cluster() const { return cluster_m * cluster_n * cluster_k(); }
  // K slices summed through the workspace (by a second launch, or split_in_grid by this one).
  int workspace_splits() const { return split_cluster ? 1 : split_k; }
  int threads() const { return (consumers + 1) * 128; }
  // 176 and 224 columns: widths that fit a wide N to the waves (cuBLAS runs 1024x14336x4096 in
  // 128x176 tiles); B's MN-major blocks are 64 wide, so they read B K-major.
  bool wave_fitted_width() const { return block_n == 176 || block_n == 224; }
  // 80-112 columns in steps of 8: swapped tiles whose width spans M's rows (65 or more),
  // fitted to the waves as cuBLAS fits its 88- to 112-row tiles (618x2544x12240: 120 CTAs of
  // 104 rows, K whole).
  bool swapped_mid_width() const { return block_n >= 80 && block_n <= 112 && block_n % 8 == 0; }
  // Consumer warpgroups sharing a tile's rows: all of them, or with pingpong one (whole tiles).
  int rows_sharing() const { return pingpong ? 1 : consumers; }
  // swap_ab over a wide M (128 columns or more: fp32 with B row-major read in place, or 129-256
  // rows of 16-bit M whole), whose C^T goes out transposed through the staging slots.
  bool swapped_wide() const { return swap_ab && block_n >= 128; }
  // C leaves through the exchange buffer (TileExchange) instead of the TMA staging slots.
  bool exchange() const { return (swap_ab && !swapped_wide()) || cluster_k() > 1; }
  int exchange_bytes() const {
    return swap_ab ? block_n * (block_m + 4) * 4 : block_m * (block_n + 8) * 4;
  }
  // The A and B rings (128-byte rows of k), two 8 KB C staging slots per consumer warpgroup or
  // the exchange buffer (past the rings, or over them: MatmulSm90Params::exchange_in_ring), the
  // mbarriers (full and empty per stage, two for the exchange), and the slack to round the base
  // up to 1024 bytes (the 128-byte swizzle's period).
  int smem_bytes(bool exchange_in_ring) const {
    const int rings = stages * (block_m + block_n) * 128;
    const int out = exchange() ? exchange_bytes() : consumers * 2 * 8192;
    return (exchange_in_ring ? std::max(rings, out) : rings + out) + 16 * stages + 16 + 1024;
  }

 private:
  // The fields from parameter i's value, i in kParameters' order.
  template <class ValueOf>
  explicit WgmmaConfig(ValueOf value_of)
      : block_m(value_of(0)),
        block_n(value_of(1)),
        block_k(value_of(2)),
        stages(value_of(3)),
        consumers(value_of(4)),
        cluster_m(value_of(5)),
        cluster_n(value_of(6)),
        group_m(value_of(7)),
        split_k(value_of(8)),
        split_cluster(value_of(9)),
        swap_ab(value_of(10)),
        slice_major(value_of(11)),
        l2_promotion(value_of(12)),
        pingpong(value_of(13)),
        split_in_grid(value_of(14)) {}
};

struct TileConfig {
  int block_m, block_n, block_k, warps_m, warps_n, stages, group_m;
  explicit TileConfig(const Config& config)
      : block_m(config.at("block_m")),
        block_n(config.at("block_n")),
        block_k(config.at("block_k")),
        warps_m(config.at("warps_m")),
        warps_n(config.at("warps_n")),
        stages(config.at("stages")),
        group_m(config.at("group_m")) {}
  int threads() const { return warps_m * warps_n * 32; }
  // block_k in the kernel's 16-bit units: an fp32 (tf32) element is two (matmul.cuh).
  int k_units(const MatmulShape& s) const { return block_k * static_cast<int>(s.in_bytes / 2); }
  // STAGES A and B tiles as read (A: BM x BK, or BK x BM when column-major; B: BK x BN, or
  // BN x BK), rows padded by 16 bytes, in 16-bit units.
  int smem_bytes(const MatmulShape& s) const {
    const MatmulShape r = s.as_read();
    const int bk = k_units(s);
    const int a = r.a_columns ? bk * (block_m + 8) : block_m * (bk + 8);
    const int b = r.b_columns ? block_n * (bk + 8) : bk * (block_n + 8);
    return stages * (a + b) * 2;
  }
};

class MatmulFamily final : public Family {
 public:
  MatmulFamily() {
    for (const char* file :
         {"matmul/matmul.cuh", "matmul/matmul_params.h", "matmul/matmul_epilogue.cuh",
          "matmul/matmul_sm90.cuh", "matmul/matmul_decode.cuh", "matmul/matmul_gemv.cuh",
          "matmul/matmul_gemv_kn.cuh", "matmul/matmul_row_loads.cuh", "matmul/matmul_sm90_params.h",
          "matmul/matmul_splitk.cuh", "matmul/matmul_tile_order.cuh",
          "matmul/matmul_weight_phases.cuh", "common/tile_primitives.cuh",
          "common/activation.h", "common/elementwise.cuh", "common/hopper.cuh", "common/tensor_map.h",
          "common/host_device.h",
          "common/copy_rows.cuh", "common/copy_rows_params.h"})
      source_.files[file] = std::string(embedded::file(file));
  }

  std::string name() const override { return "matmul"; }
  std::string shape_form() const override { return "MxNxK or BxMxNxK (B batches)"; }
  std::string options_help() const override {
    return "a=col (A stored k x m), b=col (B stored n x k: x @ W^T), bias=1, "
           "act=relu|gelu|silu, residual=1 (C = act(A*B + bias) + residual), aligned=0 (row or "
           "batch strides off 16-byte boundaries); dtypes: bf16, f16 or f32 (as tf32) in, "
           "bf16, f16 or f32 out";
  }
  const FamilySource& source() const override { return source_; }

  std::vector<ParamSpec> space() const override { return variants().merged(); }
  using Family::enumerate;
  // The wgmma template's product is large (12.4M points), most of them combinations its launch
  // rules forbid on any problem: those are left out as it is walked, on the walk's values.
  std::vector<Config> enumerate(const Config& only) const override {
    const std::vector<ParamSpec>& wgmma = variants().spaces[kWgmma];
    const auto named = [](const ParamSpec& param, std::string_view name) {
      return param.name == name;
    };
    if (!std::equal(wgmma.begin(), wgmma.end(), WgmmaConfig::kParameters.begin(),
                    WgmmaConfig::kParameters.end(), named))
      throw Error("matmul: the wgmma space does not list WgmmaConfig::kParameters in order");
    return variants().enumerate(only, [](int variant, std::span<const int> values) {
      return variant != kWgmma || !reject_wgmma_structure(WgmmaConfig(values));
    });
  }
  using Family::space_size;
  std::size_t space_size(const Config& only) const override { return variants().size(only); }

  std::optional<std::string> reject(const Config& config, const Problem& problem,
                                    const DeviceTarget& device) const override {
    if (auto wrong = variants().check(config)) return wrong;
    if (config.at("variant") == kWgmma)
      return reject_wgmma(WgmmaConfig(config), shape_for(problem, config), device);
    if (config.at("variant") == kDecode) return reject_decode(DecodeConfig(config), problem, device);
    if (config.at("variant") == kGemv) return reject_gemv(GemvConfig(config), problem, device);
    if (config.at("variant") == kGemvKn)
      return reject_gemv_kn(GemvKnConfig(config), problem, device);
    const MatmulShape s(problem);
    TileConfig tile(config);
    if (tile.block_m <= 0 || tile.block_n <= 0 || tile.block_k <= 0 || tile.warps_m <= 0 ||
        tile.warps_n <= 0 || tile.group_m <= 0)
      return "parameters must be positive";
    if (tile.stages < 2) return "the pipeline needs at least 2 stages";
    if (tile.threads() > device.max_threads_per_block)
      return std::to_string(tile.threads()) + " threads exceed the device's " +
             std::to_string(device.max_threads_per_block);
    // Fewer than 4 warps leave an SM's four schedulers without enough independent MMA and
    // copy work (and a 1-warp block spills unrolling its copies: seen at 64x64x32).
    if (tile.threads() < 128) return "fewer than 4 warps per block";
    const int k_units = tile.k_units(s);  // block_k in 16-bit units (fp32: twice)
    if (k_units % 16) return "block_k must be a multiple of the MMA's 32 bytes of k";
    if (tile.block_m % (tile.warps_m * 16) || tile.block_n % (tile.warps_n * 16))
      return "the warp layout does not divide the tile into 16x16 multiples";
    // Registers: the fp32 accumulators, two k16 steps of A and B fragments (loaded one step
    // ahead) and about 40 of addresses and copy state must fit what __launch_bounds__ leaves
    // each thread (the block's registers over its threads, at most 255), or ptxas spills. The
    // unaligned variant also holds its gathered chunks (4 registers each) from copy to store.
    // Checked against ptxas -v over the space: the estimate is within 4-10 registers.
    const int warp_m = tile.block_m / tile.warps_m, warp_n = tile.block_n / tile.warps_n;
    const int accumulators = warp_m * warp_n / 32;
    const int fragments = 2 * (warp_m / 16 * 4 + warp_n / 8 * 2);
    const int register_cap = std::min(255, device.regs_per_block / tile.threads());
    const int chunks_per_thread =
        (tile.block_m * k_units + k_units * tile.block_n) / 8 / tile.threads();
    const int state = 40 + (s.reads_aligned() ? 0 : 4 * chunks_per_thread);
    if (accumulators + fragments + state > register_cap)
      return "warp tile needs " + std::to_string(accumulators) + " accumulators and " +
             std::to_string(fragments) + " fragment registers per thread; " +
             std::to_string(register_cap) + " registers available";
    if (k_units < 32) return "block_k must hold at least two MMA steps of 32 bytes of k";
    if ((tile.block_m * k_units / 8) % tile.threads() ||
        (k_units * tile.block_n / 8) % tile.threads())
      return "threads do not split the tiles into whole 16-byte chunks";
    if (tile.smem_bytes(s) > device.max_smem_per_block_optin)
      return "needs " + std::to_string(tile.smem_bytes(s)) + " bytes of shared memory, device allows " +
             std::to_string(device.max_smem_per_block_optin);
    return std::nullopt;
  }

  // Where the default fits a large tile to the waves, a borrowed large tile must cost no more
  // by the same estimate: 3000^3's tuned 192x192 ran 5000x5000x2048 at 0.84x cuBLAS, where
  // the default ran it at 0.94-0.96x (docs/perf/matmul.md v16, v17). Elsewhere the borrowed
  // config wins, unless rough_time_us puts it past kBorrowedSlack times the default's: 4096^3's
  // 128x256 pairs ran 512x512x16384 on 8 CTAs, 6.4x slower than the default's 128 K slices,
  // and 1000^3 1.5x slower than its 128x64 pairs (v69).
  bool outranks_default(const Config& borrowed, const Problem& problem,
                        const DeviceTarget& device) const override {
    const Config fallback = default_config(problem, device);
    const MatmulShape s(problem);
    // Between a row reader (decode, gemv) and another template, the default's choice stands:
    // over 9 such pairs near M <= 32 the borrowed config ran 0.73-0.87x the default in 7,
    // 1.11-1.16x in 2, 0.85x on the mean (v69).
    const auto row_reader = [](const Config& config) {
      return config.at("variant") == kDecode || config.at("variant") == kGemv;
    };
    if (borrowed.at("variant") != fallback.at("variant") &&
        (row_reader(borrowed) || row_reader(fallback)))
      return false;
    if (borrowed.at("variant") == kWgmma && fallback.at("variant") == kWgmma &&
        rough_time_us(WgmmaConfig(borrowed), s, device.sm_count) >
            kBorrowedSlack * rough_time_us(WgmmaConfig(fallback), s, device.sm_count))
      return false;
    auto wave_fitted = [](const Config& config) {
      return config.at("variant") == kWgmma && !config.at("swap_ab") && !config.at("split_cluster");
    };
    if (few_large_tiles(s, device) || narrow_n(s, device) || !wave_fitted(borrowed) ||
        !wave_fitted(fallback))
      return true;
    const WgmmaConfig b(borrowed);
    // Split-K over every tile (not a tail split) is outside the estimate.
    if (b.split_k > 1 && !tail_split(b, s, device.sm_count)) return true;
    return wave_cost(b, s, device.sm_count) <=
           wave_cost(WgmmaConfig(fallback), s, device.sm_count);
  }

  Config default_config(const Problem& problem, const DeviceTarget& device) const override {
    return choose_default(problem, device, nullptr);
  }

  // The untuned default; where its rules picked a config the constraints reject on a device
  // that runs the sm_90a template (a defect: the plain base tile runs instead), says why in
  // `fell_back`.
  // fp32 with A column-major and B row-major: tf32 reads K-major operands and the sm_90a
  // template takes an MN-major one in place, through registers, only as its own A, so one
  // operand is transposed first: B unswapped, A swapped. Where A is the smaller (M < N) and
  // the rules took B's transpose, the mirror problem's tiles run swapped: N x M x K with the
  // same layouts holds the same bytes (its A is B, its B is A, its C is C^T), and where its
  // rules transpose its B (our A), so does its config with swap_ab set on ours. The tuner's
  // best of each way (H200, 12 s each): 116x516x13600 0.0300 ms swapped against 0.0443,
  // 104x4088x1024 0.0157 / 0.0259, 300x2000x3000 0.0294 / 0.0448, 24x363x4464 0.0207 / 0.0191;
  // with M > N 2000x300x3000 0.0471 / 0.0290. Against the rules alone: 1.224x over 103 random
  // shapes that moved, 1.08-1.38x by K's band, 0.82x at worst (76x2075x167), up to 2.49x
  // (224x12536x8104: 0.458 -> 0.184 ms; docs/perf/matmul.md v71).
  Config choose_default(const Problem& problem, const DeviceTarget& device,
                        std::optional<std::string>* fell_back) const {
    const Config posed = choose_default_as_posed(problem, device, fell_back);
    const MatmulShape s(problem);
    if (!s.tf32() || !s.a_columns || s.b_columns || s.m >= s.n || posed.at("variant") != kWgmma ||
        posed.at("swap_ab"))
      return posed;
    const auto& dims = problem.shape;
    std::vector<std::int64_t> mirrored_dims = dims;
    std::swap(mirrored_dims[dims.size() - 3], mirrored_dims[dims.size() - 2]);
    ProblemOptions options{{"a", "col"}};
    if (s.strides_unaligned) options["aligned"] = "0";
    const Problem mirror(problem.op, problem.dtype, problem.out_dtype, mirrored_dims, options);
    std::optional<std::string> mirror_fell_back;  // its rules' pick rejected: not a measured tile
    Config flipped = choose_default_as_posed(mirror, device, &mirror_fell_back);
    if (mirror_fell_back || flipped.at("variant") != kWgmma || flipped.at("swap_ab")) return posed;
    flipped.values["swap_ab"] = 1;
    return reject(flipped, problem, device) ? posed : flipped;
  }

  Config choose_default_as_posed(const Problem& problem, const DeviceTarget& device,
                                 std::optional<std::string>* fell_back) const {
    // On Hopper: 128x256 tiles on two consumer warpgroups, four stages, 2-CTA clusters sharing
    // B. Where M is below a wgmma tile: C^T in 64 x 16..64 tiles (swap_ab) streaming B through
    // eight stages. Where the tiles leave most SMs idle: 128x128 tiles. Both split K through
    // the workspace as far as the SMs and K allow. These are the shapes of the decode and
    // K-heavy winners of the v5 sweeps (docs/perf/matmul.md).
    const MatmulShape s(problem);
    // One or two rows against a column-major weight, with rows enough for two CTAs an SM: the
    // gemv template, two weight rows a CTA, 16 warps (fewer where K is short, or for two rows
    // of A: the M = 2 sweep's winner). It reads the weight as a row reduction does:
    // 1x4096x4096 0.0153 ms against the decode template's 0.0176 and Inductor's 0.0161, and
    // the 117 MB weights at 1.05-1.10x the floor (docs/perf/matmul.md v18). From four rows on
    // the decode template's MMAs win (4x4096x4096: 0.0167 against 0.0178 ms).
    // Where K's rows are off 16 bytes, also for three or four rows (the decode template reads
    // 16-byte pieces), with loads as wide as the rows allow, read in place (padded, the weight
    // took three passes: 1x8968x6564 0.151 ms against 0.047, 1.44x cuBLAS). For one or two rows
    // on 4 or 2 bytes, 4 chunks a thread in flight on 8 warps (1x8192x4094: 0.0286 ms, against
    // 0.0360 at the 16-byte loads' 1 chunk on 16); for three or four rows, whose sums take the
    // registers, 1 chunk (2 of one element) on 4 warps: the sweeps' winners at 3x8192x4094,
    // 4x4096x4095 and 4x14336x4100 (docs/perf/matmul.md v28).
    // Rows off 16 bytes only past the gathering tiles' short K (at or under 512 the mma.sync
    // template took 2x15256x113 in 0.58x gemv's time, gemv 2x3707x165 in 0.72x theirs).
    // A matrix times a few columns (A row-major, N <= 4 of B column-major, or one of B
    // row-major: a value head, a matrix times a vector) takes it on C^T = B^T A^T, A's rows as
    // the weight, at any K, as for as many rows of A (4096x1x4096 rc 0.0157 ms against the
    // tiles' 0.0196, 4096x2x4096 0.0159 against 0.0203, 653x3x1208 0.0063 against 0.0105;
    // docs/perf/matmul.md v30).
    // One row read 8 bytes a load, or 4 or 2 under a K of 1024: four weight rows a CTA on the
    // fewest warps that leave each thread 4 chunks or less, the sweeps' winners or within 5% of
    // them (4174x1x694 rr 0.0076 ms against two rows' 0.0123, 16075x1x269 rc 0.0112 against
    // 0.0170, 14815x1x3184 rr 0.0395 against 0.0427, 1x20641x1096 with A column-major 0.0219
    // against 0.0330). 16-byte loads, and narrower ones past K 1024, kept two rows
    // (1024x1x1024 rc 0.0064 against 0.0083, 1456x1x1935 rr 0.0080 against 0.0098,
    // 1x8192x4094 rc 0.0282 against 0.0317). One column-major row of A (a vector) at any K.
    const MatmulShape r = row_reader_shape(s, kGemvRows);
    const bool gemv_rows = (r.c_transposed && r.m <= kGemvRows) || (s.m == 1 && s.a_columns) ||
                           (s.aligned() ? s.m <= 2 : s.m <= 4 && s.k > kMaxGatheredK);
    // A matrix of fewer rows than that (under two CTAs an SM) times a few columns, 16-bit:
    // still gemv, a row a CTA up to 128 rows, else two, on the fewest warps whose lanes take
    // K's chunks in one pass (else 16, each thread as many chunks as passes), where the tiles
    // ran 1.5-2.2x slower (484x1x430 rc 0.0109 ms against gemv's 0.0051-0.0061, 64x1x4096
    // 0.0097 against 0.0049; docs/perf/matmul.md v75).
    const bool full_grid = r.batch * ceil_div(r.n, 2) >= 2ll * device.sm_count;
    if (r.c_transposed && r.m <= kGemvRows && !r.tf32() && !full_grid) {
      const long long chunks = ceil_div(s.k, static_cast<long long>(r.row_vector()));
      int warps = 2;
      while (warps < 16 && 32ll * warps < chunks) warps *= 2;
      const long long passes = ceil_div(chunks, 32ll * warps);
      const Config gemv{{{"variant", kGemv}, {"block_n", r.n <= 128 ? 1 : 2}, {"warps", warps},
                         {"unroll", passes >= 4 ? 4 : passes >= 2 ? 2 : 1}}};
      if (!reject(gemv, problem, device)) return gemv;
    }
    if (gemv_rows && full_grid) {
      const int vector = r.row_vector();
      const long long load_bytes = vector * r.in_bytes;
      if (r.m == 1 && (load_bytes == 8 || (load_bytes <= 4 && s.k <= 1024)))
        for (int warps : {2, 4, 8, 16}) {
          const Config gemv{{{"variant", kGemv}, {"block_n", 4}, {"warps", warps}, {"unroll", 1}}};
          if ((128ll * warps * vector >= s.k || warps == 16) && !reject(gemv, problem, device))
            return gemv;
        }
      // Rows that two warps' 16-byte loads cover in one chunk a thread (K <= 512): more weight
      // rows a CTA (8 for one row of A, 4 for two), one chunk each, on two warps, where that
      // still gives two CTAs an SM. Two rows a CTA did little but start, wait and sum:
      // 2x13146x232 0.0083 ms against 0.0120, 1x13146x232 0.0085 against 0.0125, 2x20000x160
      // 0.0100 against 0.0161 (docs/perf/matmul.md v33).
      if (r.m <= 2 && load_bytes == 16 && s.k <= 2 * 32 * vector)
        for (int block_n : {r.m == 1 ? 8 : 4, 4}) {
          const Config gemv{{{"variant", kGemv}, {"block_n", block_n}, {"warps", 2}, {"unroll", 1}}};
          if (r.batch * ceil_div(r.n, block_n) >= 2ll * device.sm_count && !reject(gemv, problem, device))
            return gemv;
        }
      // fp32's 16-byte loads (4 elements, multiplied in fp32): four weight rows a CTA, one chunk
      // of each in flight a thread. For one row of A the fewest warps whose threads take K's
      // chunks in one pass, else 8 (a short last pass costs a whole DRAM latency: 1x12000x2200
      // on 16 warps, 1.07 passes, 0.74x the tf32 tiles; on 8, 1x7168x2560 in 2.5 passes 1.02x,
      // 1x11008x4096 in 4 1.19x); 4 for more rows. The gemv slice's winners, or within 1% of
      // them, at 1x50257x768, 1x32000x1024, 1x20000x512, 1x8000x1200, 1x6000x1500,
      // 1x10000x1100, 1x4000x2000, 2x8192x1024, 2x4096x11008 and 2x30000x768
      // (docs/perf/matmul.md v70).
      if (r.tf32() && load_bytes == 16) {
        const long long chunks = ceil_div(s.k, vector);
        int warps = 4;
        if (r.m == 1) {
          warps = 2;
          while (warps < 16 && 32ll * warps < chunks) warps *= 2;
          if (32ll * warps < chunks) warps = 8;  // more than one pass of 16 warps
        }
        for (; warps >= 1; warps /= 2) {
          const Config gemv{{{"variant", kGemv}, {"block_n", 4}, {"warps", warps}, {"unroll", 1}}};
          if (!reject(gemv, problem, device)) return gemv;
        }
      }
      const int unroll =
          r.m > 2 ? (vector == 1 ? 2 : 1) : load_bytes <= 4 ? 4 : static_cast<int>(r.m);
      const int most_warps = r.m >= 2 ? 4 : load_bytes <= 4 ? 8 : 16;
      for (int warps : {16, 8, 4, 2}) {
        if (warps > most_warps) continue;
        const Config gemv{{{"variant", kGemv}, {"block_n", 2}, {"warps", warps},
                           {"unroll", unroll}}};
        if (!reject(gemv, problem, device)) return gemv;
      }
    }
    // Decode (x @ W^T for a few rows): the weight streamed by the decode template, 16 columns
    // and 8 warps a CTA, K split over CTAs where the column blocks leave SMs without two. The
    // shape of the v7 sweeps' winners (docs/perf/matmul.md). Up to 32 rows where there is no
    // wgmma template to take them. On Hopper only up to 64 MB of weights: it starts ~2 us
    // sooner than the TMA ring of swap_ab but streams ~5% slower (v7: 4096x4096 weights
    // 0.0173 against 0.0186 ms, 14336x4096 0.0479 against 0.0442).
    // On Hopper also where the weight's rows are off 16 bytes, whatever its size, read in place
    // where padding it would take three passes over it (K past the gathering tiles' short
    // rows): an even K ran 1.7-2.5x the padded swap_ab (16x8192x4094, 8x8968x6564; v28). Rows
    // of an odd K, realigned from 16-byte loads one chunk a group (116 registers: two CTAs an
    // SM), ran 1.09-1.44x the padded swap_ab at 9-16 rows of A over 12 shapes and 1.07-1.31x
    // the element-at-a-time loads they replace up to 8 (docs/perf/matmul.md v73). (Off Hopper
    // unmeasured: such rows take the mma.sync paths.)
    const bool hopper = device.arch() == "sm_90a";
    // 17-32 rows (two m16 tiles) in place too: in 8-warp CTAs over weights up to 2 MB, where
    // the padding copies' launches cost more than the MMAs of the second tile: 1.26-1.39x over
    // the padded swap_ab (18x1096x650, 17x288x2202, 25x808x1089), fresh draws 1.16x over 54;
    // past 3.5 MB such CTAs ran 0.70-0.96x (v73).
    const bool rows_in_place = hopper && !s.aligned() && s.k > kMaxGatheredK;
    // Past 2 MB they take 4-warp CTAs (three an SM at 168 registers), K split while three an
    // SM hold them, as the tuner's winners there did: fresh draws 1.089x over 34 bf16, 1.113x
    // over 35 f16 against the padded swap_ab (0.84-1.33x; docs/perf/matmul.md v74).
    const long long weight_bytes = s.batch * s.n * s.k * s.in_bytes;
    const bool small_weight = weight_bytes <= kMaxInPlaceWeight32Rows;
    const bool wide_rows_in_place = hopper && rows_in_place && s.m > 16 && !small_weight;
    if (s.m <= (hopper && !rows_in_place ? 16 : 32) && (s.aligned() || rows_in_place) &&
        (!hopper || rows_in_place || weight_bytes <= (64ll << 20))) {
      // (8 columns where N has no more: 1x8x4096 0.0075 ms against swap_ab's 0.0093, v29.)
      const int columns = s.n <= 8 ? 8 : 16;
      Config decode{{{"variant", kDecode}, {"block_n", columns},
                     {"warps", wide_rows_in_place ? 4 : 8},
                     {"unroll", s.row_vector() == 1 || (wide_rows_in_place && s.row_vector() == 2)
                                    ? 1 : 2},
                     {"split_k", 1}, {"row_bytes", 64}}};
      const long long ctas_per_sm = wide_rows_in_place ? 3 : 2;
      for (int split : {8, 4, 2}) {
        Config split_decode = decode;
        split_decode.values["split_k"] = split;
        if (s.batch * ceil_div(s.n, columns) * split <= ctas_per_sm * device.sm_count &&
            s.k >= kMinDecodeSliceK * split && !reject(split_decode, problem, device)) {
          decode = split_decode;
          break;
        }
      }
      // Rows on 16 bytes are read in whole 128-byte lines, one span (64 k) a group: the same
      // bytes in flight as two 32-k chunks of 64-byte pieces, streamed 2-8% faster (v36), but
      // in 126 registers a thread (ptxas, 16 columns, 8 warps) two CTAs fit an SM, where three
      // fit at 64 bytes up to 8 rows of A (75): only where that costs no wave (14x5604x4464:
      // 0.91x in two waves against one). From 9 rows the 64-byte kernel takes 100 registers,
      // two CTAs an SM too: past two CTAs an SM the CTAs take 4 warps, four an SM in whole
      // lines (1.17x over 10 fresh shapes as graphs: 16x5120x5120 22.8 -> 17.1 us), five in
      // 64-byte pieces (96 registers) where five take one wave and four do not (1.15-1.26x
      // over those, 13x8672x3584 23.1 -> 19.0 us; past them 0.82-0.84x; v62-v63).
      const long long ctas = s.batch * ceil_div(s.n, columns) * decode.at("split_k");
      const auto waves = [&](int per_sm) { return ceil_div(ctas, 1ll * per_sm * device.sm_count); };
      const bool two_halves = DecodeConfig::rows(s.m) == 16;
      if (s.row_vector() == 8 && (waves(2) <= waves(3) || two_halves)) {
        Config read = decode;
        if (two_halves && waves(2) > 1) read.values["warps"] = 4;
        if (!two_halves || waves(4) == 1 || waves(5) > 1) {
          read.values["unroll"] = 1;
          read.values["row_bytes"] = 128;
        }
        if (!reject(read, problem, device)) decode = read;
      }
      if (!reject(decode, problem, device)) return decode;
    }
    // A few rows whose rows need padding for TMA, and a short K: the mma.sync template gathers
    // the rows where they lie in 16-row (or 32-row) tiles, where padding them first costs more
    // than the product (16x11516x156: 1.03x cuBLAS against 0.74x; 32x8696x87: 1.07x against
    // 0.64x; at K 617 they tie, at 4093 the padded wgmma path is 3x faster: v22). Not one or
    // two rows times a row-major B off 16 bytes from K kMinGemvKnGatheredK: gemv_kn below reads
    // B in place with loads as wide as N allows, where the tiles gather it an element at a time
    // (1x6155x456 cr 0.0113 ms against 0.0170; docs/perf/matmul.md v71). 16-bit inputs, as
    // measured (fp32's tiles there read both operands transposed first: unmeasured). Taken
    // where the 64-column tiles fill half the SMs, and for up to 16 rows at K <= 256 however
    // few they are: there the padding copies' launches cost more than the few CTAs' whole K
    // (fresh draws 1.40x bf16, 1.36x f16 over 30 each, 0.94-2.14x; past K 256 0.59-1.08x,
    // 2x88x501 cr 0.59x; docs/perf/matmul.md v75).
    const bool kn_reads_b = s.m <= 2 && !s.tf32() && !s.b_columns &&
                            s.b_row_length() % s.per_16_bytes() && s.k >= kMinGemvKnGatheredK;
    if (hopper && !s.aligned() && s.m <= 32 && s.k <= kMaxGatheredK && !kn_reads_b) {
      const Config gathered{{{"variant", kMmaSync}, {"block_m", s.m <= 16 ? 16 : 32},
                             {"block_n", 64}, {"block_k", 64}, {"warps_m", 1}, {"warps_n", 4},
                             {"stages", 4}, {"group_m", 1}}};
      const bool fill_half = 2 * s.batch * ceil_div(s.n, 64) >= device.sm_count;
      if ((fill_half || (s.m <= 16 && s.k <= kMaxFewCtasGatheredK)) &&
          !reject(gathered, problem, device))
        return gathered;
    }
    // Up to 8 rows times a row-major B whose rows TMA cannot read (N * bytes off 16: an odd N),
    // K longer than the gathering tiles take: the gemv_kn template reads B once where it lies,
    // 8 warps a CTA, 8 rows of B in flight a thread, as wide loads as N allows, K split until
    // the CTAs fill the SMs 8 times over (slices of two rounds of 64 rows or more), where the
    // tiled templates copy B into padded rows first (1x8490x12975: 0.12 against 0.29 ms,
    // 2x11732x888 0.015 against 0.031, 8x50257x4096 0.34 against 0.51). From 10 rows its FMAs
    // on CUDA cores cost more than the copy (26x1506x11128: 0.11 against 0.049), and from 3
    // rows under K 1024 the copy of a small B costs less than its chains of loads (7x1311x496
    // 0.0146 against 0.0101, 7x275x352 0.0128 against 0.0090; v23).
    // A column-major A of 256 rows or more times one or two columns of B (16-bit) takes it on
    // C^T = B^T A^T, A read as the row-major weight: 8 warps a CTA and 16 rows of it in flight
    // a thread, K split in up to 8 slices of two rounds or more, then loads as wide as leave two
    // CTAs an SM (at most 2 columns for one column of B). The sweeps' winners or within 4% of
    // them over five one-column shapes (5914x1x72 0.0060 ms against the tiles' 0.0136,
    // 8821x1x1480 0.0212 against 0.0420); under 1024 rows 16 of 18 one-column draws and 12 of
    // 15 two-column ones faster than the tiles (939x2x2918 0.0124 against 0.0175; 512x2x8192
    // lost, 0.0180 against 0.0147); at four columns and more the tiles' MMAs win (4096x4x4096
    // 0.0211 against 0.0228; v30).
    const MatmulShape kn = row_reader_shape(s, kGemvKnRows);
    if (kn.c_transposed && kn.m <= 2 && s.m >= 256 && !s.tf32() && !kn.b_columns) {
      const int warps = 8, unroll = 16;
      int split = 8;
      while (split > 1 && s.k < 2ll * warps * unroll * split) split /= 2;
      int vector = kn.m == 1 ? 2 : static_cast<int>(kn.per_16_bytes());
      while (vector > 1 &&
             (kn.n % vector || kn.batch * ceil_div(kn.n, 32ll * vector) * split < 2ll * device.sm_count))
        vector /= 2;
      const Config gemv_kn{{{"variant", kGemvKn}, {"vector", vector}, {"warps", warps},
                            {"unroll", unroll}, {"split_k", split}}};
      if (!reject(gemv_kn, problem, device)) return gemv_kn;
    }
    if (s.m <= 8 && (s.m <= 2 || s.k >= 1024) && !s.b_columns &&
        s.b_row_length() % s.per_16_bytes()) {
      // An odd N in 16-byte vectors, each lane's piece realigned from its neighbours', where
      // that won against loads of an element: up to 4 rows of A, and past them over a weight of
      // 64M elements or more (16-bit; fresh draws 1.199x over 31 bf16, 1.142x over 31 f16, 1x
      // 8387x13281 cr 1.41x; from 5 rows under 64M 0.72-1.05x, 8x533x15650 0.72x: v74). N off
      // 8 by 2 or 4: the widest loads that divide it.
      const bool realigned =
          s.n % 2 && !s.tf32() && (s.m <= 4 || s.batch * s.n * s.k >= (64ll << 20));
      int vector = static_cast<int>(s.per_16_bytes());
      while (vector > 1 && ((s.n % vector && !realigned) ||
                            GemvKnConfig::rows(s.m) * vector > 64 || 32 * vector >= 2 * s.n))
        vector /= 2;
      Config gemv_kn{{{"variant", kGemvKn}, {"vector", vector}, {"warps", 8}, {"unroll", 8},
                      {"split_k", 1}}};
      const GemvKnConfig c(gemv_kn);
      const long long blocks = s.batch * ceil_div(s.n, c.columns());
      for (int split = 64; split > 1; split /= 2) {
        Config split_kn = gemv_kn;
        split_kn.values["split_k"] = split;
        if (blocks * split <= 8ll * device.sm_count && s.k >= 2ll * c.round_rows() * split &&
            !reject(split_kn, problem, device)) {
          gemv_kn = split_kn;
          break;
        }
      }
      if (!reject(gemv_kn, problem, device)) return gemv_kn;
    }
    // A tiny product (2^25 multiply-adds or fewer, a batch's together), K up to 512 (384 where
    // rows lie off 16 bytes, which the template gathers through registers: less of the loads'
    // latency hidden as K grows), 16-bit inputs or fp32 ones both K-major (tf32 MMAs read
    // K-major fragments; other layouts are transposed first): the mma.sync template's 32x32
    // tiles on four warps, four stages. They spread the few k blocks over four times the CTAs
    // of the smallest wgmma tile, and the kernel starts a little sooner (64x64 tiles on both
    // templates at 64x64x64: 0.0061 ms against 0.0063). In rounds against the default: rows on
    // 16 bytes 1.04-1.22x on seven shapes, 1.052x over eleven fresh ones (0.97-1.13x) and
    // 1.03-1.12x on six more (48x1024x256 0.0068 ms against 0.0076); rows off 16 bytes
    // 1.08-1.60x on eleven shapes of K 80-333 (250x130x90 0.0065 against 0.0103), 0.54-0.88x
    // on eight of K 400-1000 (256x256x500, 300x100x900). Rows on 16 bytes with a longer K:
    // 0.91-1.05x (128x128x2048 0.91x); a larger product 0.86-0.99x (512x512x512). fp32 x @ W^T
    // 1.02-1.22x on eight shapes (64x128x64 0.0057 ms against 0.0069), 1.102x over eight fresh
    // ones (0.94-1.29x); with B or A MN-major 0.69-1.07x (128x256x512 rr 0.77x). Batches
    // 1.00-1.24x on seven (16x64x64x64 0.0060 ms against 0.0075), 1.103x over eight fresh ones
    // (0.98-1.22x); past 2^25 together 0.86-1.11x (3x300x300x300 0.86x; docs/perf/matmul.md
    // v40).
    const Config tiny{{{"variant", kMmaSync}, {"block_m", 32}, {"block_n", 32}, {"block_k", 64},
                       {"warps_m", 2}, {"warps_n", 2}, {"stages", 4}, {"group_m", 8}}};
    if (hopper && (!s.tf32() || (!s.a_columns && s.b_columns)) && s.m > 16 && s.n > 16 &&
        s.k <= (s.aligned() ? kMaxTinyK : kMaxTinyGatheredK) &&
        s.batch * s.m * s.n * s.k <= kMaxTinyProduct && !reject(tiny, problem, device))
      return tiny;
    const Config base{{{"variant", kWgmma}, {"block_m", 128}, {"block_n", 256},
                       {"block_k", s.tf32() ? 32 : 64}, {"stages", 4}, {"consumers", 2},
                       {"cluster_m", 2}, {"cluster_n", 1}, {"group_m", 8}, {"split_k", 1},
                       {"split_cluster", 0}, {"swap_ab", 0}, {"slice_major", 0},
                       {"l2_promotion", 256}, {"pingpong", 0}, {"split_in_grid", 0}}};
    Config shaped = base;
    auto set = [&](std::initializer_list<std::pair<const char*, int>> values) {
      for (const auto& [name, value] : values) shaped.values[name] = value;
    };
    const bool few_tiles = few_large_tiles(s, device);
    bool one_wave = false;  // few tiles, but smaller ones fill the SMs once, each K whole
    const bool narrow = narrow_n(s, device);  // N's side in one narrow tile column
    if (s.m <= 64 && (!s.as_read().a_columns || s.reads_weight_in_phases())) {
      // M's side in one tile: 33-48 rows in 64 columns ran 1.06-1.37x faster than in two of 32
      // (33x6032x14288, 48x1031x2000, 38x8600x856), 40x4096x4096 4% slower (v22). A
      // column-major A too where the swapped tile reads the weight in row phases, which gathers
      // A K-major anyway (docs/perf/matmul.md v35).
      set({{"swap_ab", 1}, {"block_m", 64}, {"block_n", narrow_width(s.m)},
           {"stages", 8}, {"consumers", 1}, {"cluster_m", 1}});
    } else if (s.m <= 128 && s.reads_weight_in_phases()) {
      // 65-128 rows against a weight read in row phases: swapped too, M's side in two 64-column
      // tiles, the weight in 128-row tiles on two consumers, where unswapped tiles read it
      // padded (a copy of the weight first: two more passes over it). In rounds against the
      // padded tiles: 1.08-1.77x on 24 shapes, 1.50x on the mean (100x7532x4344 rr 0.0510 ms
      // against 0.0861; few tiles in K slices too: 91x1002x5232 cr 0.0227 against 0.0244).
      // Without L2's 256-byte fills around each missed row: 1.02-1.19x more on 25 shapes, 1.08x
      // on the mean (a tune of 80x4906x9568 put them off in all of its top 12; below 65 rows
      // it was a wash, 0.96-1.05x on nine; docs/perf/matmul.md v39).
      set({{"swap_ab", 1}, {"block_m", 128}, {"block_n", 64}, {"stages", 6}, {"consumers", 2},
           {"cluster_m", 1}, {"l2_promotion", 0}});
    } else if (narrow) {
      // N's side in one tile (routers, low-rank adapters, heads of a few classes): 64-row tiles
      // on one consumer, as narrow as N where B is K-major, as many stages as fit, K split over
      // the SMs as below (a short K: 64x64 tiles, as there). Against 128x128 tiles in K slices,
      // 64x64 ran 29 skinny shapes 1.13x faster, 128x64 1.10x, 192x64 1.09x, 256x64 1.05x, and
      // 64x16 1.06-1.11x faster than 64x64 at 4096x8x4096 and 4096x16x4096
      // (docs/perf/matmul.md v29).
      const long long width = s.as_read().b_columns ? narrow_width(s.n) : 64;
      set({{"block_m", 64}, {"block_n", static_cast<int>(width)}, {"consumers", 1},
           {"cluster_m", 1}, {"cluster_n", 1}, {"group_m", 1}});
      shaped = deepest_ring(shaped, 4, problem, device);
    } else if (few_tiles) {
      // Where both M and N span several tiles, every operand row is read by several of them
      // and L2's fills around each miss only cost (K-heavy -5%, 1000^3 -4%); a skinny M
      // streams its weight, which they help (M = 128 projections +1-5%: v13).
      const bool both_wide = s.m > 128 && s.n > 128;
      auto fill_once = [&](int block_m, int block_n) {
        const long long tiles = s.batch * ceil_div(s.m, block_m) * ceil_div(s.n, block_n);
        return 4 * tiles >= 3ll * device.sm_count && tiles <= device.sm_count;
      };
      if (both_wide && fill_once(128, 64) && s.k <= 2 * std::max(s.m, s.n)) {
        // 128x64 tiles fill the SMs once, a pair along N sharing A, K whole: 1000^3's tuned
        // winner (0.0123 ms in the tuner, against 0.0216 for 128x128 in two K slices: v13).
        one_wave = true;
        set({{"block_n", 64}, {"consumers", 1}, {"cluster_n", 2}, {"cluster_m", 1},
             {"stages", 6}, {"group_m", 1}, {"l2_promotion", 0}});
        // 129-224 rows: M in two swapped tiles of 80-112 columns, in pairs sharing each 64-row
        // box of the weight, one consumer, as deep a ring as fits, where those fill 3/4 of the
        // SMs once (N 3137-4224), from a K of kMinPairedMidK. In rounds on the H200 against
        // the 128x64 pairs: 1.09-1.78x over 9 fresh shapes of bf16, 1.26x on the mean
        // (191x3640x2656 rc 0.0183 ms against 0.0241), f16 1.18-1.90x over 4, fp32 x @ W^T
        // 1.17-1.74x over 4 (docs/perf/matmul.md v59). A row-major A, rows on 16 bytes, one
        // batch, as measured; in place of the mid widths over longer K it lost (0.60-0.95x).
        const int width = half_mid_width(s.m);
        if (s.m <= 224 && swaps_in_place(s) && s.k >= kMinPairedMidK && fill_once(width, 64)) {
          Config pairs = WgmmaTile{64, width, 1, 8}.on(shaped);
          pairs.values["swap_ab"] = 1;
          pairs.values["cluster_m"] = 1;
          pairs = deepest_ring(pairs, 5, problem, device);
          if (!reject(pairs, problem, device)) shaped = pairs;
        }
        // 225-256 rows whose A rows lie on L2's lines: M's two tiles in pairs sharing each 64-row
        // box of the weight, ping-pong, 8 stages (256x4096x4096's tuned winner). In rounds on
        // the H200 against the pairs along N: 1.07-1.22x over N 3136-4224 at K 2048-6848, 1.079x
        // over 24 fresh bf16 shapes (1.01-1.15: 256x3496x3840 rr 0.0192 ms against 0.0220),
        // 1.082x over 8 f16 (1.04-1.17). With A's rows off the lines, each CTA reads its
        // straddling rows alone (0.81-0.87x: 256x3448x6184 rc); at 129-224 rows under rule B's
        // K 1.033x (0.98-1.09), at 4-8 tile rows 1.022x (0.84-1.12): not taken
        // (docs/perf/matmul.md v60). 16-bit, one batch, as measured.
        if (s.m > 224 && s.m <= 256 && !s.tf32() && s.batch == 1 && !s.a_off_lines()) {
          Config along_m = WgmmaTile{128, 64, 2, 8}.on(shaped);
          along_m.values["pingpong"] = 1;
          along_m.values["cluster_m"] = 2;
          along_m.values["cluster_n"] = 1;
          along_m.values["group_m"] = 8;
          if (!reject(along_m, problem, device)) shaped = along_m;
        }
      } else if (!both_wide && fill_once(64, 64)) {
        // A skinny side of 65-128 rows: 64x64 tiles fill the SMs once, K whole, the skinny
        // side's two tiles a cluster sharing the other operand (the weight, read from L2 once),
        // 13 stages (the most that fit): cuBLAS's shape for 128x4096x4096. Against the 8-stage
        // unclustered v14 default, in rounds beside cuBLAS: 0.92-0.93x against 0.89-0.90x, and
        // 128x4096x14336 1.04-1.05x against 0.99x (docs/perf/matmul.md v19).
        one_wave = true;
        // (A skinny side of 64 rows or fewer, a column-major A's, has one tile: no pair.)
        const bool pair_rows = s.m > 64 && s.m <= 128, pair_cols = !pair_rows && s.n > 64 && s.n <= 128;
        set({{"block_m", 64}, {"block_n", 64}, {"consumers", 1}, {"cluster_m", pair_rows ? 2 : 1},
             {"cluster_n", pair_cols ? 2 : 1}, {"stages", 13}, {"group_m", 1}, {"l2_promotion", 0}});
        // From kSkinnySlicedK, M's two tiles in a pair along the weight's 128-row tiles, K in
        // two slices, as many CTAs: each reads half as much of A from L2 (its rows, half of K)
        // for the same bytes of the weight, 25% fewer bytes into the SMs. The weight's 64 rows
        // in pairs with K whole could not keep the H200's DRAM busy: 128x4096x14336 0.0474 ms
        // against 0.0396 (cuBLAS 0.0381, tst_128x64 in pairs, K split); on one consumer
        // 1.12x, 128x64 tiles in pairs along N 1.05x on the mean (docs/perf/matmul.md v55).
        if (pair_rows && !s.tf32() && s.batch == 1 && s.k >= kSkinnySlicedK) {
          Config sliced = WgmmaTile{64, 128, 2, 8}.on(shaped);
          sliced.values["pingpong"] = 1;
          sliced.values["split_k"] = 2;
          sliced.values["l2_promotion"] = 256;
          if (!reject(sliced, problem, device) && waves_of(sliced, problem, device) == 1)
            shaped = sliced;
        }
      } else if (s.m > 112 && !both_wide && !s.tf32() && swaps_in_place(s) &&
                 s.k >= kMinWideWeightK && fill_once(64, 128)) {
        // 113-128 rows of 16-bit A over a weight whose 128-row tiles, M's two 64-row ones in
        // a pair sharing each, fill 3/4 of the SMs once: K whole, one consumer, as deep a ring
        // as fits. Against 128x128 tiles in two K slices, in rounds on the H200: 1.12-1.41x
        // over 24 fresh shapes, 1.24x on the mean (127x6696x4568 rc 0.0293 ms against 0.0415),
        // 1.24-1.37x over 3 more (docs/perf/matmul.md v57). Row-major A of 16-bit, as measured.
        one_wave = true;
        set({{"block_m", 64}, {"block_n", 128}, {"consumers", 1}, {"cluster_m", 2},
             {"cluster_n", 1}, {"group_m", 1}, {"l2_promotion", 0}});
        shaped = deepest_ring(shaped, 6, problem, device);
      } else {
        set({{"block_n", 128}, {"cluster_m", 1}, {"l2_promotion", both_wide ? 0 : 256}});
      }
    }
    const bool tiled = (few_tiles || narrow) && !one_wave && !shaped.at("swap_ab");
    const std::optional<Config> filling = tiled && !narrow && s.k <= kMaxUnslicedK
                                              ? tiles_filling_half(shaped, problem, device)
                                              : std::nullopt;
    if (filling) {
      shaped = *filling;
    } else if ((shaped.at("swap_ab") && !one_wave) || tiled) {  // (v59's one-wave pairs: K whole)
      // Of the splits that neither overfill the SMs nor leave a slice under two K blocks, the
      // one split_time puts first; none where K is under kMinSplitK, unless even 64x64 tiles
      // would leave all but a few SMs idle (44x88x1800: 2 of them; 8 slices ran it 1.19x
      // faster: v23) and K is past the shortest that split paid at (v22).
      const bool few_small_tiles = s.batch * ceil_div(s.m, 64) * ceil_div(s.n, 64) * 8 <= device.sm_count;
      const bool splits = s.k >= kMinSplitK || (few_small_tiles && s.k >= kMinFewTileSplitK);
      // (Counted as the config reads the weight: in row phases a tile covers 8 columns fewer.)
      const auto tiles_of = [&](const Config& c) {
        return kernel_tiles(WgmmaConfig(c), shape_for(problem, c));
      };
      // Where 64-row tiles take more than a wave: 128-row tiles on two consumers, 6 stages,
      // half as many CTAs, each reading the activations. Against the 64-row tile, in rounds: a
      // row-major weight read in row phases (tiles of 56 and 120 columns) 1.06-1.48x on eleven
      // shapes of 135-1786 such tiles (59x7532x4344 rr 0.0342 ms against 0.0499, with the
      // clusters of 4 below); aligned weights 0.99-1.29x on 18 shapes, 1.087x on the mean
      // (40x9216x4096 rr 0.0310 against 0.0399); where the 64-row tiles fit a wave, 0.82-1.07x
      // (docs/perf/matmul.md v38). Below 17 rows too: 1.03-1.58x on six shapes of 9-16 rows
      // (16x8193x8192 rr 0.0564 ms against 0.0891), 0.99-1.21x on nine fresh ones of 1-16 rows
      // (v39). 16-bit inputs, one batch: as measured.
      const bool phased = shape_for(problem, shaped).weight_phased;
      if (shaped.at("swap_ab") && !s.tf32() && s.batch == 1 &&
          tiles_of(shaped) > device.sm_count) {
        const Config wide = WgmmaTile{128, shaped.at("block_n"), 2, 6}.on(shaped);
        if (!reject(wide, problem, device)) shaped = wide;
        // Where the 128-row tiles overflow a wave too and 192-row ones on three consumers fit
        // one: those, 5 stages. Against the 128-row tiles, in rounds: 1.01-1.27x on 19 fresh
        // shapes of 16-128 rows, aligned weights and phased ones, 1.114x on the mean
        // (72x8818x4328 rr 0.0527 ms against 0.0653, 24x17408x8192 rr 0.1020 against 0.1221);
        // where the 128-row tiles fit a wave, 0.60-0.99x (docs/perf/matmul.md v40). (Clusters
        // of 4 below, for a weight read in phases.)
        const Config wider = WgmmaTile{192, shaped.at("block_n"), 3, 5}.on(shaped);
        if (shaped.at("block_m") == 128 && tiles_of(shaped) > device.sm_count &&
            tiles_of(wider) <= device.sm_count && !reject(wider, problem, device))
          shaped = wider;
      }
      int split = 1;
      for (int slices = 2; splits && slices <= 16; slices *= 2)
        if (tiles_of(shaped) * slices <= device.sm_count &&
            ceil_div(s.k, 64) >= 2 * slices && split_time(s, slices) < split_time(s, split))
          split = slices;
      set({{"split_k", split}});
      // Where K would be split in two: M's side in two tiles of 16 or 32 columns instead, a
      // pair sharing the weight (each CTA loads half of its tile and multicasts it), K whole
      // and as deep a ring as fits. As many CTAs, no partials and no reduce launch: cuBLAS's
      // structure at 32x4096x4096. In rounds against the split, 1.02-1.12x at M 17-64
      // (32x4096x4096 0.0178 ms against 0.0199, 57x4144x3160 0.0191 against 0.0214); in
      // place of four slices or more, with half as many, it gained nothing or lost
      // (50x1500x2500 0.95x), and with fp32 inputs (tf32) it lost 0.80-0.94x on four of six
      // (40x3000x5000 rr 0.0404 against 0.0322; docs/perf/matmul.md v33). 16-bit inputs only.
      // (Not for a weight read in phases: a pair reads it padded, a copy of the weight first.)
      // On the H200 the split won wherever the operands' rows lie on L2's lines (or are
      // copied onto them): x @ W^T at 24-64 rows over 4096-row weights, K 4096-16384,
      // 1.05-1.27x in graphs (32x4096x14336 32.1 us against 40.4), then 1.10x over 20 fresh
      // shapes whose default changed (0.98-1.47); with rows off the lines the pair still won
      // 1.07-1.10x on two of four (57x4000x7000; v65).
      if (shaped.at("swap_ab") && split == 2 && shaped.at("block_n") >= 32 && !s.tf32() &&
          !phased && s.operands_off_lines() > 0) {
        Config pair = shaped;
        pair.values["block_n"] = shaped.at("block_n") / 2;
        pair.values["cluster_n"] = 2;
        pair.values["split_k"] = 1;
        pair = deepest_ring(pair, 8, problem, device);
        if (!reject(pair, problem, device)) shaped = pair;
      }
      // Where the weight's tiles are too many for even two K slices (more than half the SMs),
      // each tile whole on one CTA: clusters of 4 along the weight, sharing the activations
      // (each CTA multicasts a quarter of their rows), as deep a ring as fits. cuBLAS's
      // structure at 38x3216x3656 (tst_64x40_64x16_4x1). Against the unclustered tile, in
      // rounds: 1.02-1.43x at 17-64 rows of x @ W^T with 69-231 tiles (63x4785x9256 0.0395 ms
      // against 0.0564), where the same tile unclustered with as deep a ring gained nothing;
      // it lost where the clusters take a wave more than the tiles (64x8192x8192: 32 clusters,
      // 30 fit: 0.73x) and at 0.95-0.98x on three short-K or aligned shapes (40x6144x4096); a
      // row-major weight read in place lost 0.92x; with fp32 inputs (tf32) 1.03-1.12x on seven
      // shapes (docs/perf/matmul.md v34). A row-major weight read in phases gains too (v38): 64-row
      // tiles 1.04-1.14x at 88-110 tiles (0.98x at 74), 128-row ones 1.02-1.08x over the same
      // unclustered; in place of two or four K slices the clusters lost 0.48-0.83x on four of
      // six shapes (20x1101x16000 rr), so a split stays. 192-row tiles (v40), at their 5
      // stages: a weight read in phases 1.00-1.11x on eight shapes (66x8193x8192 rr 0.0843 ms
      // against 0.0934), x @ W^T 0.85-0.98x on two (64x24576x4096), so phased weights only.
      // Where A's rows lie off L2's lines, each CTA's box rows of A straddle two lines, and
      // every CTA reads them: a row-major weight read in place then shares the activations
      // too (K 5000: its 64x64 tiles 1.11-1.23x slower than at K 4992 or 5056, where cuBLAS's
      // time does not move), at the tile's own ring (13 stages lost 0.90-1.09x against 8). In
      // rounds against the unclustered tiles: 1.126x over 26 fresh shapes of 17-64 rows
      // (0.95-1.39x: 55x5592x4280 rr 0.0230 ms against 0.0320); on the lines 0.99-1.10x.
      // Where four take a wave more than the tiles, tiles of 64 columns of such rows go in
      // pairs: x @ W^T at 121-132 tiles 1.09-1.27x on four fresh shapes (55x8152x3384 rc 0.0274
      // ms against 0.0347) and 1.01-1.12x on four of 128 rows; on the lines 0.99-1.00x. Tiles of
      // 32 columns (17-32 rows) gained nothing in pairs (0.93-1.07x on eight), nor 16 rows or
      // fewer (0.98-1.06x on twelve; docs/perf/matmul.md v41). 16-bit inputs, as measured.
      const long long tiles = tiles_of(shaped);
      const bool wide_rows = shaped.at("block_m") == 192;
      const bool weight_in_place = !s.as_read().b_columns && !phased;  // row-major, in place
      const bool a_straddles = !phased && s.a_off_lines();
      if (shaped.at("swap_ab") && shaped.at("split_k") == 1 && shaped.at("cluster_n") == 1 &&
          s.m > 16 && 2 * tiles > device.sm_count &&
          (wide_rows ? phased : !weight_in_place || a_straddles)) {
        for (int cluster : {4, 2}) {
          if (cluster == 2 && (!a_straddles || shaped.at("block_n") != 64 || s.tf32())) break;
          Config shared = shaped;
          shared.values["cluster_m"] = cluster;
          if (!wide_rows && !weight_in_place) shared = deepest_ring(shared, 8, problem, device);
          if (!reject(shared, problem, device) && costs_no_wave(shared, shaped, problem, device)) {
            shaped = shared;
            break;
          }
        }
      }
      // K too short to split: the smallest tiles, the most of them, in one launch (559x272x248:
      // 64x64 0.88x cuBLAS, 128x128 0.75x whole, 0.57x in two slices; v22). (Where a longer K
      // is not split because the tiles fill the SMs, they stay: 4038x336x10669 in 64x64 tiles
      // took 1.44x the time of 128x128.)
      if (!splits && tiled) {
        const Config small = WgmmaTile{64, 64, 1, 8}.on(shaped);
        if (!reject(small, problem, device)) shaped = small;
      }
    } else if (!few_tiles) {
      shaped = fit_waves(shaped, problem, device);
      const int split = tail_split_of(shaped, problem, device);
      if (split > 1) set({{"split_k", split}});
    }
    // A narrow N (or one of 65-192 columns, streaming_narrow's K) under many rows of A: the
    // tile whose CTAs stream the least of A. Else few 128-row tiles reading rows that straddle
    // L2's lines: in pairs sharing them (16-bit inputs and N over one tile, as measured); M's
    // side in swapped tiles of 80-112 rows where those fill a wave better, among few tiles or
    // where the fitted tiles take one wave (v48) or pad M (v64). An N of 65-128 streams only
    // where the tiles stay unswapped after those: in place of a swapped mid width it lost (v72).
    const bool fitted = !few_tiles && !narrow && !shaped.at("swap_ab");
    const bool fitted_one_wave = fitted && waves_of(shaped, problem, device) == 1;
    const std::optional<Config> streamed = streaming_narrow(shaped, problem, device);
    const bool streams_if_unswapped = s.n > 64 && s.n <= 128;
    if (streamed && !streams_if_unswapped) {
      shaped = *streamed;
    } else if ((tiled && !narrow) || fitted_one_wave || (fitted && pads_mid_rows(shaped, s))) {
      if (tiled && !s.tf32()) shaped = paired_off_lines(shaped, problem, device);
      if (const std::optional<Config> mid = swapped_mid_width(shaped, problem, device))
        shaped = *mid;
    }
    if (streamed && streams_if_unswapped && !shaped.at("swap_ab")) shaped = *streamed;
    // fp32 with B row-major: the swapped twin of the tile (B read in place). Where the
    // wave-fitted tile has none (ping-pong, 176, 224 or 192 rows on three consumers), 128x256's
    // twin, unless its waves cost more than the fitted tile's with B's transpose: the transpose
    // writes and reads 8 bytes an element of B at ~2.5 TB/s, the product runs 2MNK at ~360
    // TFLOP/s, so it adds about 576 / M to the product (5437x1032x376: the fitted 128x176 with B
    // transposed 0.0281 ms, 128x256 swapped 0.0318; 1024x14336x4096: 0.514 against 0.361).
    // With A column-major (which swapped tiles transpose) only in place of ping-pong tiles,
    // whatever the waves: 1.07-1.84x over 21 such shapes (v53).
    if (s.tf32() && !s.b_columns && !shaped.at("swap_ab") && !narrow) {
      std::optional<Config> twin;
      if (!shaped.at("pingpong")) twin = swapped_twin(shaped, problem, device);
      const bool pingpong_a_columns = s.a_columns && shaped.at("pingpong");
      if (!twin && !few_tiles && (!s.a_columns || pingpong_a_columns)) {
        const std::optional<Config> wide = swapped_twin(base, problem, device);
        const double fitted = wave_cost(WgmmaConfig(shaped), s, device.sm_count) *
                              (shaped.at("pingpong") ? 1.0 - kPingpongEpilogueShare : 1.0);
        if (wide && (pingpong_a_columns || wave_cost(WgmmaConfig(*wide), s, device.sm_count) <=
                                               fitted * (1.0 + 576.0 / static_cast<double>(s.m))))
          twin = wide;
      }
      if (twin) shaped = *twin;
    }
    const std::optional<std::string> rejected = reject(shaped, problem, device);
    if (!rejected) return shaped;
    if (!reject(base, problem, device)) {
      if (fell_back) *fell_back = shaped.text() + ": " + *rejected;
      return base;
    }
    Config config;
    // 128x128x32 with a 64x64 warp tile, 4 stages: 76 KB of shared memory; 3 stages (57 KB)
    // where the device allows less.
    config.values = {{"variant", kMmaSync}, {"block_m", 128}, {"block_n", 128}, {"block_k", 32},
                     {"warps_m", 2},        {"warps_n", 2},    {"stages", 4},    {"group_m", 8}};
    while (reject(config, problem, device) && config.values["stages"] > 2) config.values["stages"]--;
    if (reject(config, problem, device))
      config.values = {{"variant", kMmaSync}, {"block_m", 64}, {"block_n", 64}, {"block_k", 32},
                       {"warps_m", 2},        {"warps_n", 2},   {"stages", 2},   {"group_m", 1}};
    return config;
  }

  void validate(const Problem& problem) const override {
    if (problem.op != "matmul") throw InvalidArgument("matmul: asked for op " + quote_input(problem.op));
    validate_options("matmul", matmul_options(), problem);
    if (problem.shape.size() != 3 && problem.shape.size() != 4)
      throw InvalidArgument("matmul: shape " + quote_input(problem.shape_text()) +
                            " must be MxNxK or BxMxNxK (B batches)");
    for (auto dim : problem.shape)
      if (dim <= 0 || dim > (1ll << 31) - 1)
        throw InvalidArgument("matmul: shape " + quote_input(problem.shape_text()) +
                              " has a dimension outside 1..2^31-1");
    MatmulShape s(problem);
    if (s.batch * s.m * s.k >= (1ll << 40) || s.batch * s.k * s.n >= (1ll << 40) ||
        s.batch * s.m * s.n >= (1ll << 40))
      throw InvalidArgument("matmul: shape " + quote_input(problem.shape_text()) + " is too large");
    // Every dtype goes in (f32 is multiplied as tf32) and out.
    if (s.strides_unaligned && !s.rows_aligned())
      throw InvalidArgument("matmul: shape " + quote_input(problem.shape_text()) +
                            " has unaligned rows already: leave out aligned=0");
  }

  // A call runs as the problem whose kernels fit its strides. An operand stored as k rows of
  // one element (a column-major A of one row, a row-major B of one column), packed, holds the
  // bytes of its other layout's single row, which TMA and the row readers take whole where k
  // rows of 2 bytes were gathered or padded first: the call runs as that layout (1x6624x512 cr
  // 0.43x cuBLAS; docs/perf/matmul.md v74). Strides off 16-byte boundaries need the kernels
  // that gather rows, which an aligned shape would not get: such a call runs with aligned=0.
  Problem problem_for_call(Problem problem, const CallScalars& scalars) const override {
    const MatmulShape given(problem);
    const auto packed = [](std::int64_t stride) { return stride == 0 || stride == 1; };
    if (given.m == 1 && given.a_columns && packed(scalars.row_strides[0]))
      problem.options.erase("a");
    if (given.n == 1 && !given.b_columns && packed(scalars.row_strides[1]))
      problem.options["b"] = "col";
    const MatmulShape s(problem);
    if (!s.rows_aligned() || s.strides_unaligned) return problem;
    // A and B first (tensors() order), then the bias (no strides), residual and C, each as
    // MatmulStrides reads it (a matrix of one row has no row stride to align).
    const std::size_t checked = s.output_strides_matter() ? CallScalars::kMaxTensors : 2;
    const long long row_lengths[] = {s.a_row_length(), s.b_row_length(), s.n};
    const long long row_counts[] = {s.a_rows(), s.b_rows(), s.m};
    const auto row_stride = [&](std::size_t i) {
      const std::size_t j = std::min<std::size_t>(i, 2);
      return MatmulStrides::row_stride(scalars.row_strides[i], row_lengths[j], row_counts[j],
                                       s.batch > 1 && !scalars.batch_strides[i]);
    };
    for (std::size_t i = 0; i < checked; ++i)
      if (row_stride(i) % s.per_16_bytes() ||
          scalars.batch_strides[i].value_or(0) % s.per_16_bytes()) {
        problem.options["aligned"] = "0";
        break;
      }
    return problem;
  }

  std::string kernel_file(const Config& config) const override {
    switch (config.at("variant")) {
      case kWgmma: return "matmul/matmul_sm90.cuh";
      case kDecode: return "matmul/matmul_decode.cuh";
      case kGemv: return "matmul/matmul_gemv.cuh";
      case kGemvKn: return "matmul/matmul_gemv_kn.cuh";
      default: return "matmul/matmul.cuh";
    }
  }

  std::vector<std::string> kernel_expressions(const Config& config,
                                              const Problem& problem) const override {
    const std::string kinds = std::to_string(element_kind(problem.dtype)) + "," +
                              std::to_string(element_kind(problem.out_dtype));
    const MatmulShape s = shape_for(problem, config);
    if (config.at("variant") == kDecode) {
      const DecodeConfig c(config);
      std::vector<std::string> kernels = {
          "tilesmith::matmul_decode<" + std::to_string(DecodeConfig::rows(s.m)) + "," +
          std::to_string(c.block_n) + "," + std::to_string(c.warps) + "," +
          std::to_string(c.unroll) + "," + std::to_string(s.row_vector()) + "," + kinds + "," +
          std::to_string(s.epilogue) + "," + std::to_string(c.row_bytes) + ">"};
      if (c.split_k > 1) kernels.push_back(splitk_reduce_expression(problem));
      return kernels;
    }
    if (config.at("variant") == kGemv) {
      const GemvConfig c(config);
      const MatmulShape ks = row_reader_shape(s, kGemvRows);
      return {"tilesmith::matmul_gemv<" + std::to_string(GemvConfig::rows(ks.m)) + "," +
              std::to_string(c.block_n) + "," + std::to_string(c.threads()) + "," +
              std::to_string(c.unroll) + "," + std::to_string(ks.row_vector()) + "," + kinds + "," +
              (ks.a_columns ? "1" : "0") + "," + (ks.c_transposed ? "1" : "0") + "," +
              std::to_string(s.epilogue) + ">"};
    }
    if (config.at("variant") == kGemvKn) {
      const GemvKnConfig c(config);
      const MatmulShape ks = row_reader_shape(s, kGemvKnRows);
      std::vector<std::string> kernels = {
          "tilesmith::matmul_gemv_kn<" + std::to_string(GemvKnConfig::rows(ks.m)) + "," +
          std::to_string(c.vector) + "," + std::to_string(c.warps) + "," +
          std::to_string(c.unroll) + "," + kinds + "," + (ks.a_columns ? "1" : "0") + "," +
          (ks.c_transposed ? "1" : "0") + "," + std::to_string(s.epilogue) + ">"};
      if (c.split_k > 1) kernels.push_back(splitk_reduce_expression(problem));
      return kernels;
    }
    if (config.at("variant") == kWgmma) {
      WgmmaConfig w(config);
      // The kernel's layout is the product's as the kernel computes it (swap_ab: C^T), after
      // any transposes.
      const MatmulShape ks = w.swap_ab ? s.as_read().swapped() : s.as_read();
      std::vector<std::string> kernels = {
          "tilesmith::matmul_sm90<" + std::to_string(w.block_m) + "," +
          std::to_string(w.block_n) + "," + std::to_string(w.block_k) + "," +
          std::to_string(w.consumers) + "," + std::to_string(w.cluster_m) + "," +
          std::to_string(w.cluster_n) + "," + kinds + "," + std::to_string(ks.layout()) + "," +
          std::to_string(s.epilogue) + "," + std::to_string(w.swap_ab) + "," +
          std::to_string(w.cluster_k()) + "," + std::to_string(w.pingpong) + "," +
          std::to_string(w.split_in_grid) + (s.weight_phased ? ",1" : "") + ">"};
      add_preparation_kernels(kernels, config, problem);
      return kernels;
    }
    TileConfig t(config);
    std::vector<std::string> kernels = {
        "tilesmith::matmul_kernel<" + std::to_string(t.block_m) + "," +
        std::to_string(t.block_n) + "," + std::to_string(t.block_k) + "," +
        std::to_string(t.warps_m) + "," + std::to_string(t.warps_n) + "," +
        std::to_string(t.stages) + "," + (s.reads_aligned() ? "1" : "0") + "," + kinds + "," +
        std::to_string(s.as_read().layout()) + "," + std::to_string(s.epilogue) + ">"};
    add_preparation_kernels(kernels, config, problem);
    return kernels;
  }

  // The tiled templates' workspace: A and B with their rows padded (wgmma, unaligned shapes)
  // or transposed (tf32), then the fp32 partial products of the K slices (split_k > 1). The
  // decode and gemv_kn variants': their K slices' partials.
  std::size_t workspace_bytes(const Config& config, const Problem& problem,
                              const DeviceTarget& device) const override {
    const MatmulShape s = shape_for(problem, config);
    if (config.at("variant") == kDecode) return slice_partials_bytes(DecodeConfig(config).split_k, s);
    if (config.at("variant") == kGemv) return 0;
    if (config.at("variant") == kGemvKn) return slice_partials_bytes(GemvKnConfig(config).split_k, s);
    return Workspace(Preparation::of(config, s, &device), s, 0).bytes;
  }

  LaunchPlan plan(const Config& config, const Problem& problem, const DeviceTarget& device,
                  std::span<const std::uint64_t> addresses, std::uint64_t workspace,
                  const CallScalars& scalars) const override {
    LaunchPlan plan;
    const MatmulShape s = shape_for(problem, config);
    const Operands operands(s, addresses);
    const MatmulStrides strides = MatmulStrides::of_call(s, scalars);
    const int variant = config.at("variant");
    if (variant == kDecode) {
      const DecodeConfig c(config);
      LaunchGeometry geometry;
      geometry.grid[0] = static_cast<unsigned>(ceil_div(s.n, c.block_n));
      geometry.grid[1] = static_cast<unsigned>(c.split_k);
      geometry.grid[2] = static_cast<unsigned>(std::min<long long>(s.batch, 65535));
      geometry.block[0] = static_cast<unsigned>(c.threads());
      geometry.dynamic_smem_bytes = static_cast<unsigned>(c.smem_bytes(s.m));
      add_sliced_launch(plan, geometry, c.split_k, s, params(s, strides, operands, operands.c),
                        strides, operands, workspace, device);
      return plan;
    }
    if (variant == kGemvKn) {
      const GemvKnConfig c(config);
      const MatmulShape ks = row_reader_shape(s, kGemvKnRows);
      LaunchGeometry geometry;
      geometry.grid[0] = static_cast<unsigned>(ceil_div(ks.n, c.columns()));
      geometry.grid[1] = static_cast<unsigned>(c.split_k);
      geometry.grid[2] = static_cast<unsigned>(s.batch);
      geometry.block[0] = static_cast<unsigned>(c.threads());
      add_sliced_launch(plan, geometry, c.split_k, s, row_reader_params(s, ks, strides, operands),
                        strides, operands, workspace, device);
      return plan;
    }
    if (variant == kGemv) {
      const GemvConfig c(config);
      const MatmulShape ks = row_reader_shape(s, kGemvRows);
      LaunchGeometry geometry;
      geometry.grid[0] = static_cast<unsigned>(ceil_div(ks.n, c.block_n));
      geometry.grid[2] = static_cast<unsigned>(s.batch);
      geometry.block[0] = static_cast<unsigned>(c.threads());
      plan.add(0, geometry, KernelArgs::of(row_reader_params(s, ks, strides, operands)));
      return plan;
    }
    const Preparation prep = Preparation::of(config, s, &device);
    const PlanKernels index(prep, s);
    const Workspace space(prep, s, workspace);
    // split_in_grid's counters start at zero in every call (the workspace is shared: the tuner's
    // between configs). A memset: a kernel that zeroed them cost ~1 us more, even launched
    // for the product to overlap (docs/perf/matmul.md v27).
    if (prep.arrival_counters > 0)
      plan.add_zero_fill(space.arrivals, static_cast<std::uint64_t>(prep.arrival_counters) * 4);
    Operand a{operands.a, strides.lda, strides.stride_a, strides.stride_a == 0 && s.batch > 1};
    Operand b{operands.b, strides.ldb, strides.stride_b, strides.stride_b == 0 && s.batch > 1};
    CopyRowsParams copies{};
    prepare_operand(plan, copies.matrix[0], index, s, a, s.transposes_a(), space.a, s.a_rows(),
                    s.a_row_length(), space.lda);
    prepare_operand(plan, copies.matrix[1], index, s, b, s.transposes_b(), space.b, s.b_rows(),
                    s.b_row_length(), space.ldb);
    if (copies.matrix[0].rows + copies.matrix[1].rows > 0)
      plan.add(index.copy, copy_geometry(device, copies.matrix[0].rows + copies.matrix[1].rows),
               KernelArgs::of(copies));
    // A weight read in row phases (its rows as the call lays them out) and A gathered to match
    // them, packed over the permuted K.
    const Operand weight = b;
    std::optional<WeightPhases> phases;
    if (s.weight_phased) {
      phases = WeightPhases::of(s.k, strides.ldb * s.in_bytes, s.in_bytes);
      if (phases->phases > kMaxWeightPhases)
        throw std::logic_error("matmul: a weight in " + std::to_string(phases->phases) +
                               " row phases (the kernels take " +
                               std::to_string(kMaxWeightPhases) + " at most)");
      const bool k_contiguous = !s.a_columns;
      plan.add(index.gather, gather_geometry(s.m, phases->phase_k, k_contiguous),
               KernelArgs::of(GatherPhasesParams{
                   reinterpret_cast<const void*>(a.address), reinterpret_cast<void*>(space.a),
                   s.m, s.k, k_contiguous ? a.ld : 1, k_contiguous ? 1 : a.ld, phases->phase_k,
                   phases->phases, phases->stride, k_contiguous ? 1 : 0}));
      a = {space.a, phases->k(), s.m * phases->k(), false};
    }
    if (variant == kMmaSync) {
      const TileConfig t(config);
      LaunchGeometry geometry;
      geometry.grid[0] = static_cast<unsigned>(ceil_div(s.m, t.block_m) * ceil_div(s.n, t.block_n));
      geometry.grid[1] = static_cast<unsigned>(std::min<long long>(s.batch, 65535));
      geometry.block[0] = t.threads();
      geometry.dynamic_smem_bytes = t.smem_bytes(s);
      MatmulParams p = params(s, strides, operands, operands.c);
      p.a = reinterpret_cast<const void*>(a.address);
      p.b = reinterpret_cast<const void*>(b.address);
      p.lda = static_cast<int>(a.ld);
      p.ldb = static_cast<int>(b.ld);
      p.stride_a = a.stride;
      p.stride_b = b.stride;
      p.group_m = t.group_m;
      plan.add(0, geometry, KernelArgs::of(p));
      return plan;
    }
    const WgmmaConfig w(config);
    // The product as the kernel computes it (swap_ab: C^T = B^T A^T, the operands exchanged),
    // after any transposes.
    const MatmulShape ks = w.swap_ab ? s.as_read().swapped() : s.as_read();
    if (w.swap_ab) std::swap(a, b);
    // Persistent: one CTA per SM at most (one fits, by its shared memory), in whole clusters,
    // and no more clusters than there are units of work.
    const bool tail = prep.tail_blocks > 0;
    const long long units = kernel_tiles(w, s) * (tail ? 1 : w.workspace_splits());
    LaunchGeometry geometry;
    geometry.grid[0] =
        static_cast<unsigned>(std::min(units, wave_clusters(w, device.sm_count)) * w.cluster());
    geometry.block[0] = static_cast<unsigned>(w.threads());
    const bool ring_exchange = exchange_in_ring(w, s, device.sm_count);
    geometry.dynamic_smem_bytes = static_cast<unsigned>(w.smem_bytes(ring_exchange));
    // split_in_grid: CTAs wait on each other's slices, so all of them run at once, or the
    // driver refuses the launch (reject() keeps the units within a wave).
    if (w.split_in_grid) geometry.waiting_group = geometry.grid[0];
    MatmulSm90Params p{};
    p.c = reinterpret_cast<void*>(operands.c);
    p.m = static_cast<int>(ks.m);
    p.n = static_cast<int>(ks.n);
    const long long kernel_k = phases ? phases->k() : s.k;
    p.k = static_cast<int>(kernel_k);
    p.ldc = static_cast<int>(strides.ldc);
    p.batch = static_cast<int>(s.batch);
    p.stride_c = strides.stride_c;
    p.group_m = w.group_m;
    p.stages = w.stages;
    p.exchange_in_ring = ring_exchange ? 1 : 0;
    p.a_shared = a.shared ? 1 : 0;
    p.b_shared = b.shared ? 1 : 0;
    const std::uint64_t in_bytes = dtype_size(problem.dtype);
    const std::uint64_t out_bytes = dtype_size(problem.out_dtype);
    // C through TMA stores where its rows and batches start on 16-byte boundaries (C itself is
    // 16-byte aligned: the runtime and the tuner require it) and end on one: TMA writes whole
    // 16-byte chunks, so a row ending inside one (N = 301 of a C padded to 312 columns) would
    // have the rest of that chunk, past the view, overwritten (seen on the H100). Else plain
    // stores, any ldc.
    p.c_store_tma = (strides.ldc * out_bytes) % 16 == 0 &&
                            (strides.stride_c * out_bytes) % 16 == 0 &&
                            (s.n * static_cast<long long>(out_bytes)) % 16 == 0 &&
                            (w.split_k == 1 || tail) && !w.exchange()
                        ? 1
                        : 0;
    p.k_splits = w.workspace_splits();
    p.slice_major = w.slice_major;
    p.tail = tail ? 1 : 0;
    p.partials = reinterpret_cast<float*>(space.partials);
    p.slice_arrivals = reinterpret_cast<unsigned*>(space.arrivals);
    p.epilogue = epilogue_args(strides, operands);
    // Phase h's map starts on the 16-byte boundary at or before its first row: its columns
    // begin `shift` elements before the weight's.
    MatmulSm90PhasedParams phased{};
    std::array<std::uint64_t, kMaxWeightPhases> phase_base{};
    if (phases) {
      static_cast<MatmulSm90Params&>(phased) = p;
      phased.phases = phases->phases;
      phased.phase_blocks = static_cast<int>(phases->phase_k / w.block_k);
      for (int h = 0; h < phases->phases; ++h) {
        const std::uint64_t first_row = weight.address + h * weight.ld * in_bytes;
        phase_base[h] = first_row & ~std::uint64_t{15};
        phased.weight_shift[h] = static_cast<int>((first_row - phase_base[h]) / in_bytes);
      }
    }
    KernelArgs args = phases ? KernelArgs::of(phased) : KernelArgs::of(p);
    // The dimensions are the true ones: TMA reads zeros past them, never the padding. A
    // K-major tile is a box of 64 k x rows; an MN-major one is loaded as 64-wide column blocks
    // of BK k rows. Each CTA of a cluster loads its slice of the shared tile (matmul_sm90.cuh).
    // A shared matrix's map holds one batch, which the kernel reads for every batch.
    auto operand_map = [&](const Operand& x, long long columns, long long rows, int box_rows) {
      TensorMapSpec spec = tensor_map(problem.dtype, x.address, columns, rows, x.shared ? 1 : s.batch,
                                      x.ld * in_bytes, (x.shared ? rows * x.ld : x.stride) * in_bytes,
                                      static_cast<std::uint32_t>(128 / in_bytes), box_rows);
      spec.l2_promotion_bytes = static_cast<std::uint32_t>(w.l2_promotion);
      return spec;
    };
    // (The maps sit where they do in MatmulSm90Params, the phased params' first part.)
    if (!phases)  // (a weight read in phases is the swapped kernel's A)
      args.request_tensor_map(
          p, p.a_map,
          ks.a_columns ? operand_map(a, ks.m, kernel_k, w.block_k / w.cluster_n)
                       : operand_map(a, kernel_k, ks.m,
                                     multicast_box_rows(w.block_m, w.cluster_n)));
    args.request_tensor_map(p, p.b_map,
                            ks.b_columns ? operand_map(b, kernel_k, ks.n,
                                                       multicast_box_rows(w.block_n, w.cluster_m))
                                         : operand_map(b, ks.n, kernel_k, w.block_k / w.cluster_m));
    // Each phase's rows, G rows apart, from the 16-byte boundary at or before its first row
    // (TMA starts a box only on one): 64-column boxes of a whole k block, as any MN-major
    // operand's; the kernel's tiles start on multiples of 8 columns of the map.
    for (int h = 0; phases && h < phases->phases; ++h) {
      const long long rows = (s.k - h + phases->stride - 1) / phases->stride;
      const std::uint64_t row_bytes = phases->stride * weight.ld * in_bytes;
      TensorMapSpec spec = tensor_map(problem.dtype, phase_base[h], s.n + phased.weight_shift[h],
                                      rows, 1, row_bytes, rows * row_bytes,
                                      static_cast<std::uint32_t>(128 / in_bytes), w.block_k);
      spec.l2_promotion_bytes = static_cast<std::uint32_t>(w.l2_promotion);
      args.request_tensor_map(phased, phased.weight_maps[h], spec);
    }
    // C: stored in boxes of 128 bytes x 64 rows from swizzled staging slots.
    if (p.c_store_tma)
      args.request_tensor_map(
          p, p.c_map,
          tensor_map(problem.out_dtype, operands.c, s.n, s.m, s.batch, strides.ldc * out_bytes,
                     strides.stride_c * out_bytes, static_cast<std::uint32_t>(128 / out_bytes),
                     64));
    plan.add(0, geometry, args);
    if (index.reduce >= 0) {
      SplitKReduceParams reduce = splitk_reduce_params(s, strides, p.epilogue, space.partials,
                                                       operands.c, w.workspace_splits());
      long long runs = s.batch * s.m * ceil_div(s.n, 4);
      if (tail) {
        reduce.tail = 1;
        reduce.tiles_m = static_cast<int>(ceil_div(ks.m, w.block_m * w.cluster_m));
        reduce.tiles_n = static_cast<int>(ceil_div(ks.n, w.block_n * w.cluster_n));
        reduce.group_m = w.group_m;
        reduce.block_m = w.block_m;
        reduce.block_n = w.block_n;
        reduce.cluster_m = w.cluster_m;
        reduce.cluster_n = w.cluster_n;
        runs = prep.tail_blocks * prep.block_floats / 4;
      }
      add_splitk_reduce(plan, index.reduce, device, runs, reduce);
    }
    return plan;
  }

  // A, B, then the epilogue's inputs the options ask for (bias: n elements, residual: like C),
  // then C; bias and residual have C's type.
  std::vector<TensorSpec> tensors(const Problem& problem) const override {
    const MatmulShape s(problem);
    const auto count = [](long long elements) { return static_cast<std::size_t>(elements); };
    std::vector<TensorSpec> specs = {{"A", problem.dtype, count(s.batch * s.m * s.k), false},
                                     {"B", problem.dtype, count(s.batch * s.k * s.n), false}};
    if (s.has_bias()) specs.push_back({"bias", problem.out_dtype, count(s.n), false});
    if (s.has_residual())
      specs.push_back({"residual", problem.out_dtype, count(s.batch * s.m * s.n), false});
    specs.push_back({"C", problem.out_dtype, count(s.batch * s.m * s.n), true});
    return specs;
  }

  std::string reference_file() const override { return "matmul/matmul.cuh"; }

  std::string reference_expression(const Problem& problem) const override {
    const MatmulShape s(problem);
    return "tilesmith::matmul_reference<" + std::to_string(element_kind(problem.dtype)) + "," +
           std::to_string(element_kind(problem.out_dtype)) + "," + std::to_string(s.layout()) +
           "," + std::to_string(s.epilogue) + ">";
  }

  LaunchGeometry reference_launch(const Problem& problem) const override {
    const MatmulShape s(problem);
    LaunchGeometry geometry;
    geometry.grid[0] = static_cast<unsigned>((s.n + 15) / 16);
    geometry.grid[1] = static_cast<unsigned>((s.m + 15) / 16);
    geometry.grid[2] = static_cast<unsigned>(std::min<long long>(s.batch, 65535));
    geometry.block[0] = geometry.block[1] = 16;
    return geometry;
  }

  KernelArgs reference_args(const Problem& problem, std::span<const std::uint64_t> addresses,
                            std::uint64_t reference_out) const override {
    const MatmulShape s(problem);
    return KernelArgs::of(params(s, MatmulStrides::packed(s), Operands(s, addresses), reference_out));
  }

  std::vector<double> reference_cpu(const Problem& problem,
                                    const std::vector<std::vector<double>>& inputs) const override {
    const MatmulShape s(problem);
    const auto& a = inputs.at(0);
    const auto& b = inputs.at(1);
    std::size_t next = 2;
    const std::vector<double>* bias = s.has_bias() ? &inputs.at(next++) : nullptr;
    const std::vector<double>* residual = s.has_residual() ? &inputs.at(next++) : nullptr;
    const long long lda = s.a_row_length(), ldb = s.b_row_length();
    std::vector<double> c(static_cast<std::size_t>(s.batch * s.m * s.n), 0.0);
    for (long long batch = 0; batch < s.batch; ++batch) {
      const double* a_batch = a.data() + batch * s.m * s.k;
      const double* b_batch = b.data() + batch * s.k * s.n;
      double* c_batch = c.data() + batch * s.m * s.n;
      for (long long i = 0; i < s.m; ++i)
        for (long long kk = 0; kk < s.k; ++kk) {
          const double left = s.a_columns ? a_batch[kk * lda + i] : a_batch[i * lda + kk];
          for (long long j = 0; j < s.n; ++j)
            c_batch[i * s.n + j] +=
                left * (s.b_columns ? b_batch[j * ldb + kk] : b_batch[kk * ldb + j]);
        }
      for (long long i = 0; i < s.m; ++i)
        for (long long j = 0; j < s.n; ++j) {
          double& value = c_batch[i * s.n + j];
          if (bias) value += (*bias)[static_cast<std::size_t>(j)];
          value = activate_reference(s.epilogue, value);
          if (residual) value += (*residual)[static_cast<std::size_t>((batch * s.m + i) * s.n + j)];
        }
    }
    return c;
  }

  // tf32 keeps 10 of an fp32 input's 23 mantissa bits: each product is off by up to ~2e-3
  // relative, ~1e-3 over a long sum (torch's allow_tf32 matmuls show the same).
  double tolerance(const Problem& problem, const TensorSpec& output) const override {
    const double by_output = Family::tolerance(problem, output);
    return MatmulShape(problem).tf32() ? std::max(by_output, 5e-3) : by_output;
  }

  Work work(const Problem& problem) const override {
    const MatmulShape s(problem);
    Work work;
    work.flops = 2.0 * s.batch * s.m * s.n * s.k;
    const double out_bytes = static_cast<double>(dtype_size(problem.out_dtype));
    work.min_bytes = static_cast<double>(dtype_size(problem.dtype)) * s.batch * (s.m * s.k + s.k * s.n) +
                     out_bytes * s.batch * s.m * s.n * (s.has_residual() ? 2 : 1) +
                     (s.has_bias() ? out_bytes * s.n : 0);
    return work;
  }

 private:
  static long long ceil_div(long long a, long long b) { return (a + b - 1) / b; }

  static std::string splitk_reduce_expression(const Problem& problem) {
    return "tilesmith::splitk_reduce<" + std::to_string(element_kind(problem.out_dtype)) + "," +
           std::to_string(MatmulShape(problem).epilogue) + ">";
  }

  // C = the epilogue of the sum of the `splits` slices of fp32 m x n partials at `partials`.
  static SplitKReduceParams splitk_reduce_params(const MatmulShape& s, const MatmulStrides& strides,
                                                 const MatmulEpilogueArgs& epilogue,
                                                 std::uint64_t partials, std::uint64_t c,
                                                 int splits) {
    SplitKReduceParams p{};
    p.partials = reinterpret_cast<const float*>(partials);
    p.c = reinterpret_cast<void*>(c);
    p.m = static_cast<int>(s.m);
    p.n = static_cast<int>(s.n);
    p.ldc = static_cast<int>(strides.ldc);
    p.splits = splits;
    p.batch = static_cast<int>(s.batch);
    p.stride_c = strides.stride_c;
    p.epilogue = epilogue;
    return p;
  }

  // Split-K's second launch (kernel `index`): a thread per run of 4 columns (at most `runs`),
  // up to 8 blocks per SM.
  static void add_splitk_reduce(LaunchPlan& plan, int index, const DeviceTarget& device,
                                long long runs, const SplitKReduceParams& p) {
    LaunchGeometry reduce;
    reduce.grid[0] =
        static_cast<unsigned>(std::clamp<long long>(ceil_div(runs, 256), 1, 8ll * device.sm_count));
    reduce.block[0] = 256;
    plan.add(index, reduce, KernelArgs::of(p));
  }

  // The constraints of matmul_gemv.cuh, against this device and problem.
  static std::optional<std::string> reject_gemv(const GemvConfig& c, const Problem& problem,
                                                const DeviceTarget& device) {
    // Past four rows of A, C^T = B^T A^T: B's columns are the rows.
    const MatmulShape s = row_reader_shape(MatmulShape(problem), kGemvRows);
    if (!s.b_columns)
      return "the gemv kernel reads the weight's rows along K: B column-major (x @ W^T), or "
             "past four rows of A, A row-major";
    // A column-major A is a vector (one row, its k apart) or, past four rows of A, B's one
    // column: loaded element by element.
    if (s.a_columns && s.m > 1)
      return "the gemv kernel reads A (past four rows of A, B) row-major, or one column-major row";
    // Eight rows of A made ptxas spill a few bytes where registers were left (M = 8 with one
    // row of W, sm_80 and sm_90a); the MMA templates take them.
    if (s.m > kGemvRows) return "the gemv kernel is for M <= 4 or N <= 4";
    if (s.batch > 65535) return "the gemv kernel takes a batch per grid z: at most 65535";
    if (c.block_n < 1 || c.warps < 1 || c.unroll < 1)
      return "block_n, warps and unroll must be positive";
    if (c.threads() > device.max_threads_per_block) return "too many threads";
    if (GemvConfig::rows(s.m) * c.block_n > c.threads()) return "fewer threads than outputs";
    if (c.block_n > 1 && c.block_n / 2 >= s.n) return "block_n past twice N only reads zeros";
    // Every thread needs a chunk of every row: more threads than K's chunks only idle.
    const int vector = s.row_vector();
    if (c.warps > 2 && static_cast<long long>(c.threads() / 2) * vector >= s.k)
      return "half the threads would have no chunk of K";
    const int register_cap = std::min(255, device.regs_per_block / c.threads());
    const int registers = c.registers(s.m, vector, s.in_bytes);
    if (registers > register_cap)
      return "needs about " + std::to_string(registers) + " registers per thread; " +
             std::to_string(register_cap) + " available";
    return std::nullopt;
  }

  // The constraints of matmul_gemv_kn.cuh, against this device and problem.
  static std::optional<std::string> reject_gemv_kn(const GemvKnConfig& c, const Problem& problem,
                                                   const DeviceTarget& device) {
    // Past 32 rows of A, C^T = B^T A^T: B's columns are the rows, A (column-major) the weight.
    const MatmulShape s = row_reader_shape(MatmulShape(problem), kGemvKnRows);
    if (s.b_columns)
      return "the gemv_kn kernel reads B row-major (stored k x n), or past 32 rows of A, A "
             "column-major";
    if (s.m > kGemvKnRows) return "the gemv_kn kernel is for M <= 32 or N <= 32";
    if (s.batch > 65535) return "the gemv_kn kernel takes a batch per grid z: at most 65535";
    if (c.vector != 1 && c.vector != 2 && c.vector != 4 && c.vector != 8)
      return "vector must be 1, 2, 4 or 8 columns";
    if (c.vector > s.per_16_bytes()) return "at most 16 bytes a load: vector <= 16 / element bytes";
    if (c.warps < 1 || c.unroll < 1 || c.split_k < 1) return "warps, unroll and split_k must be positive";
    // Wide loads need B's rows on `vector` elements: where N is off them, every call would
    // take the element-by-element loads (16-byte vectors: the realigned pieces).
    if (s.n % c.vector && c.vector * s.in_bytes != 16)
      return "N is not a multiple of vector: its rows allow no wide loads";
    if (c.vector > 1 && c.columns() >= 2 * s.n) return "a CTA's columns past twice N only read zeros";
    if (c.threads() > device.max_threads_per_block) return "too many threads";
    if (GemvKnConfig::rows(s.m) * c.vector > 64) return "more than 64 sums a thread: rows x vector";
    const int register_cap = std::min(255, device.regs_per_block / c.threads());
    if (c.registers(s.m, s.in_bytes) > register_cap)
      return "needs about " + std::to_string(c.registers(s.m, s.in_bytes)) + " registers per thread; " +
             std::to_string(register_cap) + " available";
    if (c.split_k > 1 && ceil_div(s.k, c.round_rows()) < 2 * c.split_k)
      return "K slices under two rounds of warps x unroll rows";
    return std::nullopt;
  }

  // The workspace of a row-reading template (decode, gemv_kn) whose K is split over `split_k`
  // CTAs: their fp32 partials, split_k x batch x m x n.
  static std::size_t slice_partials_bytes(int split_k, const MatmulShape& s) {
    return split_k > 1 ? static_cast<std::size_t>(split_k * s.batch * s.m * s.n) * 4 : 0;
  }

  // The constraints of matmul_decode.cuh, against this device and problem.
  static std::optional<std::string> reject_decode(const DecodeConfig& c, const Problem& problem,
                                                  const DeviceTarget& device) {
    const MatmulShape s(problem);
    if (s.tf32()) return "the decode kernel takes bf16 or f16 inputs";
    if (s.a_columns || !s.b_columns)
      return "the decode kernel reads A row-major and B column-major (x @ W^T)";
    if (s.m > 32) return "the decode kernel is for M <= 32";
    if (c.block_n <= 0 || c.block_n % 8) return "block_n must be a positive multiple of 8";
    if (c.warps < 1 || c.unroll < 1 || c.split_k < 1)
      return "warps, unroll and split_k must be positive";
    if (c.row_bytes != 64 && c.row_bytes != 128 && c.row_bytes != 256 && c.row_bytes != 512)
      return "row_bytes must be 64, 128, 256 or 512";
    if (c.row_bytes > 64 && s.row_vector() < 8)
      return "rows read in whole lines (row_bytes past 64) must start on 16 bytes "
             "(aligned problems)";
    if (c.block_n > 8 && c.block_n / 2 >= s.n) return "block_n past twice N only reads zeros";
    if (c.threads() > device.max_threads_per_block) return "too many threads";
    const int register_cap = std::min(255, device.regs_per_block / c.threads());
    const int registers = c.registers(s.m, s.row_vector());
    if (registers > register_cap)
      return "needs about " + std::to_string(registers) + " registers per thread; " +
             std::to_string(register_cap) + " available";
    if (c.smem_bytes(s.m) > device.max_smem_per_block_optin)
      return "needs " + std::to_string(c.smem_bytes(s.m)) +
             " bytes of shared memory, device allows " +
             std::to_string(device.max_smem_per_block_optin);
    if (c.split_k > 1) {
      // Splitting K pays only where the column blocks leave SMs without two CTAs, and every
      // warp of every slice needs a chunk.
      if (s.batch * ceil_div(s.n, c.block_n) >= 2ll * device.sm_count)
        return "the column blocks already fill the SMs: no split-K";
      if (ceil_div(s.k, 32ll * c.span_chunks()) < static_cast<long long>(c.split_k) * c.warps)
        return "fewer spans of K than the slices' warps";
    }
    return std::nullopt;
  }

  // What a tiled template's plan runs around the product, and the workspace it needs.
  // `pads_rows`: unaligned rows are copied into padded ones first (the wgmma template: TMA);
  // the mma.sync template gathers them instead. `splits`: K slices summed through the
  // workspace. Both templates transpose tf32's MN-major operands.
  // `tail_blocks`: with a tail split, the most CTA blocks of partials it writes (one per SM),
  // each `block_floats` long; 0 where the slices are whole m x n matrices, or without a device
  // (the kernels a plan runs do not depend on it).
  // `arrival_counters`: with split_in_grid, the CTA blocks whose slices the product sums itself
  // (one counter each; no reduce launch).
  struct Preparation {
    bool pads_rows;
    int splits;
    long long tail_blocks = 0, block_floats = 0, arrival_counters = 0;
    static Preparation of(const Config& config, const MatmulShape& s,
                          const DeviceTarget* device = nullptr) {
      if (config.at("variant") != kWgmma) return {false, 1};
      const WgmmaConfig w(config);
      Preparation prep{!s.aligned() && !s.weight_phased, w.workspace_splits()};
      if (w.split_in_grid) prep.arrival_counters = kernel_tiles(w, s) * w.cluster();
      if (device && tail_split(w, s, device->sm_count)) {
        prep.tail_blocks = device->sm_count;
        prep.block_floats = static_cast<long long>(w.block_m) * w.block_n;
      }
      return prep;
    }
  };

  // The kernels of a tiled config, as numbered in kernel_expressions: the product (0), then the
  // padding copy (of an operand not transposed anyway), the transpose, A's gather for a weight
  // read in row phases, split-K's reduction (none where the product sums its slices itself:
  // split_in_grid); -1 where not used.
  struct PlanKernels {
    int copy = -1, transpose = -1, gather = -1, reduce = -1;
    PlanKernels(const Preparation& prep, const MatmulShape& s) {
      int next = 1;
      if (prep.pads_rows && !(s.transposes_a() && s.transposes_b())) copy = next++;
      if (s.transposes_a() || s.transposes_b()) transpose = next++;
      if (s.weight_phased) gather = next++;
      if (prep.splits > 1 && prep.arrival_counters == 0) reduce = next++;
    }
  };

  // A tiled config's workspace, each part on a 256-byte boundary: copies of A and B with rows
  // padded (padded_row_length) where they are unaligned and the template pads them, or transposed
  // (tf32: each MN-major operand, its rows of K padded), then the K slices' m x n fp32 partial
  // products where K is split, then split_in_grid's arrival counters.
  struct Workspace {
    long long lda = 0, ldb = 0;
    std::uint64_t a = 0, b = 0, partials = 0, arrivals = 0;
    std::size_t bytes = 0;
    Workspace(const Preparation& prep, const MatmulShape& s, std::uint64_t base) {
      auto take = [&](std::size_t size) {
        const std::uint64_t at = base + bytes;
        bytes += (size + 255) / 256 * 256;
        return at;
      };
      // A copy of `rows` stored rows of `length` elements (the transposed: `length` rows of
      // `rows`), rows padded (padded_row_length).
      auto copy = [&](bool transpose, long long rows, long long length, long long& ld) {
        if (!transpose && !prep.pads_rows) return std::uint64_t{0};
        if (transpose) std::swap(rows, length);
        ld = s.padded_row_length(length);
        return take(static_cast<std::size_t>(s.batch * rows * ld * s.in_bytes));
      };
      a = copy(s.transposes_a(), s.a_rows(), s.a_row_length(), lda);
      if (s.weight_phased) {  // A gathered for the weight's phases, for any row stride of B
        lda = WeightPhases::most_k(s.k, s.in_bytes);
        a = take(static_cast<std::size_t>(s.m * lda * s.in_bytes));
      }
      b = copy(s.transposes_b(), s.b_rows(), s.b_row_length(), ldb);
      if (prep.tail_blocks > 0)
        partials = take(static_cast<std::size_t>(kTailHeader + prep.tail_blocks * prep.block_floats) * 4);
      else if (prep.splits > 1)
        partials = take(static_cast<std::size_t>(prep.splits * s.batch * s.m * s.n) * 4);
      if (prep.arrival_counters > 0)
        arrivals = take(static_cast<std::size_t>(prep.arrival_counters) * 4);
    }
  };

  // The kernels of the preparation and the reduce after a tiled template's product (numbered
  // as in PlanKernels).
  static void add_preparation_kernels(std::vector<std::string>& kernels, const Config& config,
                                      const Problem& problem) {
    const MatmulShape s = shape_for(problem, config);
    const PlanKernels index(Preparation::of(config, s), s);
    const std::string element = std::to_string(s.in_bytes);
    if (index.copy >= 0) kernels.push_back("tilesmith::copy_rows<" + element + ">");
    if (index.transpose >= 0) kernels.push_back("tilesmith::transpose_rows<" + element + ">");
    if (index.gather >= 0) kernels.push_back("tilesmith::gather_phases<" + element + ">");
    if (index.reduce >= 0) kernels.push_back(splitk_reduce_expression(problem));
  }

  // An operand as a tiled kernel reads it: its base, rows, batch stride and whether one matrix
  // serves every batch (a batch stride of 0).
  struct Operand {
    std::uint64_t address;
    long long ld, stride;
    bool shared;
  };

  // Where the kernel cannot read operand `x` in place, the plan copies it into packed rows of
  // the workspace at `into` first, transposed (tf32 takes K-major operands: a launch of its own)
  // or with its rows padded to `padded` elements (TMA: `copy`, which one launch makes for both
  // operands); `x` then describes the copy. A shared matrix is copied once and stays shared
  // (batch stride 0).
  static void prepare_operand(LaunchPlan& plan, CopyRowsMatrix& copy, const PlanKernels& index,
                              const MatmulShape& s, Operand& x, bool transpose,
                              std::uint64_t into, long long rows, long long row_length,
                              long long padded) {
    const long long batches = x.shared ? 1 : s.batch;
    if (transpose) {
      plan.add(index.transpose, transpose_geometry(rows, row_length, batches),
               KernelArgs::of(TransposeParams{reinterpret_cast<const void*>(x.address),
                                              reinterpret_cast<void*>(into), batches, rows,
                                              row_length, x.ld, x.stride, padded}));
      x = {into, padded, x.shared ? 0 : row_length * padded, x.shared};
    } else if (index.copy >= 0 && !tma_reads_in_place(s, x)) {
      copy = CopyRowsMatrix{reinterpret_cast<const void*>(x.address), reinterpret_cast<void*>(into),
                            batches * rows, row_length, x.ld, padded, rows, x.stride};
      x = {into, padded, x.shared ? 0 : rows * padded, x.shared};
    }
  }

  // Whether TMA can read an operand where it lies: its base, rows and batches on 16-byte
  // boundaries. An unaligned problem pads only the operands that are not: the other may be
  // large (2x10488x9248 with A column-major: A's rows of 2 elements are off, B's 194 MB are not,
  // and copying them took 0.31 ms where cuBLAS takes 0.086; docs/perf/matmul.md v22).
  static bool tma_reads_in_place(const MatmulShape& s, const Operand& x) {
    const long long per_16 = s.per_16_bytes();
    return x.address % 16 == 0 && x.ld % per_16 == 0 && (x.shared || x.stride % per_16 == 0);
  }

  // 32 x 32 tiles of rows x cols, a 32 x 8 block each (transpose_rows's launch).
  static LaunchGeometry transpose_geometry(long long rows, long long cols, long long batches) {
    LaunchGeometry geometry;
    geometry.grid[0] = static_cast<unsigned>(ceil_div(cols, 32));
    geometry.grid[1] = static_cast<unsigned>(std::min<long long>(ceil_div(rows, 32), 65535));
    geometry.grid[2] = static_cast<unsigned>(std::min<long long>(batches, 65535));
    geometry.block[0] = 32;
    geometry.block[1] = 8;
    return geometry;
  }

  // gather_phases's launch (matmul_weight_phases.cuh): 256 threads along a row-major A's rows,
  // or on 32x32 tiles of a column-major A.
  static LaunchGeometry gather_geometry(long long rows, long long phase_k, bool k_contiguous) {
    LaunchGeometry geometry;
    geometry.grid[0] =
        static_cast<unsigned>(k_contiguous ? ceil_div(phase_k, 256) : ceil_div(rows, 32));
    geometry.grid[1] = static_cast<unsigned>(
        std::min<long long>(k_contiguous ? rows : ceil_div(phase_k, 32), 65535));
    geometry.block[0] = 256;
    return geometry;
  }

  // A block per row (of both matrices), up to 8 blocks per SM: a grid-stride loop covers the rest.
  static LaunchGeometry copy_geometry(const DeviceTarget& device, long long rows) {
    LaunchGeometry geometry;
    geometry.grid[0] = static_cast<unsigned>(std::clamp<long long>(rows, 1, 8ll * device.sm_count));
    geometry.block[0] = 256;
    return geometry;
  }

  // A batch of row-major matrices of `rows` rows of `columns` elements, copied in boxes of
  // box_columns x box_rows (x 1 batch) with the 128-byte swizzle.
  static TensorMapSpec tensor_map(DType dtype, std::uint64_t address, long long columns,
                                  long long rows, long long batch, std::uint64_t row_bytes,
                                  std::uint64_t batch_bytes, std::uint32_t box_columns,
                                  int box_rows) {
    TensorMapSpec spec;
    spec.dtype = dtype;
    spec.rank = 3;
    spec.address = address;
    spec.dims[0] = static_cast<std::uint64_t>(columns);
    spec.dims[1] = static_cast<std::uint64_t>(rows);
    spec.dims[2] = static_cast<std::uint64_t>(batch);
    spec.stride_bytes[0] = row_bytes;
    spec.stride_bytes[1] = batch_bytes;
    spec.box[0] = box_columns;
    spec.box[1] = static_cast<std::uint32_t>(box_rows);
    spec.box[2] = 1;
    spec.swizzle_bytes = 128;
    return spec;
  }

  // An unswapped tile that pads 65-112 rows of 16-bit M by more than a quarter:
  // swapped_mid_width then takes M in one tile of 80-112 columns over as many waves as the
  // weight's tiles take.
  static bool pads_mid_rows(const Config& config, const MatmulShape& s) {
    const long long rows = config.at("block_m");
    return !config.at("swap_ab") && !s.tf32() && s.m > 64 && s.m <= 112 &&
           4 * ceil_div(s.m, rows) * rows > 5 * s.m;
  }

  // The sm_90a kernel's output tiles (units of work without split-K) over every batch: a
  // cluster's CTAs share one unit.
  // A weight read in row phases takes block_m - 8 of its columns a tile (matmul_sm90.cuh,
  // PHASED).
  static long long kernel_tiles(const WgmmaConfig& w, const MatmulShape& s) {
    const MatmulShape ks = w.swap_ab ? s.swapped() : s;
    const int tile_m = w.block_m - (s.weight_phased ? 8 : 0);
    return ks.batch * ceil_div(ks.m, tile_m * w.cluster_m) *
           ceil_div(ks.n, w.block_n * w.cluster_n);
  }

  // The units of work `w` runs over `s` (kernel_tiles times the K slices summed through the
  // workspace), and the k blocks of each.
  static long long units_of(const WgmmaConfig& w, const MatmulShape& s) {
    return kernel_tiles(w, s) * w.workspace_splits();
  }
  static long long slice_blocks(const WgmmaConfig& w, const MatmulShape& s) {
    return ceil_div(ceil_div(s.k, w.block_k), w.workspace_splits());
  }

  // fp32 with B row-major: tf32 wgmma reads shared memory K-major only, so B would be
  // transposed into the workspace first (55 us of 0.40 ms at 4096^3, where cuBLAS reads it in
  // place). Swapped, B is the kernel's A, read in place through registers. The swapped twin of
  // the default's tile: 128x256 keeps its tile with its rows along N (128 of N x 256 of M, the
  // pair still sharing B: 1.01x cuBLAS at 4096^3, docs/perf/matmul.md v24); any other takes
  // its tile transposed (block_n of N x block_m of M), the cluster sharing the same operand,
  // on as many consumers as its rows allow. K slices through the workspace stay; a tail split
  // goes (it takes the tiles unswapped). Tiles under 128 columns of M send C^T through the
  // exchange buffer, which takes no cluster; they pay only against a large B (4M elements or
  // more: 128x4096x4096 0.0925 -> 0.0348 ms), where a small one's transpose costs less than
  // their slower epilogue (496x655x264: 0.0111 transposed, 0.0120 swapped). A column-major A
  // keeps its tile unswapped (read in place there, where swapped it would be transposed), but
  // for 128x256 (4096^3 with A column-major: 1.40x cuBLAS swapped, v24). Nothing where no such
  // twin fits on one or two consumer warpgroups.
  std::optional<Config> swapped_twin(const Config& config, const Problem& problem,
                                     const DeviceTarget& device) const {
    const WgmmaConfig w(config);
    const MatmulShape s(problem);
    const bool same_tile = w.block_m == 128 && w.block_n == 256;
    if (!s.a_columns && w.block_m < 128 && s.m > 64 && s.m <= 128 && s.m % 64) {
      // A skinny M off a multiple of 64 would leave most of a narrow twin's second tile empty
      // (100x4096x2000: 0.81x cuBLAS, where 128 rows ran 1.01x): M in one 128-column tile
      // instead, 128 rows of N on two consumers, K split until the tiles fill the SMs
      // (100x4096x1000-8192 and 72x4096x2000: 0.59-0.73x -> 0.85-1.03x; docs/perf/matmul.md v25).
      Config wide = WgmmaTile{128, 128, 2, 4}.on(config);
      wide.values["swap_ab"] = 1;
      wide.values["cluster_m"] = wide.values["cluster_n"] = wide.values["split_k"] = 1;
      const long long tiles = s.batch * ceil_div(s.n, 128);
      for (int slices = 8; slices > 1; slices /= 2)
        if (tiles * slices <= device.sm_count && ceil_div(s.k, w.block_k) >= 4ll * slices) {
          wide.values["split_k"] = slices;
          break;
        }
      if (!reject(wide, problem, device)) return wide;
    }
    if (!same_tile && (s.a_columns || (w.block_m < 128 && s.k * s.n < (4ll << 20))))
      return std::nullopt;
    Config twin = config;
    twin.values["swap_ab"] = 1;
    std::swap(twin.values["cluster_m"], twin.values["cluster_n"]);
    if (!same_tile) {
      twin.values["block_m"] = w.block_n;
      twin.values["block_n"] = w.block_m;
      if (w.block_m < 128) twin.values["cluster_m"] = twin.values["cluster_n"] = 1;
    }
    if (tail_split(w, s, device.sm_count)) twin.values["split_k"] = 1;
    // Not on three consumers: ptxas fits every role in 128 registers there, and the A
    // fragments with 192 accumulator columns ran 2-4% slower than the tile unswapped with B
    // transposed (3000^3, 817x4259x1822; docs/perf/matmul.md v25).
    for (const int consumers : {w.consumers, 1, 2}) {
      if (consumers > 2) continue;
      twin.values["consumers"] = consumers;
      for (int stages = w.stages; stages >= 2; --stages) {
        twin.values["stages"] = stages;
        if (!reject(twin, problem, device)) return twin;
      }
    }
    return std::nullopt;
  }

  // `config` with the deepest ring of the space's depths, 16 stages down to `fewest`, that the
  // constraints accept; with `fewest` stages where none is.
  Config deepest_ring(Config config, int fewest, const Problem& problem,
                      const DeviceTarget& device) const {
    for (int stages : {16, 13, 10, 8, 6, 4}) {
      if (stages < fewest) break;
      config.values["stages"] = stages;
      if (!reject(config, problem, device)) break;
    }
    return config;
  }

  // A few unswapped 128-row tiles whose operands' rows lie off L2's lines, so that each of
  // their box rows straddles two lines: in a pair sharing one of them, where that costs no wave.
  // 128x64 tiles where A's rows are off, along N (sharing A): 110x4400x3000 rr 0.0217 ms against
  // 0.0270; in rounds against the tile alone 1.145x over 16 fresh shapes of 92-511 rows
  // (0.99-1.29x: 286x1988x2488 rc 0.0224 against 0.0288); on the lines 0.99x. 128x128 tiles
  // where B's rows are off and M spans two tile rows or more, along M (sharing B): 1.081x over
  // ten fresh shapes (0.95-1.20x: 500x3544x12732 cr 0.0999 against 0.1199; K in 4 or 8 slices
  // 0.98-1.01x). Along N, sharing A (M in one tile row, or B's rows on the lines), they gained
  // nothing (0.93-1.09x on eight; docs/perf/matmul.md v41).
  Config paired_off_lines(const Config& config, const Problem& problem,
                          const DeviceTarget& device) const {
    const MatmulShape s(problem);
    const WgmmaConfig w(config);
    if (w.swap_ab || w.block_m != 128 || w.cluster() != 1) return config;
    const bool a_off = s.a_off_lines(), b_off = s.b_off_lines();
    // Both operands' rows off, M over one tile row and N over 512, K from kMinSplitK: 128x256
    // tiles in pairs along M (a pair computes 256x256 of C, so each straddling row is read by
    // half as many CTAs as 128x128 tiles'), K split as far as the pairs fill the SMs once, where
    // there are a dozen pairs or more (the sweeps' winners at 408x2872x8312 rr, 193x7360x7024
    // rc). In rounds against v40's default, 1.256x over 16 fresh shapes (0.98-1.65x:
    // 150x4256x7784 rc 0.0508 ms against 0.0836); 0.85-0.98x at 7 or 8 pairs and at K 1448
    // (docs/perf/matmul.md v41).
    const long long wide_pairs = s.batch * ceil_div(s.m, 256) * ceil_div(s.n, 256);
    if (a_off && b_off && s.m > 128 && s.n > 512 && s.k >= kMinSplitK &&
        wide_pairs >= kMinWidePairs) {
      Config wide = WgmmaTile{128, 256, 2, 4}.on(config);
      wide.values["cluster_m"] = 2;
      int split = 1;  // doubled while 2 x pairs x split CTAs fit the SMs, two k blocks a slice
      while (4 * wide_pairs * split <= device.sm_count && ceil_div(s.k, 64) >= 4 * split)
        split *= 2;
      wide.values["split_k"] = split;
      if (!reject(wide, problem, device)) return wide;
    }
    Config pair = config;
    if (w.block_n == 64 && a_off)
      pair.values["cluster_n"] = 2;
    else if (w.block_n == 128 && b_off && ceil_div(s.m, 128) >= 2)
      pair.values["cluster_m"] = 2;
    else
      return config;
    if (reject(pair, problem, device) || !costs_no_wave(pair, config, problem, device))
      return config;
    return pair;
  }

  // Few tiles (or one wave of fitted ones) of more than 64 rows of M, K from kMinMidWidthK
  // (kMinSplitK for fp32) to 8 times the larger of M and N (K-heavy shapes keep their
  // slices): M's side in swapped tiles of 80-112 rows in steps of 8, 128 of N on two
  // consumers, in clusters of 2 to 8 that fit one wave, as cuBLAS fits its
  // swapped tiles (618x2544x12240 rr: 120 CTAs of 104x128 in clusters of 4 along N x 2 along
  // M). Over 128 rows, the one few_tile_us puts first, K whole or in two or four slices, where
  // it puts it at kMidWidthShare of `config`'s time or less; clusters of 8 only where fours
  // along N pad its tiles no further than pairs (the five that did lost 0.88-0.98x). Slices
  // where the tiles fill under half a wave: few_tile_us ranked 10 of 10 measured pairs of two
  // (1.05-1.23x where they fit one wave, 0.77-0.88x where they took two); 1.12x over 20 fresh
  // shapes that took two, 1.13x over 16 that took four (docs/perf/matmul.md v45, v46). M in
  // one tile: its rows rounded up to 8, in fours along N. In rounds against v41's default (v42):
  // 1.18-1.21x over 36 fresh shapes, 1.196x over 16 of M in one tile, fp32 x @ W^T 1.312x over
  // 14; then against v42's (v43): 1.052x and 1.043x over two draws of 24 fresh shapes
  // (0.969-1.296), 1.020x over 16 of M in one tile, 1.173x over 10 of fp32 x @ W^T
  // (docs/perf/matmul.md). N's side in 256 rows on two consumers, or 64 on one (the
  // clusters along N holding its 64-row tiles whole), among few tiles where no 128-row one is
  // put first, and past few tiles where the fitted tiles take one wave (v48): in rounds
  // against v47's default 1.149x over 21 fresh shapes whose default changed (0.92-1.48x;
  // 562x4752x12856 rc in 256x96 pairs 0.1279 ms against 128x256 pairs' 0.1640; 849x169x4424
  // rc 64x88 0.0173 against 128x128's 0.0256), f16 1.133x, 1.148x and 1.076x over 26 more
  // each. A row-major A only (the kernel's B, K-major), rows on 16 bytes (no copy, which
  // few_tile_us does not count), 16-bit inputs or fp32 with B K-major, one batch.
  std::optional<Config> swapped_mid_width(const Config& config, const Problem& problem,
                                          const DeviceTarget& device) const {
    const MatmulShape s(problem);
    if (s.m <= 64 || !swaps_in_place(s) || s.k < (s.tf32() ? kMinSplitK : kMinMidWidthK) ||
        s.k > 8 * std::max(s.m, s.n))
      return std::nullopt;
    // rows: N's side of the tile, 64 rows on one consumer, 128 or 256 on two, 192 on three.
    auto mid_tile = [&](int rows, int width, int cluster_m, int cluster_n, int split) {
      Config mid = WgmmaTile{rows, width, rows == 64 ? 1 : rows == 192 ? 3 : 2, 4}.on(config);
      mid.values["swap_ab"] = 1;
      mid.values["cluster_m"] = cluster_m;
      mid.values["cluster_n"] = cluster_n;
      mid.values["split_k"] = split;
      mid.values["l2_promotion"] = 0;
      // The deepest ring within kMidWidthBytesInFlight, 5 stages at the least (4 lost
      // 0.88-0.98x to 5 where the bytes allowed 4), that fits: with the exchange buffer over it
      // (one wave: each CTA one unit) 8 stages up to 96 rows, 7 at 104 and 112 (depths
      // deepest_ring's steps skip). That budget is L2's: where M's two tiles share each box of
      // a weight larger than L2 (113-224 rows in a pair along M) and A's rows lie on L2's
      // lines, the weight streams from DRAM once, and the deepest ring that fits won on the
      // H200: 1.092x over 24 fresh shapes of LLM widths (1.00-1.19: 177x8192x14336 rc 0.0681
      // ms against 0.0807), 1.06-1.21x over five more of f16 and fp32 (tf32). With A's rows
      // off the lines it was a wash (1.014x over 37 random shapes, 0.95-1.15), and M in one
      // tile gained nothing (0.996x over 15; docs/perf/matmul.md v61).
      const double stage_bytes = grid_stage_read_bytes(WgmmaConfig(mid), shape_for(problem, mid));
      const bool streams_weight = s.m > 112 && ceil_div(s.m, width) <= cluster_n &&
                                  !s.a_off_lines() && s.n * s.k * s.in_bytes > device.l2_bytes;
      for (const int stages : {8, 7, 6, 5, 4}) {
        mid.values["stages"] = stages;
        if (!streams_weight && stages > 5 && stages * stage_bytes > kMidWidthBytesInFlight)
          continue;
        if (!reject(mid, problem, device)) break;
      }
      return mid;
    };
    auto fits_a_wave = [&](const Config& mid) {
      return !reject(mid, problem, device) && waves_of(mid, problem, device) == 1;
    };
    if (s.m <= 112) {
      // M in one tile (65-112 rows) and N's 128-row tiles on half the SMs or more: M rounded
      // up to 8 rows, in clusters of 4 along N (pairs where those take a second wave). v42:
      // 1.04-1.36x on five of six shapes against the default before (0.96x at 110x4400x3000
      // rr, which keeps it); v43, fours for every width: 1.002-1.077x over 16 fresh shapes.
      const int width = std::max(80, static_cast<int>((s.m + 7) / 8 * 8));
      if (2 * ceil_div(s.n, 128) < device.sm_count) {
        // Fewer: from kMinWideWeightK, N's 64-row tiles where they fill half the SMs or more,
        // one consumer, K whole, in clusters of 4 along N (pairs where those take a second
        // wave) sharing the activations, whose rows are as many as a tile's of the weight, as
        // deep a ring as fits (10 stages at widths 80-112). In rounds on the H200 against
        // 128x128 tiles in two K slices: 1.12-1.55x over 29 fresh shapes, 1.33x on the mean
        // (110x7208x5192 rr 0.0299 ms against 0.0442; cuBLAS 0.0270). Unclustered with 8
        // stages, they lost: 0.75-1.38x, 0.93x on the mean (docs/perf/matmul.md v56). fp32 x @
        // W^T (tf32) 1.02-1.36x over 11 fresh shapes (v58).
        if (s.k < kMinWideWeightK || 2 * ceil_div(s.n, 64) < device.sm_count)
          return std::nullopt;
        for (const int cluster_m : {4, 2}) {
          const Config mid = deepest_ring(mid_tile(64, width, cluster_m, 1, 1), 5, problem, device);
          if (fits_a_wave(mid)) return mid;
        }
        return std::nullopt;
      }
      for (const int cluster_m : {4, 2}) {
        const Config mid = mid_tile(128, width, cluster_m, 1, 1);
        if (fits_a_wave(mid)) return mid;
      }
      // Where the fitted tile pads M by over a quarter (192x128 tiles at 96x28672x8192, in
      // 1.7 waves: 0.52x cuBLAS), those over as many waves as they take: 1.16-1.52x over the
      // fitted tiles on five fresh shapes (65x39296x6392 rc 0.1555 ms against 0.2112), then
      // with fit_waves' pairs along N over 31 (v64). (In place of the pairs sharing 192-row
      // boxes at 113-224 rows, more than a wave lost 0.86-0.90x on three.)
      if (!pads_mid_rows(config, s)) return std::nullopt;
      for (const int cluster_m : {4, 2}) {
        const Config mid = mid_tile(128, width, cluster_m, 1, 1);
        if (!reject(mid, problem, device)) return mid;
      }
      return std::nullopt;
    }
    if (s.m <= 224 && s.k >= kMinWideWeightK) {
      // 113-224 rows: M in two tiles of 80-112 columns, in pairs sharing each 192-row box of
      // the weight on three consumers, K whole (at 113-128 rows, where no 128-row tile of the
      // weight fills the SMs, in two slices too), where they fill 3/4 of the SMs or more in
      // one wave. In rounds on the H200 against the default before, K whole: 0.94-1.37x over
      // 21 fresh shapes, 1.10x on the mean (121x12272x14728 rc 0.1195 ms against 128x128
      // tiles' 0.1638; 256-row tiles in clusters of 4, 178x11672x17848 rr, 0.976x), then
      // 0.92-1.27x over 25 more, 1.09x (f16 0.99-1.42x over 10, 1.13x; fp32 x @ W^T 1.03-1.15x
      // over 13, v58); where two slices took the place of 128-row tiles in clusters of 4 along
      // N (129-218 rows), 0.93-1.10x, 0.99x on the mean: not taken (docs/perf/matmul.md v57).
      for (const int split : {1, 2}) {
        if (split == 2 && s.m > 128) break;
        const Config mid = mid_tile(192, half_mid_width(s.m), 1, 2, split);
        const WgmmaConfig w(mid);
        if (fits_a_wave(mid) &&
            4 * units_of(w, shape_for(problem, mid)) * w.cluster() >= 3ll * device.sm_count)
          return mid;
      }
    }
    if (s.m <= 128) return std::nullopt;
    std::optional<Config> best;
    double best_us = kMidWidthShare * few_tile_us(config, problem, device);
    const bool few = few_large_tiles(s, device);
    for (const int rows : {128, 256, 64}) {
      if (rows != 128 && best && few) break;  // v43-v46's pick stays
      if (rows == 256 && s.k < kMinSplitK && s.n < kMinShortKWideRowsN) continue;
      const long long n_tiles = ceil_div(s.n, rows);
      for (int width = 80; width <= 112; width += 8) {
        for (const auto& [cluster_m, cluster_n] :
             {std::pair{4, 2}, {2, 2}, {4, 1}, {2, 1}, {1, 2}}) {
          if (cluster_m * cluster_n == 8 && ceil_div(n_tiles, 4) * 4 > ceil_div(n_tiles, 2) * 2)
            continue;
          if (rows != 128 && (n_tiles % cluster_m || (cluster_m == 1 && s.m > kMaxLoneMidRows)))
            continue;
          for (const int split : {1, 2, 4}) {
            const Config mid = mid_tile(rows, width, cluster_m, cluster_n, split);
            if (!fits_a_wave(mid)) continue;
            const double us = few_tile_us(mid, problem, device);
            if (us < best_us) best = mid, best_us = us;
          }
        }
      }
    }
    return best;
  }

  // A narrow N (one 64-row tile holds it) under many rows of A: the product streams A once
  // from DRAM, and the CTA that streams the most of it ends last (streamed_rows). The tiles:
  // unswapped ones of 64 or 128 rows of M on one consumer, and swapped 64-row ones (one
  // consumer) that take M's side in widths of 64 and 80-112, in pairs along M sharing the
  // weight's box where those fit too; each with K in 1, 2 or 4 slices, fitted to one wave, as
  // deep a ring as fits. Taken where its share is kStreamingShare of `config`'s or less. 16-bit
  // inputs, A row-major (swapped tiles would transpose a column-major one first), as measured.
  // In rounds against v46's default: 1.237x over 24 fresh shapes of M 2136-12523 (1.00-2.46x:
  // 12259x48x13096 rr 0.1266 ms against 128x256 pairs' 0.3109; 4939x40x4680 rr in 64x80 pairs,
  // two slices, 0.0278 against 128x80's 0.0336; 16311x56x1296 rr 128x64 0.0234 against
  // 192x128's 0.0271), 1.130x over 16 more (0.97-1.25x), f16 1.127x. Narrow tiles under 64
  // columns stay: against 64x16 and 64x32 tiles (16 stages) the swapped ones lost 0.80-0.98x
  // on 23 of 25 shapes, 0.903x on the mean, even where those took two waves (10979x8x15088 rr
  // 0.938x; docs/perf/matmul.md v47). Batches of 2-8: 1.243x over 22 fresh shapes (0.96-2.42x).
  // N of 129-192 from kMinSplitK, the swapped tiles only, N in one 192-row tile on three
  // consumers, B's rows off 16 bytes too (A's on them): the fitted tiles pad such N to 256 or
  // split it over two tile columns. In rounds on the H200 against v71's default: 1.168x over 13
  // shapes of one draw, then 1.182x over 23 fresh bf16 and 1.154x over 14 f16 (0.86-2.31x:
  // 4750x152x7728 rr 0.0361 ms against 0.0832); batches of 2-6 1.216x over 11 (1.04-1.42x).
  // Under that K they lost as often as they won (0.84-1.48x, 0.98x on the mean). N of 65-128
  // from kMinWideWeightK in one 128-row tile on two consumers, where the default's tiles stay
  // unswapped (the caller's check: in place of swapped mid widths 0.77-1.02x): 1.17x over 18
  // shapes of two draws, then 1.233x over 14 fresh bf16 (1.02-1.56x: 3452x104x15008 rr 0.0407
  // ms against 0.0635) and 1.138x over 3 f16; one batch, as measured (v72).
  std::optional<Config> streaming_narrow(const Config& config, const Problem& problem,
                                         const DeviceTarget& device) const {
    const MatmulShape s(problem);
    const bool one_tile_of_n = (s.n > 128 && s.n <= 192 && s.k >= kMinSplitK) ||
                               (s.n > 64 && s.n <= 128 && s.k >= kMinWideWeightK && s.batch == 1);
    // (There B is at most 192 rows or columns: copied padded where its rows are off 16 bytes.)
    const bool a_rows_on_16 = !s.strides_unaligned && s.a_row_length() % s.per_16_bytes() == 0;
    if (!(s.n <= 64 ? s.aligned() : one_tile_of_n && a_rows_on_16) || s.m < kMinStreamingRows ||
        s.tf32() || s.as_read().a_columns || config.at("variant") != kWgmma ||
        (!config.at("swap_ab") && config.at("block_n") < 64))
      return std::nullopt;
    std::vector<Config> tiles;
    if (s.n <= 64) {
      const int columns = static_cast<int>(s.as_read().b_columns ? narrow_width(s.n) : 64);
      for (const int rows : {64, 128}) tiles.push_back(WgmmaTile{rows, columns, 1, 4}.on(config));
    }
    const int n_rows = static_cast<int>(ceil_div(s.n, 64) * 64);  // N's side, 64 a consumer
    for (const int width : {64, 80, 88, 96, 104, 112}) {
      Config tile = WgmmaTile{n_rows, width, n_rows / 64, 4}.on(config);
      tile.values["swap_ab"] = 1;
      tiles.push_back(tile);
    }
    std::optional<Config> best;
    long long best_rows = 0;
    for (Config tile : tiles) {
      tile.values["cluster_m"] = 1;
      for (const char* off :
           {"split_in_grid", "split_cluster", "slice_major", "pingpong", "l2_promotion"})
        tile.values[off] = 0;
      for (const int split : {1, 2, 4}) {
        if (split > 1 && s.k < kMinSplitK) break;
        tile.values["split_k"] = split;
        for (const int cluster_n : {2, 1}) {
          if (cluster_n == 2 && !tile.at("swap_ab")) continue;
          tile.values["cluster_n"] = cluster_n;
          const Config deepest = deepest_ring(tile, 6, problem, device);
          if (reject(deepest, problem, device) || waves_of(deepest, problem, device) != 1)
            continue;
          const long long rows = streamed_rows(deepest, problem, device);
          if (!best || rows < best_rows) best = deepest, best_rows = rows;
          break;  // a pair where it fits
        }
      }
    }
    if (!best || static_cast<double>(best_rows) >
                     kStreamingShare * static_cast<double>(streamed_rows(config, problem, device)))
      return std::nullopt;
    return best;
  }

  // The rows of A one CTA of `config` streams over the call (its tile's rows of A times its
  // k blocks, times the waves).
  static long long streamed_rows(const Config& config, const Problem& problem,
                                 const DeviceTarget& device) {
    const WgmmaConfig w(config);
    return (w.swap_ab ? w.block_n : w.block_m) * slice_blocks(w, MatmulShape(problem)) *
           waves_of(config, problem, device);
  }

  // A few-tile product's time in us as kL2ReadBytesPerUs and kCtaMacsPerUs estimate it: its
  // CTAs' operand rows read from L2, plus its waves' multiply-adds, plus the partials of its K
  // slices (partials_us) and kFewTileFixedUs.
  double few_tile_us(const Config& config, const Problem& problem,
                     const DeviceTarget& device) const {
    const WgmmaConfig w(config);
    const MatmulShape s = shape_for(problem, config);
    const double waves = static_cast<double>(waves_of(config, problem, device));
    const double blocks = static_cast<double>(slice_blocks(w, s));
    const double read_us = grid_stage_read_bytes(w, s) * blocks / kL2ReadBytesPerUs;
    // tf32's wgmma runs at half the 16-bit rate.
    const double macs_us = waves * blocks * w.block_m * w.block_n * w.block_k /
                           (s.tf32() ? kCtaMacsPerUs / 2 : kCtaMacsPerUs);
    return read_us + macs_us + partials_us(s, w.workspace_splits()) + kFewTileFixedUs;
  }

  // The bytes a CTA's stage reads from L2: its multicast boxes' 128-byte rows (shared rows
  // counted once, overlapping ones twice).
  static double stage_read_bytes(const WgmmaConfig& w) {
    return (multicast_box_rows(w.block_m, w.cluster_n) +
            multicast_box_rows(w.block_n, w.cluster_m)) * 128.0;
  }

  // The bytes one stage of every CTA of `w` over `s` reads from L2.
  static double grid_stage_read_bytes(const WgmmaConfig& w, const MatmulShape& s) {
    return static_cast<double>(units_of(w, s) * w.cluster()) * stage_read_bytes(w);
  }

  // Whether `clustered` (`config`'s tile in clusters) runs in no more waves than `config`.
  bool costs_no_wave(const Config& clustered, const Config& config, const Problem& problem,
                     const DeviceTarget& device) const {
    return waves_of(clustered, problem, device) <= waves_of(config, problem, device);
  }

  // The waves `config` runs its units (cluster tiles times K slices) in, as many clusters a
  // wave as fit the SMs.
  static long long waves_of(const Config& config, const Problem& problem,
                            const DeviceTarget& device) {
    const WgmmaConfig w(config);
    return ceil_div(units_of(w, shape_for(problem, config)), wave_clusters(w, device.sm_count));
  }

  // The first of 128x128 (two consumers), 128x64 and 64x128 (one) tiles that fill half the SMs
  // at least, each K whole; nothing where none does.
  std::optional<Config> tiles_filling_half(const Config& config, const Problem& problem,
                                           const DeviceTarget& device) const {
    const MatmulShape s(problem);
    for (const WgmmaTile& t : {WgmmaTile{128, 128, 2, 4}, WgmmaTile{128, 64, 1, 6},
                                WgmmaTile{64, 128, 1, 6}}) {
      if (2 * s.batch * ceil_div(s.m, t.block_m) * ceil_div(s.n, t.block_n) < device.sm_count)
        continue;
      Config tiled = t.on(config);
      tiled.values["split_k"] = 1;
      if (!reject(tiled, problem, device)) return tiled;
    }
    return std::nullopt;
  }

  // The narrowest tile width that holds `columns`: the power of two at or above it, 16 at
  // least (wgmma's N of a 16- or 32-column tile). swap_ab's width over M, and an unswapped
  // narrow N's. (33-48 rows in one 64-column tile read each weight tile once, where two
  // 32-column tiles read it twice: v22.)
  static long long narrow_width(long long columns) {
    return std::max<long long>(16, std::bit_ceil(static_cast<unsigned long long>(columns)));
  }

  // Whether swapped tiles read both operands in place, as the H200's mid-width rules were
  // measured: one batch, rows on 16 bytes (no padding copy), A row-major (the kernel's B,
  // K-major), and fp32 only with B K-major (tf32's wgmma reads K-major operands).
  static bool swaps_in_place(const MatmulShape& s) {
    return s.batch == 1 && s.aligned() && !s.as_read().a_columns && (!s.tf32() || s.b_columns);
  }

  // The swapped mid width that holds `rows` of M in two tiles: half of them rounded up to 8,
  // 80 at least (v57, v59).
  static int half_mid_width(long long rows) {
    return static_cast<int>(std::max(80ll, (rows + 15) / 16 * 8));
  }

  // Whether the untuned default puts N in one narrow tile column (default_config): N of at most
  // 64 under more than 64 rows of A (or a column-major A's, which swap_ab cannot read). A B
  // read MN-major is 64 columns a stage whatever N: where its 64-row tiles would fill half the
  // SMs, larger ones stream A faster (read so, 4408x8x7240 ran 0.89x and 16384x8x4096 0.77x in
  // 64x64 tiles, v29), so those keep the tiles fitted to the waves.
  static bool narrow_n(const MatmulShape& s, const DeviceTarget& device) {
    if (s.n > 64 || (s.m <= 64 && !s.as_read().a_columns)) return false;
    return s.as_read().b_columns || 2 * s.batch * ceil_div(s.m, 64) <= device.sm_count;
  }

  // Where 128x256 tiles leave most SMs idle: the default then takes smaller tiles or K slices;
  // elsewhere it fits a large tile to the waves (fit_waves).
  static bool few_large_tiles(const MatmulShape& s, const DeviceTarget& device) {
    return s.batch * ceil_div(s.m, 128) * ceil_div(s.n, 256) < device.sm_count / 2;
  }

  // The untuned default's tail split: where the last wave leaves at least half the SMs idle,
  // its tiles split K into as many slices as fit, up to 8 (2048x2176x4096 -27%,
  // up_proj.m1024 -5%: docs/perf/matmul.md v15); 1 where none is admitted or K is under
  // kMinSplitK, or half of it for fp32 (tf32 runs a K block at half the 16-bit rate: with K
  // whole from 1024, 283x14056x1896 rc ran 0.78x, six such shapes 0.96x on the mean; v54). Not
  // for fp32 with B row-major: fit_waves weighs the tiles unswapped, and without the split's
  // credit the base lost to tiles that then ran with B transposed or as slower twins
  // (5233x12868x696 cr 0.68x, 6030x6260x1983 rr 0.74x; v51).
  int tail_split_of(const Config& config, const Problem& problem, const DeviceTarget& device) const {
    const MatmulShape s(problem);
    if (s.k < (s.tf32() ? kMinSplitK / 2 : kMinSplitK) && !(s.tf32() && !s.b_columns)) return 1;
    for (int split : {8, 4, 2}) {
      Config tail = config;
      tail.values["split_k"] = split;
      if (tail_split(WgmmaConfig(tail), s, device.sm_count) &&
          !reject(tail, problem, device))
        return split;
    }
    return 1;
  }

  // Of the large tiles, the one whose waves come out whole (wave_cost, each with the tail
  // split the default would give it; the 0.3 as measured, v15). Another tile replaces `base`
  // (128x256) only where it costs 5% less: 192-wide tiles at 3000^3, 2048x2176x4096 and
  // 1536x4096x4096 were 14-20% faster tuned (v16).
  //
  // Ping-pong tiles (each consumer warpgroup a whole tile, its epilogue under the other's main
  // loop) are credited 4% where each cluster takes three tiles or more: the epilogue's share of
  // a tile (v19: C not stored at all was 3% faster at 4096^3). In rounds beside cuBLAS (v20):
  // 1024x14336x4096 128x176 0.964x in ping-pong against 0.941x cooperative, 1024x11008x4096
  // 0.937x against 0.917x, 4096x14336x4096 1.010x against the 128x256 base's 0.984x; under two
  // tiles a cluster (1024x5120x5120) ping-pong lost (0.866x against 0.871x). Only 128x176 is a
  // ping-pong candidate (x @ W^T): 128x192 in ping-pong with B row-major ran 4096^3 at 0.90x
  // against the base's 0.985x.
  Config fit_waves(const Config& base, const Problem& problem, const DeviceTarget& device) const {
    const MatmulShape s(problem);
    auto cost = [&](Config config) {
      config.values["split_k"] = tail_split_of(config, problem, device);
      const WgmmaConfig w(config);
      const bool turns = w.pingpong && kernel_tiles(w, s) >= 3 * wave_clusters(w, device.sm_count);
      return wave_cost(w, s, device.sm_count) * (turns ? 1.0 - kPingpongEpilogueShare : 1.0);
    };
    auto variant = [&](std::initializer_list<std::pair<const char*, int>> values) {
      Config config = base;
      for (const auto& [name, value] : values) config.values[name] = value;
      return config;
    };
    // The tuned winners of v16's awkward shapes and of up_proj.m1024 (v15), and the widths that
    // fit a column-major weight's N to the waves (128x176: cuBLAS's tile for 1024x14336x4096).
    // The 192-row tiles run along N (group_m 1, their tuned order at 3000^3) where all of B
    // stays in L2 while each row of tiles reads it, or where every tile runs in one wave;
    // else in the base's groups of 8 rows (768x13056x1664, B 43 MB: 192x128 0.063 ms grouped
    // against 0.075; 1536x4096x4096, B 34 MB: 0.077 against 0.071; 1137x4224x6424 in one
    // wave: 0.094 against 0.097; v23).
    auto in_row_order = [&](Config config) {
      const WgmmaConfig w(config);
      const bool fits = s.k * s.n * s.in_bytes <= 3 * device.l2_bytes / 4 ||
                        kernel_tiles(w, s) <= wave_clusters(w, device.sm_count);
      config.values["group_m"] = fits ? 1 : 8;
      return config;
    };
    std::vector<Config> candidates = {
        variant({{"block_n", 176}}), variant({{"block_n", 224}}),
        in_row_order(variant({{"block_m", 192}, {"block_n", 192}, {"consumers", 3}, {"cluster_m", 1},
                              {"cluster_n", 2}, {"stages", 3}, {"l2_promotion", 0}})),
        in_row_order(variant({{"block_m", 192}, {"block_n", 128}, {"consumers", 3}, {"cluster_m", 1},
                              {"cluster_n", 1}, {"stages", 4}})),
        variant({{"block_m", 128}, {"block_n", 192}, {"stages", 4}}),
        variant({{"block_n", 176}, {"pingpong", 1}, {"stages", 5}})};
    // M in one 128-row tile: the base's pairs along M leave half of each pair idle, so 128x256
    // and 128x192 in pairs along N, sharing A, compete too. At 65-128 rows over wide weights
    // and in batches (96x28672x8192 fell to 192x128 tiles, M padded to 192: 0.52x cuBLAS): with
    // the mid widths below, 1.07-1.76x over 31 fresh shapes, 1.364x on the mean, every one
    // faster (128x38288x6800 cc 0.1456 ms against 0.1896; docs/perf/matmul.md v64). Past 128
    // rows from a K of kPaddedTieMinK too, where pairs along M pad M to 256 rows and 192-row
    // tiles to 192: where they win the waves, on the H200 1.09x over 14 shapes of one draw
    // (0.985-1.21x: 611x3571x4968 rr) and 1.047x over 26 fresh ones (0.78-1.31x: 295x12712x2979
    // rr lost in a tail split of 8, 606x6184x3661 rc gained); under that K 1.01x, 0.86-1.34x
    // (v70). 16-bit inputs, as measured (fp32's swapped twins of pairs along N would pair
    // along M's side).
    if (!s.tf32() && (s.m <= 128 || s.k >= kPaddedTieMinK)) {
      candidates.push_back(variant({{"cluster_m", 1}, {"cluster_n", 2}}));
      candidates.push_back(variant({{"block_n", 192}, {"cluster_m", 1}, {"cluster_n", 2}}));
    }
    // Tiles of one area often cost the same waves (192x128 alone and 128x192 in pairs); of
    // those, from a K of kPaddedTieMinK, the one that computes the fewest padded rows and
    // columns. The waves do not count padding, yet 1000x2816x4096 in 192x128 tiles (132, the
    // last row of tiles 21% full) ran 0.0536 ms against 0.0383 in 128x192 pairs (120 CTAs),
    // where at 960 rows (110 whole tiles) 192x128 was 3% faster (docs/perf/matmul.md v26).
    auto padded_area = [&](const Config& config) {
      const WgmmaConfig w(config);
      const long long rows = w.block_m * w.cluster_m, columns = w.block_n * w.cluster_n;
      return ceil_div(s.m, rows) * rows * ceil_div(s.n, columns) * columns;
    };
    if (reject(base, problem, device)) return base;
    Config best = base;
    const double base_cost = cost(base);
    double best_cost = 0.95 * base_cost;
    // Both operands' rows off L2's lines double the L2 requests of every box row: where the
    // main loop is most of a tile's time (K from kLineBoundK), the tiles that read more bytes
    // from L2 a multiply than the base then lose more than their waves gain (192x128: 1.8x
    // slower at 1152x4224x6424 than at 6400; 128x176 in ping-pong 13-15% behind the base at
    // 730x13112x1688 and 2163x6176x6376, where it wins on rows on the lines). With one operand
    // off them, or a shorter K, they still won (857x5228x2064 +4%, 6688x784x608 +17%: v23),
    // the latter only where they save a fifth of the base's wave cost (kStraddlingCostShare).
    const bool straddle = s.operands_off_lines() == 2;
    const double base_intensity = l2_intensity(WgmmaConfig(base));
    for (const Config& candidate : candidates) {
      if (reject(candidate, problem, device)) continue;
      const double c = cost(candidate);
      if (straddle && l2_intensity(WgmmaConfig(candidate)) < base_intensity &&
          (s.k >= kLineBoundK || c > kStraddlingCostShare * base_cost))
        continue;
      const WgmmaConfig w(candidate), held(best);
      // At a tie where both operands straddle the lines, the tile that reads less from L2 a
      // multiply, its cluster inside the product (2000x3000x1000 rc: 128x192 pairs 27.2 us
      // against 192x128 alone's 38.8; 1.067x over 16 fresh shapes, 0.98-1.19: v62).
      const bool inside = w.block_m * w.cluster_m <= s.m && w.block_n * w.cluster_n <= s.n;
      const bool tie = best != base && c == best_cost &&
                       ((s.k >= kPaddedTieMinK &&
                         w.block_m * w.block_n == held.block_m * held.block_n &&
                         padded_area(candidate) < padded_area(best)) ||
                        (straddle && inside && l2_intensity(w) > l2_intensity(held)));
      if (c < best_cost || tie) best = candidate, best_cost = c;
    }
    // The lone tile (192x128) in pairs along M sharing B's box where they cost no more waves:
    // B read from L2 once a pair (v50). Where M takes two tile rows at least, and an odd
    // count's empty CTA is 1/8 of the pairs or less (5 rows lost 0.95-0.97x, 1 row 0.82x);
    // not fp32's swapped twin (B and A row-major: pairs along N lost 0.98-0.99x).
    const WgmmaConfig fitted(best);
    const long long tile_rows = ceil_div(s.m, fitted.block_m);
    const bool twin_follows = s.tf32() && !s.b_columns && !s.a_columns;
    if (fitted.cluster() == 1 && !twin_follows && tile_rows >= 2 &&
        (tile_rows % 2 == 0 || tile_rows >= 7)) {
      Config pair = best;
      pair.values["cluster_m"] = 2;
      pair = in_row_order(pair);
      if (!reject(pair, problem, device) && cost(pair) <= best_cost) best = pair;
    }
    // Nor does L2 fetch 256 bytes around a missed box row there: each row spans two lines
    // already (1.014x over 16 fresh shapes, 0.99-1.06; 1000x6000x1000 rc 1.08x: v62).
    if (straddle) best.values["l2_promotion"] = 0;
    return best;
  }

  // fit_waves' estimate of a large tile's time: its area times its waves, the last wave (R
  // tiles of G at once) counted as 1/s + 0.3 of one where `w`'s tail split takes it in s
  // slices, whole otherwise.
  static double wave_cost(const WgmmaConfig& w, const MatmulShape& s, int sm_count) {
    const long long clusters = wave_clusters(w, sm_count);
    const long long tiles = kernel_tiles(w, s), last = tiles % clusters;
    double waves = static_cast<double>(tiles / clusters);
    if (last > 0) {
      const long long split =
          tail_split(w, s, sm_count) ? std::min<long long>(w.split_k, clusters / last) : 1;
      waves += split > 1 ? 1.0 / split + 0.3 : 1.0;
    }
    return waves * w.block_m * w.block_n;
  }

  // A wgmma config's time on `s` in us, rough enough only to tell a config that leaves SMs idle
  // or walks K alone from one that fills them: its units' waves (K slices as units, a tail
  // split's last wave as wave_cost weighs it) times a unit's 64-k blocks (K over all its
  // slices, in the workspace or the cluster), a block kKBlockUs up to a 128x128 tile and
  // proportionally longer past it, plus the partials.
  static double rough_time_us(const WgmmaConfig& w, const MatmulShape& s, int sm_count) {
    const double block_us = kKBlockUs * std::max(1.0, w.block_m * w.block_n / (128.0 * 128.0));
    const double blocks = static_cast<double>(ceil_div(ceil_div(s.k, w.block_k), w.split_k));
    if (tail_split(w, s, sm_count))
      return wave_cost(w, s, sm_count) / (w.block_m * w.block_n) * blocks * w.split_k * block_us;
    const double waves =
        static_cast<double>(ceil_div(units_of(w, s), wave_clusters(w, sm_count)));
    return waves * blocks * block_us + partials_us(s, w.workspace_splits());
  }

  // split_time's estimate of a product in `slices` K slices, in us: the longest slice's 64-k
  // blocks, and the partials written and read back (kKBlockUs, kPartialsBytesPerUs).
  static double split_time(const MatmulShape& s, int slices) {
    const double blocks = static_cast<double>(ceil_div(ceil_div(s.k, 64), slices));
    return blocks * kKBlockUs + partials_us(s, slices);
  }

  // The fp32 partials of `slices` K slices written and read back, in us (none for one slice).
  static double partials_us(const MatmulShape& s, int slices) {
    const double partials = slices > 1 ? 2.0 * slices * s.batch * s.m * s.n * 4 : 0.0;
    return partials / kPartialsBytesPerUs;
  }

  // Multiply-adds a CTA of `w` does per byte of operand rows it reads from L2, up to a constant:
  // its tile's area over the rows it reads, an operand shared across the cluster's other
  // dimension read in part (TMA multicast). 128x256 in pairs and 192x192 in pairs: 128;
  // 128x176 in pairs: 104; 192x128 alone: 77; 128x128 alone: 64.
  static double l2_intensity(const WgmmaConfig& w) {
    return static_cast<double>(w.block_m) * w.block_n /
           (static_cast<double>(w.block_m) / w.cluster_n + static_cast<double>(w.block_n) / w.cluster_m);
  }

  // Clusters of `w` that run at once: one CTA an SM (its shared memory holds one); clusters of
  // 4 or 8 sharing operands as many as the H100's GPCs hold (kClusteredCtasOn132Sms), scaled by
  // the SM count elsewhere. (K slices in a cluster keep the plain count: their grids were sized
  // by it.)
  static long long wave_clusters(const WgmmaConfig& w, int sm_count) {
    const int sharing = w.cluster_m * w.cluster_n;
    if (sharing < 4) return std::max(sm_count / w.cluster(), 1);
    return std::max(sm_count * kClusteredCtasOn132Sms / 132 / sharing, 1);
  }

  // Whether `w`'s C leaves through an exchange buffer over its ring
  // (MatmulSm90Params::exchange_in_ring): swapped tiles that fill it after their main loop (not
  // a weight read in row phases), every unit on its own CTA at once.
  static bool exchange_in_ring(const WgmmaConfig& w, const MatmulShape& s, int sm_count) {
    return w.swap_ab && !w.swapped_wide() && w.cluster_k() == 1 && !s.weight_phased &&
           units_of(w, s) <= wave_clusters(w, sm_count);
  }

  // Whether `w` splits K only in the last wave's tiles (MatmulSm90Params::tail): its tiles
  // fill the SMs, so the workspace's K slices go where the last wave leaves SMs idle.
  static bool tail_split(const WgmmaConfig& w, const MatmulShape& s, int sm_count) {
    return w.workspace_splits() > 1 && kernel_tiles(w, s) >= wave_clusters(w, sm_count);
  }

  // The constraints of matmul_sm90.cuh (its launch_info) that hold whatever the problem and
  // device: a config failing them is never listed. The reasons are literals, nothing built:
  // enumerate asks this of 12.4M points.
  static const char* reject_wgmma_structure(const WgmmaConfig& w) {
    if (w.consumers < 1 || w.consumers > 3) return "1 to 3 consumer warpgroups";
    if (w.pingpong != 0 && w.pingpong != 1) return "pingpong must be 0 or 1";
    if (w.pingpong) {
      // Two warpgroups taking whole tiles in turn, each C out through its own staging slots.
      if (w.consumers != 2) return "pingpong takes two consumer warpgroups";
      if (w.swap_ab || w.split_cluster) return "pingpong sends C out by TMA: no swap_ab or split_cluster";
    }
    if (w.block_m % (64 * w.rows_sharing())) return "each consumer warpgroup takes whole 64-row wgmmas";
    if ((w.block_n % 64 && w.block_n != 16 && w.block_n != 32 && !w.wave_fitted_width() &&
         !w.swapped_mid_width() && w.block_n != 144 && w.block_n != 160) ||
        w.block_n > 256)
      return "block_n must be 16, 32, 64, 80-112 in steps of 8, 128, 144, 160, 176, 192, 224 "
             "or 256";
    if ((w.block_n == 144 || w.block_n == 160) && (!w.swap_ab || w.split_cluster))
      return "144- and 160-column tiles are swapped tiles (swap_ab, no split_cluster)";
    if (w.swapped_mid_width() && (!w.swap_ab || w.split_cluster))
      return "80- to 112-column tiles are swapped tiles (swap_ab, no split_cluster)";
    if (w.wave_fitted_width() && (w.swap_ab ? w.block_n != 176 : w.split_cluster))
      return "224-column tiles are for plain tiles, 176-column ones plain or swapped (no "
             "split_cluster)";
    // fp32 accumulators: (block_m / consumers / 64) m64 tiles of block_n / 2 registers each
    // (block_m / 64 of them with pingpong).
    const int accumulators = w.block_m / w.rows_sharing() / 64 * w.block_n / 2;
    if (accumulators > (w.pingpong ? kPingpongAccumulators : 128))
      return "a consumer warpgroup's accumulators (block_m / 64 / consumers, or with pingpong "
             "block_m / 64, times block_n / 2 registers a thread) exceed its registers";
    // Three consumers leave 160 registers each (setmaxnreg): 256 accumulator columns do not fit
    // (ptxas C7602 at 192x256).
    if (w.consumers == 3 && w.block_n > 192) return "3 consumer warpgroups take at most 192 columns";
    if ((w.cluster_m != 1 && w.cluster_m != 2 && w.cluster_m != 4) ||
        (w.cluster_n != 1 && w.cluster_n != 2))
      return "cluster_m must be 1, 2 or 4, cluster_n 1 or 2";
    // At one CTA an SM only 30 clusters of 4 and 15 of 8 fit on an H100's 132 SMs (120 CTAs):
    // sharing operands among 4 or 8 was 35-46% slower than among 2 at 1000^3 and
    // 512x512x16384 (docs/perf/matmul.md v14), so pruned, but for swapped narrow tiles, whose
    // activations four CTAs along the weight share (1.02-1.43x at 17-64 rows: v34), and the
    // swapped mid widths, in clusters of 8 as cuBLAS runs them (4 along the weight, 2 along M:
    // v43).
    const bool swapped_narrow = w.swap_ab && !w.swapped_wide();
    const int most_sharing = w.swapped_mid_width() ? 8 : swapped_narrow ? 4 : 2;
    if (w.cluster_m * w.cluster_n > most_sharing)
      return "too many CTAs share operands in a cluster for these tiles (2; 4 for swapped "
             "tiles under 80 columns, 8 for 80 to 112)";
    if (w.swap_ab != 0 && w.swap_ab != 1) return "swap_ab must be 0 or 1";
    if (w.split_cluster != 0 && w.split_cluster != 1) return "split_cluster must be 0 or 1";
    if (w.slice_major != 0 && w.slice_major != 1) return "slice_major must be 0 or 1";
    if (w.l2_promotion != 0 && w.l2_promotion != 64 && w.l2_promotion != 128 &&
        w.l2_promotion != 256)
      return "l2_promotion must be 0, 64, 128 or 256 (bytes)";
    // One order where no K slices go through the workspace: the other would repeat it.
    if (w.slice_major && w.workspace_splits() == 1)
      return "slice_major orders K slices summed through the workspace (split_k > 1)";
    // C^T leaves a wide swapped tile transposed through the staging slots, or its K slices'
    // partials transposed from registers (matmul_sm90.cuh); slices in a cluster would need the
    // exchange buffer, which such a tile does not fit.
    if (w.swapped_wide() && w.split_cluster)
      return "swap_ab tiles of 128 columns or more sum K slices through the workspace only";
    if (w.split_in_grid != 0 && w.split_in_grid != 1) return "split_in_grid must be 0 or 1";
    if (w.split_in_grid) {
      if (w.split_k == 1 || w.split_cluster)
        return "split_in_grid sums K slices of the workspace (split_k > 1)";
      if (w.swap_ab || w.pingpong) return "split_in_grid sums plain tiles (no swap_ab or pingpong)";
    }
    if (w.split_cluster) {
      if (w.split_k == 1) return "split_cluster needs split_k > 1";
      if (w.split_k > 8) return "split_cluster: a portable cluster holds at most 8 K slices";
      if (w.cluster_m * w.cluster_n > 1) return "K slices in a cluster share no operand tile";
    }
    // Each CTA of a cluster row loads 1 / cluster_n of the A tile (of its block_m rows, or
    // block_k rows if MN-major), each of a cluster column 1 / cluster_m of the B tile (of its
    // block_n rows, or block_k): k rows in whole 8-row boxes, a K-major tile's rows in boxes
    // rounded up to them (multicast_box_rows), a share of 8 rows at least.
    if (w.block_k % (8 * w.cluster_n) || w.block_k % (8 * w.cluster_m))
      return "the multicast slices must be whole 8-row boxes";
    if (w.block_m < 8 * w.cluster_n || w.block_n < 8 * w.cluster_m)
      return "each CTA of a cluster loads 8 rows of a shared tile at least";
    if (w.stages < 2) return "the pipeline needs at least 2 stages";
    if (w.split_k < 1) return "split_k must be positive";
    if (w.group_m < 1) return "group_m must be positive";
    return nullptr;
  }

  // The constraints of matmul_sm90.cuh (its launch_info), against this device and problem.
  // `s`: the problem as the config reads it (shape_for).
  static std::optional<std::string> reject_wgmma(const WgmmaConfig& w, const MatmulShape& s,
                                                 const DeviceTarget& device) {
    if (device.arch() != "sm_90a") return "wgmma and TMA need sm_90a (this is " + device.arch() + ")";
    if (const char* wrong = reject_wgmma_structure(w)) return wrong;
    if (w.block_k * s.in_bytes != 128)
      return "block_k must fill one 128-byte swizzled row: 64 of bf16/f16, 32 of fp32";
    if (w.wave_fitted_width() && !s.as_read().b_columns)
      return "176- and 224-column tiles need B K-major (column-major: x @ W^T)";
    if (w.block_n < 64 && !w.swap_ab) {
      // Narrow tiles over a narrow N (routers, low-rank adapters): B's rows fill them where
      // a 64-column tile would fill most of each stage with zeros (docs/perf/matmul.md v29).
      if (!s.as_read().b_columns)
        return "16- and 32-column tiles need B K-major (column-major: x @ W^T), or swap_ab";
      if (w.block_n != narrow_width(s.n))
        return "unswapped 16- and 32-column tiles hold a narrow N whole (N rounded up to a "
               "power of two, 16 at least)";
    }
    if (w.swap_ab) {
      // The kernel reads A as wgmma's B operand, whose narrow tiles must be K-major.
      if (s.as_read().a_columns) return "swap_ab needs A row-major";
      if (w.swapped_wide() && !s.b_in_registers) {
        // 16-bit wide swapped tiles: 129-256 rows of M whole, a weight's boxes by all of them
        // (C^T's last round of a 144-176-column block writes stale rows past M's end).
        if (s.tf32() || s.weight_phased || s.m <= 128)
          return "16-bit swap_ab tiles of 128 columns or more hold 129-256 rows of M whole";
        if (w.block_n < s.m || w.block_n >= s.m + 16 || w.cluster_n != 1)
          return "16-bit swap_ab tiles of 128 columns or more hold M whole (15 columns over at "
                 "most, no cluster along it)";
      } else if (w.swapped_wide()) {
        // Wide swapped tiles read an fp32 B stored row-major in place (as the kernel's A,
        // through registers), where the others transpose it first.
        if (w.block_n % 64) return "swap_ab tiles reading B in place are 128, 192 or 256 wide";
      } else if (w.swapped_mid_width()) {
        if (s.m <= 64) return "80- to 112-column swapped tiles are for M over 64";
        if (s.b_in_registers || s.weight_phased)
          return "80- to 112-column swapped tiles read both operands from shared memory "
                 "on 16 bytes (not fp32's row-major B through registers, nor in row phases)";
        if (w.block_n >= s.m + 16)
          return "with swap_ab, block_n 16 or more above M only multiplies zeros";
      } else if (s.m > 64) {
        // Swapping pays where M leaves most of a 64-row wgmma tile empty, where it reads an
        // fp32 B in place, or where it reads a 16-bit weight in row phases (up to two tiles of
        // M: unswapped tiles read it padded).
        if (!s.b_in_registers && !(s.weight_phased && s.m <= 128))
          return "swap_ab is for M <= 64, fp32 with B row-major, or up to 128 rows against a "
                 "weight read in row phases";
      } else if (w.block_n > narrow_width(s.m)) {
        return "with swap_ab, block_n above M rounded up to a power of two only multiplies zeros";
      }
    }
    if (w.split_k > 1) {
      // Every slice needs K blocks to work on. Where the tiles fill the SMs, K is split only in
      // the tiles of the last, partial wave (a tail split), which needs such a wave with room
      // for the slices: at most half the SMs' clusters busy in it, and no slice count that the
      // wave caps to the same as a smaller one.
      if (ceil_div(s.k, w.block_k) < 2 * w.split_k) return "too few K blocks for the slices";
      if (!tail_split(w, s, device.sm_count)) {
        if (kernel_tiles(w, s) * w.cluster_m * w.cluster_n >= device.sm_count)
          return "the output tiles already fill the SMs: no split-K";
        // Its CTAs wait for each other: every unit runs at once, a CTA each.
        if (w.split_in_grid && kernel_tiles(w, s) * w.split_k > wave_clusters(w, device.sm_count))
          return "split_in_grid needs every K slice of every tile on the SMs at once";
      } else {
        if (w.split_in_grid) return "split_in_grid sums every tile's slices, not a tail split";
        if (w.swap_ab || w.slice_major)
          return "a tail split takes the tiles as they are: no swap_ab or slice_major";
        const long long clusters = wave_clusters(w, device.sm_count);
        const long long last = kernel_tiles(w, s) % clusters;
        if (last == 0) return "the tiles fill whole waves: no split-K";
        if (clusters / last < 2) return "the last wave's tiles fill over half the SMs: no split-K";
        if (w.split_k / 2 >= clusters / last)
          return "the last wave has room for at most " + std::to_string(clusters / last) +
                 " slices of each of its tiles";
      }
    }
    if (w.threads() > device.max_threads_per_block) return "too many threads";
    const int smem = w.smem_bytes(exchange_in_ring(w, s, device.sm_count));
    if (smem > device.max_smem_per_block_optin)
      return "needs " + std::to_string(smem) + " bytes of shared memory, device allows " +
             std::to_string(device.max_smem_per_block_optin);
    return std::nullopt;
  }

  // The device addresses of a call's tensors, in tensors() order.
  struct Operands {
    std::uint64_t a = 0, b = 0, bias = 0, residual = 0, c = 0;
    Operands(const MatmulShape& s, std::span<const std::uint64_t> addresses) {
      std::size_t next = 0;
      a = addresses[next++];
      b = addresses[next++];
      if (s.has_bias()) bias = addresses[next++];
      if (s.has_residual()) residual = addresses[next++];
      c = addresses[next];
    }
  };

  static MatmulEpilogueArgs epilogue_args(const MatmulStrides& t, const Operands& operands) {
    MatmulEpilogueArgs e{};
    e.bias = reinterpret_cast<const void*>(operands.bias);
    e.residual = reinterpret_cast<const void*>(operands.residual);
    e.ldr = static_cast<int>(t.ldr);
    e.stride_r = t.stride_r;
    return e;
  }

  // The mma.sync kernel's and the reference's argument; C (or the reference's fp32 output) at
  // `c`. The reference's output is packed: it is given packed strides.
  static MatmulParams params(const MatmulShape& s, const MatmulStrides& t,
                             const Operands& operands, std::uint64_t c) {
    MatmulParams p{};
    p.a = reinterpret_cast<const void*>(operands.a);
    p.b = reinterpret_cast<const void*>(operands.b);
    p.c = reinterpret_cast<void*>(c);
    p.m = static_cast<int>(s.m);
    p.n = static_cast<int>(s.n);
    p.k = static_cast<int>(s.k);
    p.lda = static_cast<int>(t.lda);
    p.ldb = static_cast<int>(t.ldb);
    p.ldc = static_cast<int>(t.ldc);
    p.batch = static_cast<int>(s.batch);
    p.stride_a = t.stride_a;
    p.stride_b = t.stride_b;
    p.stride_c = t.stride_c;
    p.epilogue = epilogue_args(t, operands);
    return p;
  }

  // A row reader's argument where it computes `ks` (row_reader_shape): C^T = B^T A^T takes B
  // as its A and A as its B, and writes C (its strides the call's) transposed.
  static MatmulParams row_reader_params(const MatmulShape& s, const MatmulShape& ks,
                                        const MatmulStrides& strides, const Operands& operands) {
    MatmulParams p = params(s, strides, operands, operands.c);
    if (ks.c_transposed) {
      std::swap(p.a, p.b);
      std::swap(p.m, p.n);
      std::swap(p.lda, p.ldb);
      std::swap(p.stride_a, p.stride_b);
    }
    return p;
  }

  // A row-reading template's launch of `product` (decode, gemv_kn: grid y its K slices), and
  // with split_k slices splitk_reduce after it, summing their partials (laid out as C) from the
  // workspace.
  static void add_sliced_launch(LaunchPlan& plan, const LaunchGeometry& geometry, int split_k,
                                const MatmulShape& s, const MatmulParams& product,
                                const MatmulStrides& strides, const Operands& operands,
                                std::uint64_t workspace, const DeviceTarget& device) {
    const MatmulDecodeParams p{product, reinterpret_cast<float*>(workspace), split_k};
    plan.add(0, geometry, KernelArgs::of(p));
    if (split_k > 1)
      add_splitk_reduce(plan, 1, device, s.batch * s.m * ceil_div(s.n, 4),
                        splitk_reduce_params(s, strides, p.product.epilogue, workspace,
                                             operands.c, split_k));
  }

  FamilySource source_;
};

}  // namespace

std::unique_ptr<Family> make_matmul_family() { return std::make_unique<MatmulFamily>(); }

std::optional<std::string> matmul_default_fell_back(const Problem& problem,
                                                    const DeviceTarget& device) {
  std::optional<std::string> fell_back;
  MatmulFamily().choose_default(problem, device, &fell_back);
  return fell_back;
}

}  // namespace tilesmith
