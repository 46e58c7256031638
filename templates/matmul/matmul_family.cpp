// The matmul family's descriptor: its space, constraints, launch rule, arguments, reference and
// work. The kernel itself is matmul.cuh.
#include <algorithm>
#include <string>

#include "templates/embedded_files.hpp"
#include "templates/matmul/matmul_family.hpp"
#include "templates/matmul/matmul_params.h"

namespace tilesmith {
namespace {

struct MatmulShape {
  long long m, n, k;
  explicit MatmulShape(const Problem& problem)
      : m(problem.shape.at(0)), n(problem.shape.at(1)), k(problem.shape.at(2)) {}
  // cp.async moves 16 bytes (8 elements): rows of A and B must start on 16-byte boundaries.
  bool aligned() const { return k % 8 == 0 && n % 8 == 0; }
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
  // Padded rows (16 bytes per row) of STAGES A and B tiles, 2 bytes per element.
  int smem_bytes() const {
    return stages * (block_m * (block_k + 8) + block_k * (block_n + 8)) * 2;
  }
};

class MatmulFamily final : public Family {
 public:
  MatmulFamily() {
    source_.main_name = "matmul.cuh";
    source_.main_text = std::string(embedded::file("matmul/matmul.cuh"));
    for (const char* header : {"common/tile_primitives.cuh", "matmul/matmul_params.h"})
      source_.headers[header] = std::string(embedded::file(header));
  }

  std::string name() const override { return "matmul"; }
  const FamilySource& source() const override { return source_; }

  std::vector<ParamSpec> space() const override {
    // Small tiles (16 rows, 32 columns) give skinny shapes (decode: M = 16) enough blocks to
    // fill the SMs; they stream B, which is what bounds those shapes.
    return {{"block_m", {16, 32, 64, 128, 256}},
            {"block_n", {32, 64, 128, 256}},
            {"block_k", {32, 64}},
            {"warps_m", {1, 2, 4}},
            {"warps_n", {1, 2, 4}},
            {"stages", {2, 3, 4, 5}},
            {"group_m", {1, 8}}};
  }

  std::optional<std::string> reject(const Config& config, const Problem& problem,
                                    const DeviceTarget& device) const override {
    for (const ParamSpec& param : space())
      if (!config.values.count(param.name)) return "missing parameter " + param.name;
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
    if (tile.block_k % 16) return "block_k must be a multiple of the MMA's k=16";
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
        (tile.block_m * tile.block_k + tile.block_k * tile.block_n) / 8 / tile.threads();
    const int state = 40 + (MatmulShape(problem).aligned() ? 0 : 4 * chunks_per_thread);
    if (accumulators + fragments + state > register_cap)
      return "warp tile needs " + std::to_string(accumulators) + " accumulators and " +
             std::to_string(fragments) + " fragment registers per thread; " +
             std::to_string(register_cap) + " registers available";
    if (tile.block_k < 32) return "block_k must hold at least two k16 steps";
    if ((tile.block_m * tile.block_k / 8) % tile.threads() ||
        (tile.block_k * tile.block_n / 8) % tile.threads())
      return "threads do not split the tiles into whole 16-byte chunks";
    if (tile.smem_bytes() > device.max_smem_per_block_optin)
      return "needs " + std::to_string(tile.smem_bytes()) + " bytes of shared memory, device allows " +
             std::to_string(device.max_smem_per_block_optin);
    return std::nullopt;
  }

  Config default_config(const Problem& problem, const DeviceTarget& device) const override {
    (void)problem;
    Config config;
    // 128x128x32 with a 64x64 warp tile, 4 stages: 76 KB of shared memory; 3 stages (57 KB)
    // where the device allows less.
    config.values = {{"block_m", 128}, {"block_n", 128}, {"block_k", 32}, {"warps_m", 2},
                     {"warps_n", 2},   {"stages", 4},    {"group_m", 8}};
    while (reject(config, problem, device) && config.values["stages"] > 2) config.values["stages"]--;
    if (reject(config, problem, device))
      config.values = {{"block_m", 64}, {"block_n", 64}, {"block_k", 32}, {"warps_m", 2},
                       {"warps_n", 2},  {"stages", 2},   {"group_m", 1}};
    return config;
  }

  void validate(const Problem& problem) const override {
    if (problem.op != "matmul") throw InvalidArgument("matmul: asked for op " + quote_input(problem.op));
    if (problem.shape.size() != 3)
      throw InvalidArgument("matmul: shape " + quote_input(problem.shape_text()) + " must be MxNxK");
    for (auto dim : problem.shape)
      if (dim <= 0 || dim > (1ll << 31) - 1)
        throw InvalidArgument("matmul: shape " + quote_input(problem.shape_text()) +
                              " has a dimension outside 1..2^31-1");
    MatmulShape s(problem);
    if (s.m * s.k >= (1ll << 40) || s.k * s.n >= (1ll << 40) || s.m * s.n >= (1ll << 40))
      throw InvalidArgument("matmul: shape " + quote_input(problem.shape_text()) + " is too large");
    if (problem.dtype != DType::f16 && problem.dtype != DType::bf16)
      throw InvalidArgument("matmul: input dtype " + std::string(dtype_name(problem.dtype)) +
                  " is not supported (f16 or bf16)");
    if (problem.out_dtype != problem.dtype && problem.out_dtype != DType::f32)
      throw InvalidArgument("matmul: output dtype " + std::string(dtype_name(problem.out_dtype)) +
                  " must be the input dtype or f32");
  }

