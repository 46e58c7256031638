// The attention_backward family's descriptor: dQ, dK and dV of the attention forward by
// recomputation, in three launches: prepare, the main kernel (mma.sync: attention_backward.cuh;
// wgmma: attention_backward_sm90.cuh), finish.
#include <algorithm>
#include <cmath>
#include <string>

#include "templates/attention/attention_family.hpp"
#include "templates/attention/attention_params.h"
#include "templates/attention/attention_shape.hpp"
#include "templates/embedded_files.hpp"

namespace tilesmith {
namespace {

// The tensors' order: Q, K, V, O, dO and the forward's logsumexp are read; dQ, dK, dV written.
enum BackwardTensor { kQ = 0, kK, kV, kO, kDo, kLse, kDq, kDk, kDv };

// What the accumulators may hold of a thread's 255 registers: S^T, dP^T, dK and dV (dQ's
// come after S^T's and dP^T's are spent). Past it ptxas spills; at it, a few bytes in some
// configs (head dim 128 with 64 queries a step: 8 to 12), which the tuner's timing judges.
constexpr int kMaxAccumulatorRegisters = 192;

constexpr int kMmaSync = 0, kWgmma = 1;

// variant 0, mma.sync (sm_80 and later): block_m queries a step through a `stages`-deep ring;
// `warps` warps of 16 x key_tiles keys each, d_split warps sharing a key range (each with its
// slice of dK's and dV's columns). variant 1, wgmma (sm_90a, head dims up to 128): 128 keys a
// CTA in two consumer warpgroups, block_m queries a step (128 only up to head dim 64) through a
// TMA ring of `stages`. Both: the order of the CTAs (tile_order).
VariantSpaces backward_variants() {
  return {{{{"block_m", {32, 64, 128}},
            {"warps", {4, 8}},
            {"key_tiles", {1, 2}},
            {"d_split", {1, 2}},
            {"stages", {2, 3}},
            {"tile_order", {0, 1}}},
           {{"block_m", {64, 128}}, {"stages", {2, 3, 4}}, {"tile_order", {0, 1}}}}};
}

// The wgmma kernel (attention_backward_sm90.cuh): block_m queries a step, 128 keys a CTA, head
// dims of one or two 64-column panels.
struct WgmmaBackwardTile {
  static constexpr int kBlockN = 128;
  int block_m, stages, tile_order;
  explicit WgmmaBackwardTile(const Config& c)
      : block_m(c.at("block_m")), stages(c.at("stages")), tile_order(c.at("tile_order")) {}
  static int panels(int head_dim) { return (head_dim + 63) / 64; }
  // 1024 of alignment slack, K and V, the Q and dO rings, two dS^T tiles, the statistics, and
  // 1 + 2 x stages mbarriers.
  std::size_t smem_bytes(int head_dim) const {
    const auto panel_rows = static_cast<std::size_t>(panels(head_dim)) * 128;
    const auto m = static_cast<std::size_t>(block_m);
    return 1024 + 2 * panel_rows * kBlockN + 2 * static_cast<std::size_t>(stages) * panel_rows * m +
           2 * (m / 64) * 128 * kBlockN + static_cast<std::size_t>(stages) * 2 * m * 4 +
           8 * (1 + 2 * static_cast<std::size_t>(stages));
  }
};

struct BackwardTile {
  int block_m, warps, key_tiles, d_split, stages, tile_order;
  explicit BackwardTile(const Config& c)
      : block_m(c.at("block_m")),
        warps(c.at("warps")),
        key_tiles(c.at("key_tiles")),
        d_split(c.at("d_split")),
        stages(c.at("stages")),
        tile_order(c.at("tile_order")) {}
  int block_n() const { return warps / d_split * key_tiles * 16; }
  // Every warp's slice of dK's and dV's columns is a whole number of the mma's 16.
  int head_dim(const AttentionShape& s) const { return s.padded_head_dim(16 * d_split); }
  int accumulator_registers(int head_dim) const {
    const int scores = key_tiles * block_m;  // S^T and dP^T: 16 x key_tiles by block_m, twice
    const int gradients = key_tiles * head_dim / d_split;  // dK and dV
    const int dq_row_warps = std::min(warps, block_m / 16);
    const int dq_chunks = (head_dim / 16 + warps / dq_row_warps - 1) / (warps / dq_row_warps);
    const int dq = block_m / 16 / dq_row_warps * dq_chunks * 8;
    return gradients + std::max(scores, dq);
  }
  // K and V, the Q and dO rings, dS^T, and each stage's logsumexp and delta.
  std::size_t smem_bytes(int head_dim) const {
    const auto pitch = static_cast<std::size_t>(attention_tile_pitch(head_dim));
    const auto n = static_cast<std::size_t>(block_n()), m = static_cast<std::size_t>(block_m);
    return 2 * n * pitch + 2 * static_cast<std::size_t>(stages) * m * pitch + n * (m + 8) * 2 +
           static_cast<std::size_t>(stages) * 2 * m * 4;
  }
};

// The workspace of a config: `rows_pitch` rows per (batch, head) (the wgmma kernel's are whole
// query blocks, so its bulk copies of statistics never leave them), dQ's accumulator `dq_pitch`
// columns wide (transposed for the wgmma kernel), and where its three arrays start, each
// 16-byte aligned: delta, the logsumexp in log2 units, the accumulator.
struct BackwardWorkspace {
  int rows_pitch = 0, dq_pitch = 0;
  bool transposed = false;
  std::uint64_t lse_log2 = 0, accumulator = 0, bytes = 0;
  BackwardWorkspace(const Config& config, const AttentionShape& s) {
    transposed = config.at("variant") == kWgmma;
    if (transposed) {
      const int block_m = WgmmaBackwardTile(config).block_m;
      rows_pitch = static_cast<int>((s.seq_q + block_m - 1) / block_m * block_m);
      dq_pitch = 64 * WgmmaBackwardTile::panels(wgmma_head_dim(s.head_dim));
    } else {
      rows_pitch = static_cast<int>(s.seq_q);
      dq_pitch = BackwardTile(config).head_dim(s);
    }
    const std::uint64_t rows = static_cast<std::uint64_t>(s.batch * s.heads) * static_cast<std::uint64_t>(rows_pitch);
    const std::uint64_t row_floats = (rows * 4 + 15) / 16 * 16;
    lse_log2 = row_floats;
    accumulator = 2 * row_floats;
    bytes = accumulator + rows * static_cast<std::uint64_t>(dq_pitch) * 4;
  }
};

class AttentionBackwardFamily final : public Family {
 public:
  AttentionBackwardFamily() : options_(attention_options()) {
    for (const char* file : {"attention/attention_backward.cuh", "attention/attention_backward_sm90.cuh",
                             "attention/attention_backward_reference.cuh", "attention/attention_common.cuh",
                             "attention/attention_params.h", "common/host_device.h", "common/hopper.cuh",
                             "common/tensor_map.h", "common/tile_primitives.cuh", "common/elementwise.cuh",
                             "common/activation.h"})
      source_.files[file] = std::string(embedded::file(file));
  }

