// multi_sum's descriptor: the sums (or means) of COUNT tensors from a table of pointers and
// lengths in device memory (multi_sum.cuh).
//
// The key: COUNTxLENGTH, the count exact and LENGTH the tensors' mean length rounded up to a
// power of two. A call's cost is its bytes (count x mean length), its per-tensor overhead
// (count) and its balance; the count is what a program repeats from step to step, the lengths
// vary and are unknown to the host without reading the table, so the caller gives their total
// and the runtime looks up the bucket (and, failing it, the nearest tuned one). The tuner sums
// COUNT tensors whose lengths spread uniformly over 1 .. 2 x LENGTH - 1 (a fixed hash of the
// index, so every run tunes the same problem), each starting on a 16-byte boundary.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "templates/embedded_files.hpp"
#include "templates/reductions/multi_sum_params.h"
#include "templates/reductions/row_norm_family.hpp"
#include "templates/reductions/row_split.hpp"

namespace tilesmith {
namespace {

// The tuned problem's length of tensor `index`: 1 .. 2 x length - 1, mean about `length`.
long long tuned_length(long long index, long long length) {
  std::uint64_t x = static_cast<std::uint64_t>(index) * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 29;
  return 1 + static_cast<long long>(x % static_cast<std::uint64_t>(2 * length - 1));
}

// Elements from the data buffer's start to tensor `index`'s, each tensor padded to 16 bytes.
std::vector<long long> tuned_offsets(const Problem& problem) {
  const long long count = problem.shape.at(0), length = problem.shape.at(1);
  const long long per_16_bytes = 16 / static_cast<long long>(dtype_size(problem.dtype));
  std::vector<long long> offsets(static_cast<std::size_t>(count) + 1, 0);
  for (long long i = 0; i < count; ++i) {
    const long long padded = (tuned_length(i, length) + per_16_bytes - 1) / per_16_bytes * per_16_bytes;
    offsets[static_cast<std::size_t>(i) + 1] = offsets[static_cast<std::size_t>(i)] + padded;
  }
  return offsets;
}

class MultiSumFamily final : public Family {
 public:
  MultiSumFamily() {
    for (const char* file : {"reductions/multi_sum.cuh", "reductions/multi_sum_reference.cuh",
                             "reductions/multi_sum_params.h", "reductions/row_norm.cuh",
                             "reductions/row_norm_params.h", "common/host_device.h", "common/tile_primitives.cuh",
                             "common/activation.h", "common/elementwise.cuh", "common/hopper.cuh",
                             "common/tensor_map.h"})
      source_.files[file] = std::string(embedded::file(file));
    options_["mean"] = {"0", "1"};
  }

  std::string name() const override { return "multi_sum"; }
  const FamilySource& source() const override { return source_; }
  std::string shape_form() const override {
    return "COUNTxLENGTH (COUNT tensors of mean length LENGTH, a power of two: the bucket)";
  }
  std::string options_help() const override {
    return describe_options(options_) +
           " (means instead of sums); dtypes: f32, bf16 or f16 in, any out; the tensors come "
           "from a table of {pointer, length} in device memory";
  }

  std::vector<ParamSpec> space() const override {
    return {{"threads", {128, 256, 512, 1024}},
            {"chunk", {2048, 4096, 8192, 16384, 32768}},
            {"vector_bytes", {4, 8, 16}},
            {"ctas_per_sm", {1, 2, 4, 8, 16}}};
  }

  std::optional<std::string> reject(const Config& config, const Problem& problem,
                                    const DeviceTarget&) const override {
    if (auto wrong = check_parameters(space(), config)) return wrong;
    const int threads = config.at("threads"), vector_bytes = config.at("vector_bytes");
    if (vector_bytes < static_cast<int>(dtype_size(problem.dtype))) return "a vector holds at least one element";
    if (threads * config.at("ctas_per_sm") > kThreadsPerSm)
      return std::to_string(config.at("ctas_per_sm")) + " CTAs of " + std::to_string(threads) +
             " threads do not fit on one SM";
    const int vec = vector_bytes / static_cast<int>(dtype_size(problem.dtype));
    if (config.at("chunk") < threads * vec) return "a chunk gives some threads no vector";
    // Chunks far longer than the tensors leave the CTA's threads idle.
    if (config.at("chunk") > 4 * std::max<long long>(problem.shape.at(1), 2048))
      return "chunks of " + std::to_string(config.at("chunk")) + " for tensors of ~" +
             std::to_string(problem.shape.at(1)) + " elements";
    return std::nullopt;
  }