  std::string kernel_expression(const Config& config, const Problem& problem) const override {
    TileConfig t(config);
    return "tilesmith::matmul_kernel<" + std::to_string(t.block_m) + "," + std::to_string(t.block_n) +
           "," + std::to_string(t.block_k) + "," + std::to_string(t.warps_m) + "," +
           std::to_string(t.warps_n) + "," + std::to_string(t.stages) + "," +
           std::to_string(t.group_m) + "," + (MatmulShape(problem).aligned() ? "1" : "0") + "," +
           std::to_string(element_kind(problem.dtype)) + "," +
           std::to_string(element_kind(problem.out_dtype)) + ">";
  }

  LaunchGeometry launch(const Config& config, const Problem& problem) const override {
    TileConfig t(config);
    MatmulShape s(problem);
    LaunchGeometry geometry;
    geometry.grid[0] =
        static_cast<unsigned>(((s.m + t.block_m - 1) / t.block_m) * ((s.n + t.block_n - 1) / t.block_n));
    geometry.block[0] = t.threads();
    geometry.dynamic_smem_bytes = t.smem_bytes();
    return geometry;
  }

  std::vector<TensorSpec> tensors(const Problem& problem) const override {
    MatmulShape s(problem);
    return {{"A", problem.dtype, static_cast<std::size_t>(s.m * s.k), false},
            {"B", problem.dtype, static_cast<std::size_t>(s.k * s.n), false},
            {"C", problem.out_dtype, static_cast<std::size_t>(s.m * s.n), true}};
  }

  KernelArgs args(const Problem& problem,
                  std::span<const std::uint64_t> addresses) const override {
    return KernelArgs::of(params(problem, addresses[0], addresses[1], addresses[2]));
  }

  std::string reference_expression(const Problem& problem) const override {
    return "tilesmith::matmul_reference<" + std::to_string(element_kind(problem.dtype)) + ">";
  }

  LaunchGeometry reference_launch(const Problem& problem) const override {
    MatmulShape s(problem);
    LaunchGeometry geometry;
    geometry.grid[0] = static_cast<unsigned>((s.n + 15) / 16);
    geometry.grid[1] = static_cast<unsigned>((s.m + 15) / 16);
    geometry.block[0] = geometry.block[1] = 16;
    return geometry;
  }

  KernelArgs reference_args(const Problem& problem, std::span<const std::uint64_t> addresses,
                            std::uint64_t reference_out) const override {
    return KernelArgs::of(params(problem, addresses[0], addresses[1], reference_out));
  }

  std::vector<double> reference_cpu(const Problem& problem,
                                    const std::vector<std::vector<double>>& inputs) const override {
    MatmulShape s(problem);
    const auto& a = inputs.at(0);
    const auto& b = inputs.at(1);
    std::vector<double> c(static_cast<std::size_t>(s.m * s.n), 0.0);
    for (long long i = 0; i < s.m; ++i)
      for (long long kk = 0; kk < s.k; ++kk) {
        double left = a[i * s.k + kk];
        for (long long j = 0; j < s.n; ++j) c[i * s.n + j] += left * b[kk * s.n + j];
      }
    return c;
  }

  Work work(const Problem& problem) const override {
    MatmulShape s(problem);
    Work work;
    work.flops = 2.0 * s.m * s.n * s.k;
    work.min_bytes = static_cast<double>(dtype_size(problem.dtype)) * (s.m * s.k + s.k * s.n) +
                     static_cast<double>(dtype_size(problem.out_dtype)) * s.m * s.n;
    return work;
  }

 private:
  static MatmulParams params(const Problem& problem, std::uint64_t a, std::uint64_t b,
                             std::uint64_t c) {
    MatmulShape s(problem);
    MatmulParams p{};
    p.a = reinterpret_cast<const void*>(a);
    p.b = reinterpret_cast<const void*>(b);
    p.c = reinterpret_cast<void*>(c);
    p.m = static_cast<int>(s.m);
    p.n = static_cast<int>(s.n);
    p.k = static_cast<int>(s.k);
    p.lda = static_cast<int>(s.k);
    p.ldb = static_cast<int>(s.n);
    p.ldc = static_cast<int>(s.n);
    return p;
  }

  FamilySource source_;
};

}  // namespace

std::unique_ptr<Family> make_matmul_family() { return std::make_unique<MatmulFamily>(); }

}  // namespace tilesmith