  std::string name() const override { return "attention_backward"; }
  const FamilySource& source() const override { return source_; }
  std::string shape_form() const override {
    return "BxHxSxD (batch, heads, sequence length, head dim) or BxHQxHKVxSQxSKxD (kv heads "
           "dividing the query heads, query and key lengths): the forward's";
  }
  std::string options_help() const override {
    return describe_options(options_) +
           " (the forward's); takes Q, K, V, O, dO and the forward's logsumexp, writes dQ, dK, "
           "dV; dtypes: bf16 or f16, every tensor of that type but the fp32 logsumexp; head "
           "dims: multiples of 8 up to 256; the softmax scale is a call argument (1/sqrt(D) "
           "when tuning)";
  }

  std::vector<ParamSpec> space() const override { return backward_variants().merged(); }
  using Family::enumerate;
  std::vector<Config> enumerate(const Config& only) const override { return backward_variants().enumerate(only); }
  using Family::space_size;
  std::size_t space_size(const Config& only) const override { return backward_variants().size(only); }

  std::optional<std::string> reject(const Config& config, const Problem& problem,
                                    const DeviceTarget& device) const override {
    if (auto wrong = backward_variants().check(config)) return wrong;
    const AttentionShape s(problem);
    if (config.at("variant") == kWgmma) return reject_wgmma(WgmmaBackwardTile(config), s, device);
    const BackwardTile tile(config);
    const int head_dim = tile.head_dim(s);
    if (tile.accumulator_registers(head_dim) > kMaxAccumulatorRegisters)
      return std::to_string(tile.accumulator_registers(head_dim)) + " registers of accumulators per thread";
    const std::size_t smem = tile.smem_bytes(head_dim);
    if (static_cast<long long>(smem) > device.max_smem_per_block_optin)
      return std::to_string(smem) + " bytes of shared memory";
    const std::int64_t key_blocks = (s.seq_k + tile.block_n() - 1) / tile.block_n();
    if ((tile.tile_order == 0 ? s.batch * s.kv_heads : key_blocks) > 65535)
      return "more than 65535 CTAs in the grid's y dimension";
    return std::nullopt;
  }

