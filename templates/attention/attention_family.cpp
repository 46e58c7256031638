// The attention family's descriptor: O = softmax(Q K^T * scale + mask) V and the logsumexp of
// each row, per (batch, head), on the FlashAttention-2 kernel of attention.cuh.
#include "templates/attention/attention_family.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "templates/attention/attention_params.h"
#include "templates/attention/attention_shape.hpp"
#include "templates/embedded_files.hpp"

namespace tilesmith {
namespace {

// The tensors' order: Q, K, V are read; O and the logsumexp are written.
enum AttentionTensor { kQ = 0, kK = 1, kV = 2, kO = 3, kLse = 4 };

// A config of the mma.sync kernel.
struct ForwardTile {
  int block_m, block_n, warps, stages, q_in_registers, tile_order;
  explicit ForwardTile(const Config& c)
      : block_m(c.at("block_m")),
        block_n(c.at("block_n")),
        warps(c.at("warps")),
        stages(c.at("stages")),
        q_in_registers(c.at("q_in_registers")),
        tile_order(c.at("tile_order")) {}
  int m_tiles() const { return block_m / (warps * 16); }
  std::size_t smem_bytes(int head_dim) const {
    const auto pitch = static_cast<std::size_t>(attention_tile_pitch(head_dim));
    return (static_cast<std::size_t>(block_m) + 2 * static_cast<std::size_t>(stages * block_n)) *
           pitch;
  }
  // fp32 accumulators of O and S, and Q's fragments when they stay in registers, per thread.
  int accumulator_registers(int head_dim) const {
    return m_tiles() * (head_dim / 2 + block_n / 2 + (q_in_registers ? head_dim / 4 : 0));
  }
};

// What the accumulators may hold of a thread's 255 registers (mma.sync; its fragment loads and
// addresses need more of the rest), or of a wgmma consumer's registers after setmaxnreg less
// what its addresses and the softmax need; past it ptxas spills (ptxas -v over the space: 208
// of 240 and 128 of 160 fit, 224 of 240 and 160 of 160 spill).
constexpr int kMaxAccumulatorRegisters = 160;
constexpr int kWgmmaRegistersBesideAccumulators = 32;

constexpr int kMmaSync = 0, kWgmma = 1;

// variant 0, mma.sync (sm_80 and later): block_m query rows per CTA in `warps` warps of 16 or 32
// rows; block_n keys per step through a `stages`-deep cp.async ring; Q's fragments read once
// into registers or from shared memory at every step. variant 1, wgmma (sm_90a): 64 query rows
// per consumer warpgroup (1-3; with one, two CTAs share an SM), block_n keys per step through
// a TMA ring of `stages`, and
// FlashAttention-3's overlaps: `pipeline` (a block's softmax under the previous block's P V) and
// `pingpong` (two consumers taking turns at the tensor cores), and `persistent` (a CTA per SM
// slot taking query blocks in turn, the next one's loads under the current one's end: 1, every
// gridDim.x-th block; 2, causal only, each next block claimed from a counter in the workspace, so
// the CTAs that drew short blocks take more). Both: the order of the query blocks (tile_order:
// head by head, longest first over every head, or longest first in groups of heads whose keys
// and values fit in L2; attention_common.cuh).
VariantSpaces variants() {
  return {{{{"block_m", {64, 128}},
            {"block_n", {32, 64, 128}},
            {"warps", {4, 8}},
            {"stages", {2, 3}},
            {"q_in_registers", {0, 1}},
            {"tile_order", {0, 1, 2}}},
           {{"block_n", {64, 128, 192}},
            {"consumers", {1, 2, 3}},
            {"stages", {2, 3, 4}},
            {"tile_order", {0, 1, 2}},
            {"pipeline", {0, 1}},
            {"pingpong", {0, 1}},
            {"persistent", {0, 1, 2}}}}};
}

// A config of the wgmma kernel (attention_sm90.cuh).
struct WgmmaTile {
  int block_n, consumers, stages, tile_order, pipeline, pingpong, persistent;
  explicit WgmmaTile(const Config& c)
      : block_n(c.at("block_n")),
        consumers(c.at("consumers")),
        stages(c.at("stages")),
        tile_order(c.at("tile_order")),
        pipeline(c.at("pipeline")),
        pingpong(c.at("pingpong")),
        persistent(c.at("persistent")) {}
  int block_m() const { return 64 * consumers; }
  int threads() const { return 128 * (consumers + 1); }
  bool claims_blocks() const { return persistent == 2; }
  // 1024 of alignment slack, Q, the K and V rings (64-column panels of 128-byte rows),
  // 2 + 3 x stages mbarriers, and with claimed blocks the two handed-over block numbers.
  std::size_t smem_bytes(int head_dim) const {
    const std::size_t panels = static_cast<std::size_t>((head_dim + 63) / 64);
    return 1024 +
           panels * 128 *
               (64 * static_cast<std::size_t>(consumers) +
                2 * static_cast<std::size_t>(stages * block_n)) +
           8 * (2 + 3 * static_cast<std::size_t>(stages)) + (claims_blocks() ? 8 : 0);
  }
};

// The kernels number query blocks with an int.
std::optional<std::string> too_many_query_blocks(const AttentionShape& s, int block_m) {
  if ((s.seq_q + block_m - 1) / block_m * s.batch * s.heads > std::numeric_limits<int>::max())
    return "more than 2^31 - 1 query blocks";
  return std::nullopt;
}

class AttentionFamily final : public Family {
 public:
  AttentionFamily() : options_(attention_options()) {
    for (const char* file :
         {"attention/attention.cuh", "attention/attention_sm90.cuh",
          "attention/attention_common.cuh", "attention/attention_reference.cuh",
          "attention/attention_params.h", "common/host_device.h", "common/hopper.cuh",
          "common/tensor_map.h", "common/tile_primitives.cuh", "common/elementwise.cuh",
          "common/activation.h"})
      source_.files[file] = std::string(embedded::file(file));
  }