  Config default_config(const Problem& problem, const DeviceTarget& device) const override {
    Config config{{{"threads", 256}, {"chunk", 8192}, {"vector_bytes", 16}, {"ctas_per_sm", 4}}};
    while (reject(config, problem, device) && config.values["chunk"] > 2048) config.values["chunk"] /= 2;
    return config;
  }

  void validate(const Problem& problem) const override {
    if (problem.op != "multi_sum") throw InvalidArgument("multi_sum: asked for op " + quote_input(problem.op));
    validate_options("multi_sum", options_, problem);
    if (problem.shape.size() != 2)
      throw InvalidArgument("multi_sum: shape " + quote_input(problem.shape_text()) + " must be COUNTxLENGTH");
    const long long count = problem.shape[0], length = problem.shape[1];
    if (count < 1 || count > (1ll << 24) || length < 1 || length > (1ll << 34) ||
        count * length > (1ll << 36) || (length & (length - 1)) != 0)
      throw InvalidArgument("multi_sum: shape " + quote_input(problem.shape_text()) +
                            " needs 1 <= COUNT <= 2^24 and LENGTH a power of two, COUNT x LENGTH "
                            "<= 2^36");
  }

  std::string kernel_file(const Config&) const override { return "reductions/multi_sum.cuh"; }
  std::vector<std::string> kernel_expressions(const Config& config, const Problem& problem) const override {
    const int vec = config.at("vector_bytes") / static_cast<int>(dtype_size(problem.dtype));
    const std::string chunk = std::to_string(config.at("chunk"));
    return {"tilesmith::multi_sum_plan<" + chunk + ">",
            "tilesmith::multi_sum_chunks<" + std::to_string(element_kind(problem.dtype)) + "," +
                std::to_string(vec) + "," + std::to_string(config.at("threads")) + "," + chunk + ">",
            "tilesmith::multi_sum_finish<" + std::to_string(element_kind(problem.out_dtype)) + "," +
                mean(problem) + ">"};
  }

  // The table (16 bytes per tensor, written by fill_input), the sums, then the tuned tensors'
  // data, which only the table points to.
  std::vector<TensorSpec> tensors(const Problem& problem) const override {
    const auto count = static_cast<std::size_t>(problem.shape.at(0));
    TensorSpec table{"table", DType::f32, count * sizeof(MultiSumEntry) / 4, false};
    table.family_filled = true;
    return {table, {"out", problem.out_dtype, count, true},
            {"data", problem.dtype, static_cast<std::size_t>(tuned_offsets(problem).back()), false}};
  }

  void fill_input(const Problem& problem, std::size_t tensor, std::span<const std::uint64_t> addresses,
                  std::span<std::byte> bytes) const override {
    if (tensor != 0) Family::fill_input(problem, tensor, addresses, bytes);
    const std::vector<long long> offsets = tuned_offsets(problem);
    const long long count = problem.shape.at(0), length = problem.shape.at(1);
    for (long long i = 0; i < count; ++i) {
      const MultiSumEntry entry{
          reinterpret_cast<const void*>(addresses[2] + static_cast<std::uint64_t>(offsets[static_cast<std::size_t>(i)]) *
                                                           dtype_size(problem.dtype)),
          tuned_length(i, length)};
      std::memcpy(bytes.data() + i * sizeof entry, &entry, sizeof entry);
    }
  }

  std::size_t workspace_bytes(const Config& config, const Problem& problem, const DeviceTarget&) const override {
    const long long count = problem.shape.at(0);
    return static_cast<std::size_t>(count + 1) * sizeof(long long) +
           static_cast<std::size_t>(capacity(config, problem)) * sizeof(float);
  }