  // The exhaustive sweeps' best (docs/perf/attention.md, v4 and v5): on sm_90 the wgmma kernel
  // for head dims from 72 to 128, 64 queries a step, 3 stages, key blocks of one head side by
  // side (their Q and dO shared in L2); otherwise mma.sync with 8 warps of 16 keys and 64
  // queries a step, up to head dim 64 4 warps of 32 keys and 32 queries (1.30 ms against the
  // wgmma kernel's 1.43 at B8 H16 S2048 D64), warps splitting the head dim past 128.
  Config default_config(const Problem& problem, const DeviceTarget& device) const override {
    const AttentionShape s(problem);
    const bool small_head = s.head_dim <= 64;
    if (device.cc_major >= 9 && !small_head)
      for (int stages : {3, 2}) {
        const Config wgmma{{{"variant", kWgmma}, {"block_m", 64}, {"stages", stages}, {"tile_order", 0}}};
        if (!reject(wgmma, problem, device)) return wgmma;
      }
    // Causal at head dim 64 and below: the longest key blocks first and a 3-deep ring, the
    // winner of the 8 s sweeps at S512 and S2048 (head by head with 2 stages took 1.16-1.26x
    // its time: docs/perf/attention.md v13).
    const bool small_causal = small_head && s.causal;
    Config config{{{"variant", kMmaSync},
                   {"block_m", small_head || s.head_dim > 128 ? 32 : 64},
                   {"warps", small_head ? 4 : 8},
                   {"key_tiles", small_head ? 2 : 1},
                   {"d_split", s.head_dim <= 128 ? 1 : 2},
                   {"stages", 2},
                   {"tile_order", small_causal ? 1 : 0}}};
    for (int stages : {small_causal ? 3 : 2, 2}) {
      config.values["stages"] = stages;
      if (!reject(config, problem, device)) return config;
    }
    for (const Config& candidate : enumerate())
      if (!reject(candidate, problem, device)) return candidate;
    return config;  // reject() says why when it is used
  }

  void validate(const Problem& problem) const override {
    validate_attention("attention_backward", options_, problem, shape_form());
  }

  std::string kernel_file(const Config& config) const override {
    return config.at("variant") == kWgmma ? "attention/attention_backward_sm90.cuh"
                                          : "attention/attention_backward.cuh";
  }
  std::vector<std::string> kernel_expressions(const Config& config,
                                              const Problem& problem) const override {
    const AttentionShape s(problem);
    const std::string kind = std::to_string(element_kind(problem.dtype));
    if (config.at("variant") == kWgmma) {
      const WgmmaBackwardTile t(config);
      return {"tilesmith::attention_backward_sm90<" + kind + "," + std::to_string(wgmma_head_dim(s.head_dim)) +
                  "," + std::to_string(t.block_m) + "," + std::to_string(t.stages) + "," + std::to_string(int{s.causal}) + "," +
                  std::to_string(t.tile_order) + ">",
              "tilesmith::attention_backward_prepare<" + kind + ">",
              "tilesmith::attention_backward_finish_dq_transposed<" + kind + ">"};
    }
    const BackwardTile t(config);
    // The main kernel first: a config's registers and spills are its first kernel's.
    return {"tilesmith::attention_backward<" + kind + "," + std::to_string(t.head_dim(s)) + "," +
                std::to_string(t.block_m) + "," + std::to_string(t.warps) + "," +
                std::to_string(t.key_tiles) + "," + std::to_string(t.d_split) + "," +
                std::to_string(t.stages) + "," + std::to_string(int{s.causal}) + "," +
                std::to_string(t.tile_order) + ">",
            "tilesmith::attention_backward_prepare<" + kind + ">",
            "tilesmith::attention_backward_finish_dq<" + kind + ">"};
  }