  std::string name() const override { return "attention"; }
  const FamilySource& source() const override { return source_; }
  std::string shape_form() const override {
    return "BxHxSxD (batch, heads, sequence length, head dim) or BxHQxHKVxSQxSKxD (kv heads "
           "dividing the query heads, query and key lengths)";
  }
  std::string options_help() const override {
    return describe_options(options_) +
           " (causal: aligned bottom-right; layout of Q, K, V and O, default bshd); dtypes: bf16 "
           "or f16, O of the same type; head dims: multiples of 8 up to 256; the softmax scale "
           "is a call argument (1/sqrt(D) when tuning)";
  }

  std::vector<ParamSpec> space() const override { return variants().merged(); }
  using Family::enumerate;
  std::vector<Config> enumerate(const Config& only) const override { return variants().enumerate(only); }
  using Family::space_size;
  std::size_t space_size(const Config& only) const override { return variants().size(only); }

  std::optional<std::string> reject(const Config& config, const Problem& problem,
                                    const DeviceTarget& device) const override {
    if (auto wrong = variants().check(config)) return wrong;
    const AttentionShape s(problem);
    if (config.at("variant") == kWgmma) return reject_wgmma(WgmmaTile(config), s, device);
    const ForwardTile tile(config);
    if (tile.m_tiles() < 1 || tile.block_m != tile.warps * 16 * tile.m_tiles())
      return "block_m is not a multiple of 16 rows per warp";
    const int head_dim = s.padded_head_dim();
    if (tile.accumulator_registers(head_dim) > kMaxAccumulatorRegisters)
      return std::to_string(tile.accumulator_registers(head_dim)) +
             " registers of accumulators per thread";
    const std::size_t smem = tile.smem_bytes(head_dim);
    if (static_cast<long long>(smem) > device.max_smem_per_block_optin)
      return std::to_string(smem) + " bytes of shared memory";
    return too_many_query_blocks(s, tile.block_m);
  }