  LaunchPlan plan(const Config& config, const Problem& problem, const DeviceTarget& device,
                  std::span<const std::uint64_t> addresses, std::uint64_t workspace,
                  const CallScalars&) const override {
    const long long count = problem.shape.at(0);
    MultiSumParams p = params(problem, addresses);
    p.chunk_start = reinterpret_cast<long long*>(workspace);
    p.partials = reinterpret_cast<float*>(workspace + static_cast<std::uint64_t>(count + 1) * sizeof(long long));
    p.capacity = capacity(config, problem);
    LaunchPlan plan;
    LaunchGeometry scan;
    scan.block[0] = 1024;
    plan.add(0, scan, KernelArgs::of(p));
    LaunchGeometry chunks;
    chunks.grid[0] = static_cast<unsigned>(std::min<long long>(
        p.capacity, static_cast<long long>(std::max(device.sm_count, 1)) * config.at("ctas_per_sm")));
    chunks.block[0] = static_cast<unsigned>(config.at("threads"));
    plan.add(1, chunks, KernelArgs::of(p));
    LaunchGeometry finish;
    finish.grid[0] = static_cast<unsigned>((count + 255) / 256);
    finish.block[0] = 256;
    plan.add(2, finish, KernelArgs::of(p));
    return plan;
  }

  std::string reference_file() const override { return "reductions/multi_sum_reference.cuh"; }
  std::string reference_expression(const Problem& problem) const override {
    return "tilesmith::multi_sum_reference<" + std::to_string(element_kind(problem.dtype)) + "," +
           mean(problem) + ">";
  }
  LaunchGeometry reference_launch(const Problem& problem) const override {
    LaunchGeometry geometry;  // a warp per tensor
    geometry.grid[0] = static_cast<unsigned>((problem.shape.at(0) + 7) / 8);
    geometry.block[0] = 256;
    return geometry;
  }
  KernelArgs reference_args(const Problem& problem, std::span<const std::uint64_t> addresses,
                            std::uint64_t reference_out) const override {
    MultiSumParams p = params(problem, addresses);
    p.out = reinterpret_cast<void*>(reference_out);
    return KernelArgs::of(p);
  }

  // inputs: the table (meaningless as numbers) and the data buffer, which holds the tuned
  // tensors at tuned_offsets.
  std::vector<double> reference_cpu(const Problem& problem,
                                    const std::vector<std::vector<double>>& inputs) const override {
    const std::vector<double>& data = inputs.at(1);
    const std::vector<long long> offsets = tuned_offsets(problem);
    const long long count = problem.shape.at(0), length = problem.shape.at(1);
    std::vector<double> sums(static_cast<std::size_t>(count));
    for (long long i = 0; i < count; ++i) {
      const long long n = tuned_length(i, length);
      double sum = 0;
      for (long long j = 0; j < n; ++j) sum += data[static_cast<std::size_t>(offsets[static_cast<std::size_t>(i)] + j)];
      sums[static_cast<std::size_t>(i)] = problem.option("mean", "0") == "1" ? sum / static_cast<double>(n) : sum;
    }
    return sums;
  }

  Work work(const Problem& problem) const override {
    Work work;
    const long long count = problem.shape.at(0), length = problem.shape.at(1);
    double elements = 0;
    for (long long i = 0; i < count; ++i) elements += static_cast<double>(tuned_length(i, length));
    work.flops = elements;
    work.min_bytes = elements * static_cast<double>(dtype_size(problem.dtype)) +
                     static_cast<double>(count) * (sizeof(MultiSumEntry) + dtype_size(problem.out_dtype));
    return work;
  }

 private:
  static std::string mean(const Problem& problem) { return problem.option("mean", "0") == "1" ? "1" : "0"; }

  // Chunks the workspace holds: enough for any table of this COUNT whose lengths add up to at
  // most COUNT x 2 x LENGTH (the tuned problem's, and every call the runtime maps to this key).
  static long long capacity(const Config& config, const Problem& problem) {
    const long long count = problem.shape.at(0), length = problem.shape.at(1);
    return count + (count * 2 * length + config.at("chunk") - 1) / config.at("chunk");
  }

  static MultiSumParams params(const Problem& problem, std::span<const std::uint64_t> addresses) {
    MultiSumParams p{};
    p.table = reinterpret_cast<const MultiSumEntry*>(addresses[0]);
    p.out = reinterpret_cast<void*>(addresses[1]);
    p.count = problem.shape.at(0);
    return p;
  }

  OptionTable options_;
  FamilySource source_;
};

}  // namespace

std::unique_ptr<Family> make_multi_sum_family() { return std::make_unique<MultiSumFamily>(); }

}  // namespace tilesmith