  std::vector<TensorSpec> tensors(const Problem& problem) const override {
    const AttentionShape s(problem);
    const DType t = problem.dtype;
    const std::size_t q = s.elements(false), kv = s.elements(true);
    return {{"q", t, q, false},     {"k", t, kv, false},
            {"v", t, kv, false},    {"o", t, q, false},
            {"do", t, q, false},    {"lse", DType::f32, s.rows_of_queries(), false, true},
            {"dq", t, q, true},     {"dk", t, kv, true},
            {"dv", t, kv, true}};
  }

  // The logsumexp a forward of normal Q and K (scores of unit variance) would write: log of the
  // keys a row sees, plus 1/2, plus a per-row offset within +-1/4 so a kernel reading another
  // row's shows; -inf for a row that sees no key.
  void fill_input(const Problem& problem, std::size_t tensor, std::span<const std::uint64_t>,
                  std::span<std::byte> bytes) const override {
    if (tensor != kLse) Family::fill_input(problem, tensor, {}, bytes);
    const AttentionShape s(problem);
    auto* lse = reinterpret_cast<float*>(bytes.data());
    for (std::size_t row = 0; row < s.rows_of_queries(); ++row) {
      const std::int64_t visible = s.visible_keys(static_cast<std::int64_t>(row % static_cast<std::size_t>(s.seq_q)));
      const double offset = static_cast<double>((row * 2654435761u) % 1000) / 2000 - 0.25;
      lse[row] = visible ? static_cast<float>(std::log(static_cast<double>(visible)) + 0.5 + offset)
                         : -INFINITY;
    }
  }

  std::size_t workspace_bytes(const Config& config, const Problem& problem,
                              const DeviceTarget&) const override {
    return BackwardWorkspace(config, AttentionShape(problem)).bytes;
  }

  LaunchPlan plan(const Config& config, const Problem& problem, const DeviceTarget&,
                  std::span<const std::uint64_t> addresses, std::uint64_t workspace,
                  const CallScalars& scalars) const override {
    const AttentionShape s(problem);
    AttentionBackwardParams p = params(s, addresses, scalars);
    const BackwardWorkspace layout(config, s);
    p.delta = reinterpret_cast<float*>(workspace);
    p.lse_log2 = reinterpret_cast<float*>(workspace + layout.lse_log2);
    p.dq_accumulator = reinterpret_cast<float*>(workspace + layout.accumulator);
    p.rows_pitch = layout.rows_pitch;
    p.dq_pitch = layout.dq_pitch;
    p.dq_transposed = layout.transposed ? 1 : 0;
    const KernelArgs args = KernelArgs::of(p);

    LaunchGeometry rows;  // a warp per workspace row
    rows.grid[0] = static_cast<unsigned>((static_cast<std::uint64_t>(s.batch * s.heads) * layout.rows_pitch + 7) / 8);
    rows.block[0] = 256;
    const bool wgmma = config.at("variant") == kWgmma;
    const int block_n = wgmma ? WgmmaBackwardTile::kBlockN : BackwardTile(config).block_n();
    const int tile_order = config.at("tile_order");
    LaunchGeometry main;
    const unsigned key_blocks = static_cast<unsigned>((s.seq_k + block_n - 1) / block_n);
    const unsigned batch_kv = static_cast<unsigned>(s.batch * s.kv_heads);
    main.grid[0] = tile_order == 0 ? key_blocks : batch_kv;
    main.grid[1] = tile_order == 0 ? batch_kv : key_blocks;
    LaunchPlan plan;
    plan.add(1, rows, args);
    if (!wgmma) {
      const BackwardTile tile(config);
      main.block[0] = static_cast<unsigned>(tile.warps * 32);
      main.dynamic_smem_bytes = static_cast<unsigned>(tile.smem_bytes(tile.head_dim(s)));
      plan.add(0, main, args);
      plan.add(2, rows, args);
      return plan;
    }
    const WgmmaBackwardTile tile(config);
    main.block[0] = 384;
    main.dynamic_smem_bytes = static_cast<unsigned>(tile.smem_bytes(wgmma_head_dim(s.head_dim)));
    AttentionBackwardSm90Params wide{};
    wide.p = p;
    KernelArgs main_args = KernelArgs::of(wide);
    const DType t = problem.dtype;
    const int rows_m = tile.block_m, rows_n = WgmmaBackwardTile::kBlockN;
    main_args.request_tensor_map(wide, wide.q_map, attention_tensor_map(s, t, addresses[kQ], p.fwd.q_strides, false, rows_m));
    main_args.request_tensor_map(wide, wide.k_map, attention_tensor_map(s, t, addresses[kK], p.fwd.k_strides, true, rows_n));
    main_args.request_tensor_map(wide, wide.v_map, attention_tensor_map(s, t, addresses[kV], p.fwd.v_strides, true, rows_n));
    main_args.request_tensor_map(wide, wide.do_map, attention_tensor_map(s, t, addresses[kDo], p.do_strides, false, rows_m));
    plan.add(0, main, main_args);
    LaunchGeometry finish;  // a CTA per 64 query rows of one (batch, head)
    finish.grid[0] = static_cast<unsigned>((s.seq_q + 63) / 64);
    finish.grid[1] = static_cast<unsigned>(s.batch * s.heads);
    finish.block[0] = 256;
    plan.add(2, finish, args);
    return plan;
  }