  // 128 query rows a CTA, in 4 warps of 32 rows for small heads (each K and V fragment feeds
  // two row tiles) and 8 warps of 16 where the accumulators of 32 rows would spill; 64 keys a
  // step; causal grids start with the longest blocks.
  Config default_config(const Problem& problem, const DeviceTarget& device) const override {
    const AttentionShape s(problem);
    if (device.cc_major >= 9) {
      // The exhaustive sweeps' best (docs/perf/attention.md, v7): up to head dim 128, three
      // consumer warpgroups, no overlap, 2 stages, persistent (its short blocks' start-up
      // hidden); 192 keys a step at head dim 64 over long rows, else 128. Causal past head dim
      // 64, the CTAs claim their blocks (v8) in the order below. Past 128, two consumers with
      // each block's softmax under the previous block's P V over 64 keys (the accumulators
      // allow no more), 3 stages where they fit.
      const int head_dim = wgmma_head_dim(s.head_dim);
      const bool wide_head = head_dim > 128;
      const int block_n = wide_head ? 64 : head_dim <= 64 && s.seq_k >= 1024 ? 192 : 128;
      const int consumers = wide_head ? 2 : 3;
      // Causal past head dim 64: longest first over every head from 4096 queries on; below, in
      // groups of heads sharing the L2 where the grid is at most 12 waves of query blocks (its
      // tail then counts: B4 H16 S3000 8-11% faster than head by head), else head by head (B8
      // H32 S2048, 21 waves: 1-2% faster than the groups; v9).
      const long long block_m = 64 * consumers;
      const long long waves = (s.seq_q + block_m - 1) / block_m * s.batch * s.heads /
                              std::max(device.sm_count, 1);
      const int causal_order =
          head_dim <= 64 || s.seq_q >= 4096 ? 1 : !wide_head && waves <= 12 ? 2 : 0;
      for (int stages : {wide_head ? 3 : 2, 2})
        for (int pipeline : {wide_head ? 1 : 0, 0}) {
          const Config wgmma{
              {{"variant", kWgmma},
               {"block_n", block_n},
               {"consumers", consumers},
               {"stages", stages},
               {"tile_order", s.causal ? causal_order : 0},
               {"pipeline", pipeline},
               {"pingpong", 0},
               {"persistent", wide_head                   ? 0
                              : s.causal && head_dim > 64 ? 2
                                                          : 1}}};
          if (!reject(wgmma, problem, device)) return wgmma;
        }
    }
    const int head_dim = s.padded_head_dim();
    Config config{{{"variant", kMmaSync},
                   {"block_m", 128},
                   {"block_n", 64},
                   {"warps", head_dim <= 64 ? 4 : 8},
                   {"stages", 2},
                   {"q_in_registers", 0},
                   {"tile_order", s.causal ? 1 : 0}}};
    if (!reject(config, problem, device)) return config;
    for (const Config& candidate : enumerate())
      if (!reject(candidate, problem, device)) return candidate;
    return config;  // reject() says why when it is used
  }

  void validate(const Problem& problem) const override {
    validate_attention("attention", options_, problem, shape_form());
  }

  std::string kernel_file(const Config& config) const override {
    return config.at("variant") == kWgmma ? "attention/attention_sm90.cuh"
                                          : "attention/attention.cuh";
  }
  std::vector<std::string> kernel_expressions(const Config& config,
                                              const Problem& problem) const override {
    const AttentionShape s(problem);
    if (config.at("variant") == kWgmma) {
      const WgmmaTile t(config);
      return {"tilesmith::attention_forward_sm90<" + std::to_string(element_kind(problem.dtype)) +
              "," + std::to_string(wgmma_head_dim(s.head_dim)) + "," + std::to_string(t.block_n) +
              "," + std::to_string(t.consumers) + "," + std::to_string(int{s.causal}) + "," +
              std::to_string(t.tile_order) + "," + std::to_string(t.pipeline) + "," +
              std::to_string(t.pingpong) + "," +
              std::to_string(int{t.claims_blocks()}) + ">"};
    }
    const ForwardTile t(config);
    return {"tilesmith::attention_forward<" + std::to_string(element_kind(problem.dtype)) + "," +
            std::to_string(s.padded_head_dim()) + "," + std::to_string(t.block_m) + "," +
            std::to_string(t.block_n) + "," + std::to_string(t.warps) + "," +
            std::to_string(t.stages) + "," + std::to_string(int{s.causal}) + "," +
            std::to_string(t.q_in_registers) + "," + std::to_string(t.tile_order) + ">"};
  }

  std::vector<TensorSpec> tensors(const Problem& problem) const override {
    const AttentionShape s(problem);
    return {{"q", problem.dtype, s.elements(false), false},
            {"k", problem.dtype, s.elements(true), false},
            {"v", problem.dtype, s.elements(true), false},
            {"o", problem.dtype, s.elements(false), true},
            {"lse", DType::f32, static_cast<std::size_t>(s.batch * s.heads * s.seq_q), true}};
  }

  // The claimed blocks' counter (persistent = 2).
  std::size_t workspace_bytes(const Config& config, const Problem&,
                              const DeviceTarget&) const override {
    return config.at("variant") == kWgmma && WgmmaTile(config).claims_blocks() ? 16 : 0;
  }