  std::string reference_file() const override { return "attention/attention_backward_reference.cuh"; }
  std::string reference_expression(const Problem& problem) const override {
    return "tilesmith::attention_backward_reference<" + std::to_string(element_kind(problem.dtype)) +
           "," + std::to_string(int{AttentionShape(problem).causal}) + ">";
  }
  LaunchGeometry reference_launch(const Problem& problem) const override {
    const AttentionShape s(problem);
    LaunchGeometry geometry;  // 8 query rows, or 8 keys, of one head per CTA
    geometry.grid[0] = static_cast<unsigned>((s.seq_q + 7) / 8 + (s.seq_k + 7) / 8);
    geometry.grid[1] = static_cast<unsigned>(s.batch * s.heads);
    geometry.block[0] = 256;
    return geometry;
  }
  KernelArgs reference_args(const Problem& problem, std::span<const std::uint64_t> addresses,
                            std::uint64_t reference_out) const override {
    const AttentionShape s(problem);
    AttentionBackwardParams p = params(s, addresses, CallScalars{});
    auto* out = reinterpret_cast<float*>(reference_out);
    p.dq = out;
    p.dk = out + s.elements(false);
    p.dv = out + s.elements(false) + s.elements(true);
    p.dq_strides = s.packed(false);
    p.dk_strides = p.dv_strides = s.packed(true);
    return KernelArgs::of(p);
  }

  std::vector<double> reference_cpu(const Problem& problem,
                                    const std::vector<std::vector<double>>& inputs) const override {
    const AttentionShape s(problem);
    const std::vector<double>&q = inputs.at(kQ), &k = inputs.at(kK), &v = inputs.at(kV),
                         &o = inputs.at(kO), &d_o = inputs.at(kDo), &lse = inputs.at(kLse);
    const AttentionStrides qo = s.packed(false), kv = s.packed(true);
    const double scale = 1 / std::sqrt(static_cast<double>(s.head_dim));
    const std::size_t q_elements = s.elements(false), kv_elements = s.elements(true);
    std::vector<double> out(q_elements + 2 * kv_elements);
    double *dq = out.data(), *dk = dq + q_elements, *dv = dk + kv_elements;
    auto at = [](std::int64_t i) { return static_cast<std::size_t>(i); };
    for (std::int64_t b = 0; b < s.batch; ++b)
      for (std::int64_t h = 0; h < s.heads; ++h) {
        const std::int64_t g = h / (s.heads / s.kv_heads);
        for (std::int64_t i = 0; i < s.seq_q; ++i) {
          const std::int64_t q_row = b * qo.batch + h * qo.head + i * qo.row;
          const double row_lse = lse[at((b * s.heads + h) * s.seq_q + i)];
          double delta = 0;
          for (std::int64_t d = 0; d < s.head_dim; ++d) delta += d_o[at(q_row + d)] * o[at(q_row + d)];
          for (std::int64_t j = 0; j < s.visible_keys(i); ++j) {
            const std::int64_t k_row = b * kv.batch + g * kv.head + j * kv.row;
            double dot = 0, dp = 0;
            for (std::int64_t d = 0; d < s.head_dim; ++d) {
              dot += q[at(q_row + d)] * k[at(k_row + d)];
              dp += d_o[at(q_row + d)] * v[at(k_row + d)];
            }
            const double probability = std::isinf(row_lse) ? 0 : std::exp(dot * scale - row_lse);
            const double ds = probability * (dp - delta);
            for (std::int64_t d = 0; d < s.head_dim; ++d) {
              dq[at(q_row + d)] += scale * ds * k[at(k_row + d)];
              dk[at(k_row + d)] += scale * ds * q[at(q_row + d)];
              dv[at(k_row + d)] += probability * d_o[at(q_row + d)];
            }
          }
        }
      }
    return out;
  }

  // The backward's five products against the forward's two: 2.5 times its FLOPs.
  Work work(const Problem& problem) const override {
    const AttentionShape s(problem);
    Work work;
    work.flops = 10.0 * static_cast<double>(s.batch * s.heads) * s.visible_pairs() *
                 static_cast<double>(s.head_dim);
    for (const TensorSpec& spec : tensors(problem))
      work.min_bytes += static_cast<double>(spec.elements) * static_cast<double>(dtype_size(spec.dtype));
    return work;
  }

 private:
  std::optional<std::string> reject_wgmma(const WgmmaBackwardTile& tile, const AttentionShape& s,
                                          const DeviceTarget& device) const {
    if (device.cc_major < 9) return "the wgmma template needs sm_90a";
    if (wgmma_head_dim(s.head_dim) > 128)
      return "the wgmma template keeps dK and dV of head dims up to 128 in registers";
    if (tile.block_m == 128 && wgmma_head_dim(s.head_dim) > 64)
      return "128 queries a step keep S^T, dP^T, dK and dV in registers up to head dim 64";
    const std::size_t smem = tile.smem_bytes(wgmma_head_dim(s.head_dim));
    if (static_cast<long long>(smem) > device.max_smem_per_block_optin)
      return std::to_string(smem) + " bytes of shared memory";
    const std::int64_t key_blocks = (s.seq_k + WgmmaBackwardTile::kBlockN - 1) / WgmmaBackwardTile::kBlockN;
    if ((tile.tile_order == 0 ? s.batch * s.kv_heads : key_blocks) > 65535)
      return "more than 65535 CTAs in the grid's y dimension";
    return std::nullopt;
  }

  // The kernels' argument: the tensors with their strides as the call gives them, else as the
  // layout packs them; the workspace is the plan's to fill in.
  AttentionBackwardParams params(const AttentionShape& s, std::span<const std::uint64_t> addresses,
                                 const CallScalars& scalars) const {
    AttentionBackwardParams p{};
    p.fwd = attention_sizes(s, scalars);
    p.fwd.q = reinterpret_cast<const void*>(addresses[kQ]);
    p.fwd.k = reinterpret_cast<const void*>(addresses[kK]);
    p.fwd.v = reinterpret_cast<const void*>(addresses[kV]);
    p.fwd.o = reinterpret_cast<void*>(addresses[kO]);
    p.fwd.lse = reinterpret_cast<float*>(addresses[kLse]);
    p.fwd.q_strides = attention_strides(s, scalars, kQ, false);
    p.fwd.k_strides = attention_strides(s, scalars, kK, true);
    p.fwd.v_strides = attention_strides(s, scalars, kV, true);
    p.fwd.o_strides = attention_strides(s, scalars, kO, false);
    p.d_o = reinterpret_cast<const void*>(addresses[kDo]);
    p.do_strides = attention_strides(s, scalars, kDo, false);
    p.dq = reinterpret_cast<void*>(addresses[kDq]);
    p.dk = reinterpret_cast<void*>(addresses[kDk]);
    p.dv = reinterpret_cast<void*>(addresses[kDv]);
    p.dq_strides = attention_strides(s, scalars, kDq, false);
    p.dk_strides = attention_strides(s, scalars, kDk, true);
    p.dv_strides = attention_strides(s, scalars, kDv, true);
    return p;
  }

  OptionTable options_;
  FamilySource source_;
};

}  // namespace

std::unique_ptr<Family> make_attention_backward_family() {
  return std::make_unique<AttentionBackwardFamily>();
}

}  // namespace tilesmith