  LaunchPlan plan(const Config& config, const Problem& problem, const DeviceTarget& device,
                  std::span<const std::uint64_t> addresses, std::uint64_t workspace,
                  const CallScalars& scalars) const override {
    const AttentionShape s(problem);
    const bool wgmma = config.at("variant") == kWgmma;
    const int block_m = wgmma ? WgmmaTile(config).block_m() : ForwardTile(config).block_m;
    const unsigned m_blocks = static_cast<unsigned>((s.seq_q + block_m - 1) / block_m);
    const unsigned batch_heads = static_cast<unsigned>(s.batch * s.heads);
    // A CTA per query block (the kernels take them in query_block's order, attention_common.cuh).
    LaunchGeometry geometry;
    geometry.grid[0] = m_blocks * batch_heads;
    AttentionParams p = params(s, addresses, scalars, 0);
    p.order_heads = attention_order_heads(s, problem.dtype, device.l2_bytes);
    LaunchPlan plan;
    if (!wgmma) {
      const ForwardTile tile(config);
      geometry.block[0] = static_cast<unsigned>(tile.warps * 32);
      geometry.dynamic_smem_bytes = static_cast<unsigned>(tile.smem_bytes(s.padded_head_dim()));
      plan.add(0, geometry, KernelArgs::of(p));
      return plan;
    }
    const WgmmaTile tile(config);
    if (tile.persistent) {  // as many CTAs as run at once, each looping over query blocks
      const int per_sm =
          attention_sm90_two_ctas_an_sm(tile.consumers, wgmma_head_dim(s.head_dim)) ? 2 : 1;
      geometry.grid[0] =
          std::min(geometry.grid[0], static_cast<unsigned>(device.sm_count * per_sm));
    }
    geometry.block[0] = static_cast<unsigned>(tile.threads());
    geometry.dynamic_smem_bytes =
        static_cast<unsigned>(tile.smem_bytes(wgmma_head_dim(s.head_dim)));
    AttentionSm90Params wide{};
    wide.p = p;
    wide.stages = tile.stages;
    if (tile.claims_blocks()) {
      wide.claimed = reinterpret_cast<int*>(workspace);
      plan.add_zero_fill(workspace, 4);
    }
    KernelArgs args = KernelArgs::of(wide);
    const DType t = problem.dtype;
    args.request_tensor_map(wide, wide.q_map,
                            attention_tensor_map(s, t, addresses[kQ], p.q_strides, false, 64));
    args.request_tensor_map(
        wide, wide.k_map,
        attention_tensor_map(s, t, addresses[kK], p.k_strides, true, tile.block_n));
    args.request_tensor_map(
        wide, wide.v_map,
        attention_tensor_map(s, t, addresses[kV], p.v_strides, true, tile.block_n));
    plan.add(0, geometry, args);
    return plan;
  }

  std::string reference_file() const override { return "attention/attention_reference.cuh"; }
  std::string reference_expression(const Problem& problem) const override {
    return "tilesmith::attention_reference<" + std::to_string(element_kind(problem.dtype)) + "," +
           std::to_string(int{AttentionShape(problem).causal}) + ">";
  }
  LaunchGeometry reference_launch(const Problem& problem) const override {
    const AttentionShape s(problem);
    LaunchGeometry geometry;  // 8 query rows of one head per CTA
    geometry.grid[0] = static_cast<unsigned>((s.seq_q + 7) / 8);
    geometry.grid[1] = static_cast<unsigned>(s.batch * s.heads);
    geometry.block[0] = 256;
    return geometry;
  }
  KernelArgs reference_args(const Problem& problem, std::span<const std::uint64_t> addresses,
                            std::uint64_t reference_out) const override {
    return KernelArgs::of(params(AttentionShape(problem), addresses, CallScalars{}, reference_out));
  }

  std::vector<double> reference_cpu(const Problem& problem,
                                    const std::vector<std::vector<double>>& inputs) const override {
    const AttentionShape s(problem);
    const std::vector<double>&q = inputs.at(kQ), &k = inputs.at(kK), &v = inputs.at(kV);
    const AttentionStrides qo = s.packed(false), kv = s.packed(true);
    const double scale = 1 / std::sqrt(static_cast<double>(s.head_dim));
    const std::size_t o_elements = s.elements(false);
    std::vector<double> out(o_elements + static_cast<std::size_t>(s.batch * s.heads * s.seq_q));
    std::vector<double> scores(static_cast<std::size_t>(s.seq_k));
    for (std::int64_t b = 0; b < s.batch; ++b)
      for (std::int64_t h = 0; h < s.heads; ++h) {
        const std::int64_t g = h / (s.heads / s.kv_heads);
        for (std::int64_t i = 0; i < s.seq_q; ++i) {
          const std::int64_t visible = s.visible_keys(i);
          const std::int64_t q_row = b * qo.batch + h * qo.head + i * qo.row;
          double max = -INFINITY;
          for (std::int64_t j = 0; j < visible; ++j) {
            double dot = 0;
            for (std::int64_t d = 0; d < s.head_dim; ++d)
              dot += q[static_cast<std::size_t>(q_row + d)] *
                     k[static_cast<std::size_t>(b * kv.batch + g * kv.head + j * kv.row + d)];
            scores[static_cast<std::size_t>(j)] = dot * scale;
            max = std::max(max, dot * scale);
          }
          double sum = 0;
          for (std::int64_t j = 0; j < visible; ++j)
            sum += std::exp(scores[static_cast<std::size_t>(j)] - max);
          for (std::int64_t d = 0; d < s.head_dim; ++d) {
            double acc = 0;
            for (std::int64_t j = 0; j < visible; ++j)
              acc += std::exp(scores[static_cast<std::size_t>(j)] - max) *
                     v[static_cast<std::size_t>(b * kv.batch + g * kv.head + j * kv.row + d)];
            out[static_cast<std::size_t>(q_row + d)] = visible ? acc / sum : 0;
          }
          out[o_elements + static_cast<std::size_t>((b * s.heads + h) * s.seq_q + i)] =
              visible ? max + std::log(sum) : -INFINITY;
        }
      }
    return out;
  }

  Work work(const Problem& problem) const override {
    const AttentionShape s(problem);
    Work work;
    work.flops = 4.0 * static_cast<double>(s.batch * s.heads) * s.visible_pairs() *
                 static_cast<double>(s.head_dim);
    for (const TensorSpec& spec : tensors(problem))
      work.min_bytes +=
          static_cast<double>(spec.elements) * static_cast<double>(dtype_size(spec.dtype));
    return work;
  }

 private:
  std::optional<std::string> reject_wgmma(const WgmmaTile& tile, const AttentionShape& s,
                                          const DeviceTarget& device) const {
    if (device.cc_major < 9) return "the wgmma template needs sm_90a";
    if (tile.pingpong && tile.consumers != 2) return "ping-pong takes two consumer warpgroups";
    // Non-causal blocks are all as long: the stride already balances them.
    if (tile.claims_blocks() && !s.causal)
      return "claimed blocks (persistent=2) are for causal grids";
    const int head_dim = wgmma_head_dim(s.head_dim);
    // The block handed over is one more value through the consumers' loop; ptxas spills it where
    // three consumers hold 192 keys of scores beside a 64-wide O (every other tile has room).
    if (tile.claims_blocks() && tile.consumers == 3 && tile.block_n == 192 && head_dim <= 64)
      return "claimed blocks spill with three consumers of 192 keys at head dim 64";
    // O and S, and with the pipeline P waiting for its P V.
    const int accumulators =
        head_dim / 2 + tile.block_n / 2 + (tile.pipeline ? tile.block_n / 4 : 0);
    if (accumulators > attention_sm90_consumer_registers(tile.consumers, head_dim) -
                           kWgmmaRegistersBesideAccumulators)
      return std::to_string(accumulators) + " registers of accumulators per thread";
    const std::size_t smem = tile.smem_bytes(head_dim);
    if (static_cast<long long>(smem) > device.max_smem_per_block_optin)
      return std::to_string(smem) + " bytes of shared memory";
    if (auto why = too_many_query_blocks(s, tile.block_m())) return why;
    return std::nullopt;
  }

  // The kernel's (and the reference's, writing fp32 to `reference_out`) argument: each tensor's
  // strides as the call gives them, else as its layout packs it.
  AttentionParams params(const AttentionShape& s, std::span<const std::uint64_t> addresses,
                         const CallScalars& scalars, std::uint64_t reference_out) const {
    AttentionParams p = attention_sizes(s, scalars);
    p.q = reinterpret_cast<const void*>(addresses[kQ]);
    p.k = reinterpret_cast<const void*>(addresses[kK]);
    p.v = reinterpret_cast<const void*>(addresses[kV]);
    p.o = reinterpret_cast<void*>(addresses[kO]);
    p.lse = reinterpret_cast<float*>(addresses[kLse]);
    p.q_strides = attention_strides(s, scalars, kQ, false);
    p.k_strides = attention_strides(s, scalars, kK, true);
    p.v_strides = attention_strides(s, scalars, kV, true);
    p.o_strides = attention_strides(s, scalars, kO, false);
    if (reference_out) {  // the reference writes O packed, then the logsumexp, in fp32
      p.o = reinterpret_cast<void*>(reference_out);
      p.o_strides = s.packed(false);
      p.lse = reinterpret_cast<float*>(reference_out) + s.elements(false);
    }
    return p;
  }

  OptionTable options_;
  FamilySource source_;
};

}  // namespace

std::unique_ptr<Family> make_attention_family() { return std::make_unique<AttentionFamily>(); }

}  // namespace tilesmith
