// The row ops' descriptors: softmax, layernorm and rmsnorm over the last dimension, and the
// norms followed by an activation and a residual add (row_norm.cuh). One class serves the five
// ops; each op is its own family (its own name, options and database key).
#include "templates/reductions/row_norm_family.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "templates/common/activation_reference.hpp"
#include "templates/embedded_files.hpp"
#include "templates/reductions/row_norm_params.h"

namespace tilesmith {
namespace {

// The largest row slice a thread holds in registers, in elements: 64 fp32 values next to the
// addresses and the epilogue's operands stay under 128 registers.
constexpr int kMaxElementsPerThread = 64;

struct RowOpInfo {
  const char* name;
  RowOp op;
  bool act_residual;  // y = act(norm(x)) + residual
};

// An op's options, each with its values (the first is the default).
OptionTable options_of(const RowOpInfo& info) {
  OptionTable options;
  if (info.op == kRowSoftmax) return options;
  options["weight"] = {"1", "0"};
  if (info.op == kRowLayerNorm) options["bias"] = {"1", "0"};
  options["stats"] = {"0", "1"};
  if (info.act_residual) options["act"] = {"none", "relu", "gelu", "silu"};
  return options;
}

// A row problem as the kernel sees it: "ROWSxCOLS" and its options.
struct RowShape {
  long long rows = 0;
  int cols = 0;
  int flags = 0;  // RowFlags and the activation
  RowShape(const RowOpInfo& info, const Problem& problem) {
    rows = problem.shape.at(0);
    cols = static_cast<int>(problem.shape.at(1));
    if (info.op != kRowSoftmax && problem.option("weight", "1") == "1") flags |= kRowWeight;
    if (info.op == kRowLayerNorm && problem.option("bias", "1") == "1") flags |= kRowBias;
    if (problem.option("stats") == "1") flags |= kRowStats;
    if (info.act_residual) {
      flags |= kRowResidual;
      const std::string act = problem.option("act");
      flags |= act == "relu" ? kActRelu : act == "gelu" ? kActGelu : act == "silu" ? kActSilu : 0;
    }
  }
  bool has(int flag) const { return (flags & flag) != 0; }
};

struct RowConfig {
  int vector_bytes, threads_per_row, rows_per_block, cluster;
  explicit RowConfig(const Config& config)
      : vector_bytes(config.at("vector_bytes")),
        threads_per_row(config.at("threads_per_row")),
        rows_per_block(config.at("rows_per_block")),
        cluster(config.at("cluster")) {}
  int threads() const { return threads_per_row * rows_per_block; }
  int vec(DType in) const { return std::max(1, vector_bytes / static_cast<int>(dtype_size(in))); }
  // Vectors each thread holds: the row's vectors over the cluster's threads of a row.
  int items(const RowShape& s, DType in) const {
    const long long vectors = (s.cols + vec(in) - 1) / vec(in);
    const long long holders = static_cast<long long>(cluster) * threads_per_row;
    return static_cast<int>((vectors + holders - 1) / holders);
  }
};

class RowNormFamily final : public Family {
 public:
  explicit RowNormFamily(RowOpInfo info) : info_(info), options_(options_of(info)) {
    for (const char* file :
         {"reductions/row_norm.cuh", "reductions/row_norm_reference.cuh",
          "reductions/row_norm_params.h", "common/tile_primitives.cuh", "common/activation.h",
          "common/elementwise.cuh", "common/hopper.cuh", "common/tensor_map.h"})
      source_.files[file] = std::string(embedded::file(file));
  }

  std::string name() const override { return info_.name; }
  const FamilySource& source() const override { return source_; }
  std::string shape_form() const override { return "ROWSxCOLS (the op runs over each row)"; }
  std::string options_help() const override {
    std::string help = options_.empty() ? "none" : describe_options(options_);
    if (info_.act_residual) help += " (y = act(norm(x)) + residual)";
    help += "; dtypes: f32, bf16 or f16 in and out";
    if (info_.op != kRowSoftmax) help += "; epsilon is a call argument (1e-5 when tuning)";
    return help;
  }

  std::vector<ParamSpec> space() const override {
    return {{"vector_bytes", {4, 8, 16}},
            {"threads_per_row", {4, 8, 16, 32, 64, 128, 256, 512, 1024}},
            {"rows_per_block", {1, 2, 4, 8, 16}},
            {"cluster", {1, 2, 4, 8}}};
  }

  std::optional<std::string> reject(const Config& config, const Problem& problem,
                                    const DeviceTarget& device) const override {
    for (const ParamSpec& param : space())
      if (!config.values.count(param.name)) return "missing parameter " + param.name;
    if (config.values.size() != space().size()) return "unknown parameter in " + config.text();
    const RowConfig c(config);
    const RowShape s(info_, problem);
    auto power_of_two = [](int v) { return v > 0 && (v & (v - 1)) == 0; };
    if (!power_of_two(c.vector_bytes) || c.vector_bytes > 16)
      return "vector_bytes must be 4, 8 or 16";
    if (c.vector_bytes < static_cast<int>(dtype_size(problem.dtype)))
      return "a vector holds at least one element";
    if (!power_of_two(c.threads_per_row) || !power_of_two(c.rows_per_block) ||
        !power_of_two(c.cluster))
      return "threads_per_row, rows_per_block and cluster are powers of two";
    if (c.threads() < 32 || c.threads() > std::min(1024, device.max_threads_per_block))
      return "a CTA of " + std::to_string(c.threads()) + " threads (32 to 1024)";
    if (c.cluster > 1) {
      if (device.cc_major < 9) return "clusters need sm_90";
      if (c.cluster > 8) return "clusters of at most 8 CTAs (the portable size)";
      if (c.rows_per_block != 1) return "a cluster shares one row per CTA";
      // Below ~2K elements per CTA the exchange through distributed shared memory costs more
      // than the CTA's share of the row.
      if (s.cols / c.cluster < 2048) return "fewer than 2048 elements of the row per CTA";
    }
    const int vec = c.vec(problem.dtype);
    const int items = c.items(s, problem.dtype);
    if (items * vec > kMaxElementsPerThread)
      return "each thread would hold " + std::to_string(items * vec) + " elements of the row (" +
             std::to_string(kMaxElementsPerThread) + " fit in registers)";
    // The row slice, the epilogue's operands of one vector and ~40 of addresses and indices
    // within what __launch_bounds__ leaves each thread, or ptxas spills.
    const int register_cap = std::min(255, device.regs_per_block / c.threads());
    if (items * vec + 2 * vec + 40 > register_cap)
      return "each thread would need about " + std::to_string(items * vec + 2 * vec + 40) +
             " registers; " + std::to_string(register_cap) + " available to " +
             std::to_string(c.threads()) + " threads";
    // Idle threads: more than half of a row's threads holding nothing is waste another config
    // avoids (a warp per row is always allowed: the shortest rows need it).
    const long long vectors = (s.cols + vec - 1) / vec;
    if (c.threads_per_row > 32 && vectors * 2 <= static_cast<long long>(c.cluster) * c.threads_per_row)
      return "more than half of the row's threads would hold nothing";
    if (c.rows_per_block > 1 && c.rows_per_block >= 2 * s.rows)
      return "more than half of the CTA's rows would be past the last";
    return std::nullopt;
  }

  Config default_config(const Problem& problem, const DeviceTarget& device) const override {
    // 16-byte vectors, the fewest threads per row that hold it in at most 16 (then 64) elements
    // each, 128 threads per CTA for short rows; a cluster only where one CTA cannot hold the row.
    const RowShape s(info_, problem);
    for (int limit : {16, kMaxElementsPerThread})
      for (int vector_bytes : {16, 8, 4})
        for (int cluster : {1, 2, 4, 8})
          for (int threads : {32, 64, 128, 256, 512, 1024}) {
            Config config{{{"vector_bytes", vector_bytes},
                           {"threads_per_row", threads},
                           {"rows_per_block", std::max(1, 128 / threads)},
                           {"cluster", cluster}}};
            while (config.values["rows_per_block"] > 1 && reject(config, problem, device))
              config.values["rows_per_block"] /= 2;
            const RowConfig c(config);
            if (!reject(config, problem, device) &&
                c.items(s, problem.dtype) * c.vec(problem.dtype) <= limit)
              return config;
          }
    return enumerate().front();  // nothing fits: reject() says why when it is used
  }

  void validate(const Problem& problem) const override {
    const std::string op = info_.name;
    if (problem.op != op) throw InvalidArgument(op + ": asked for op " + quote_input(problem.op));
    validate_options(op, options_, problem);
    if (problem.shape.size() != 2)
      throw InvalidArgument(op + ": shape " + quote_input(problem.shape_text()) +
                            " must be ROWSxCOLS");
    const long long rows = problem.shape[0], cols = problem.shape[1];
    if (rows < 1 || cols < 1 || rows >= (1ll << 40) || rows * cols >= (1ll << 40))
      throw InvalidArgument(op + ": shape " + quote_input(problem.shape_text()) +
                            " needs 1 <= rows, 1 <= cols and rows x cols < 2^40");
    // A cluster of 8 CTAs x 512 threads x 64 elements (reject()'s register rule) on sm_90;
    // 32768 in one CTA elsewhere. Longer rows need a variant that keeps the row in shared
    // memory or streams it twice (not built yet).
    if (cols > 8 * 512 * kMaxElementsPerThread)
      throw InvalidArgument(op + ": rows of " + std::to_string(cols) +
                            " columns are longer than the 262144 that fit on chip");
  }

  std::string kernel_file(const Config&) const override { return "reductions/row_norm.cuh"; }

  std::vector<std::string> kernel_expressions(const Config& config,
                                              const Problem& problem) const override {
    const RowShape s(info_, problem);
    const RowConfig c(config);
    return {"tilesmith::row_norm<" + op_arguments(problem, s) + "," +
            std::to_string(c.vec(problem.dtype)) + "," + std::to_string(c.threads_per_row) + "," +
            std::to_string(c.rows_per_block) + "," + std::to_string(c.items(s, problem.dtype)) +
            "," + std::to_string(c.cluster) + ">"};
  }

  // x, then the inputs the options ask for, then y, then the statistics.
  std::vector<TensorSpec> tensors(const Problem& problem) const override {
    const RowShape s(info_, problem);
    const auto rows = static_cast<std::size_t>(s.rows), cols = static_cast<std::size_t>(s.cols);
    std::vector<TensorSpec> specs = {{"x", problem.dtype, rows * cols, false}};
    if (s.has(kRowWeight)) specs.push_back({"weight", problem.dtype, cols, false});
    if (s.has(kRowBias)) specs.push_back({"bias", problem.dtype, cols, false});
    if (s.has(kRowResidual)) specs.push_back({"residual", problem.out_dtype, rows * cols, false});
    specs.push_back({"y", problem.out_dtype, rows * cols, true});
    if (s.has(kRowStats)) {
      if (info_.op == kRowLayerNorm) specs.push_back({"mean", DType::f32, rows, true});
      specs.push_back({"rstd", DType::f32, rows, true});
    }
    return specs;
  }

  LaunchPlan plan(const Config& config, const Problem& problem, const DeviceTarget&,
                  std::span<const std::uint64_t> addresses, std::uint64_t,
                  const CallScalars& scalars) const override {
    const RowShape s(info_, problem);
    const RowConfig c(config);
    LaunchGeometry geometry;
    geometry.grid[0] = static_cast<unsigned>((s.rows + c.rows_per_block - 1) / c.rows_per_block *
                                             c.cluster);
    geometry.block[0] = static_cast<unsigned>(c.threads());
    geometry.cluster[0] = static_cast<unsigned>(c.cluster);
    LaunchPlan plan;
    plan.add(0, geometry, KernelArgs::of(params(s, addresses, scalars, 0)));
    return plan;
  }

  std::string reference_file() const override { return "reductions/row_norm_reference.cuh"; }
  std::string reference_expression(const Problem& problem) const override {
    return "tilesmith::row_norm_reference<" + op_arguments(problem, RowShape(info_, problem)) + ">";
  }
  LaunchGeometry reference_launch(const Problem& problem) const override {
    LaunchGeometry geometry;  // a warp per row
    geometry.grid[0] = static_cast<unsigned>((RowShape(info_, problem).rows + 7) / 8);
    geometry.block[0] = 256;
    return geometry;
  }
  KernelArgs reference_args(const Problem& problem, std::span<const std::uint64_t> addresses,
                            std::uint64_t reference_out) const override {
    return KernelArgs::of(params(RowShape(info_, problem), addresses, CallScalars{}, reference_out));
  }

  std::vector<double> reference_cpu(const Problem& problem,
                                    const std::vector<std::vector<double>>& inputs) const override {
    const RowShape s(info_, problem);
    std::size_t next = 0;
    const std::vector<double>& x = inputs.at(next++);
    const std::vector<double>* weight = s.has(kRowWeight) ? &inputs.at(next++) : nullptr;
    const std::vector<double>* bias = s.has(kRowBias) ? &inputs.at(next++) : nullptr;
    const std::vector<double>* residual = s.has(kRowResidual) ? &inputs.at(next++) : nullptr;
    const std::size_t cols = static_cast<std::size_t>(s.cols);
    const std::size_t rows = static_cast<std::size_t>(s.rows);
    std::vector<double> y(rows * cols), mean(rows), rstd(rows);
    const double epsilon = CallScalars{}.epsilon;
    for (std::size_t r = 0; r < rows; ++r) {
      const double* row = x.data() + r * cols;
      double shift = 0, scale = 1;
      if (info_.op == kRowSoftmax) {
        shift = *std::max_element(row, row + cols);
        double sum = 0;
        for (std::size_t j = 0; j < cols; ++j) sum += std::exp(row[j] - shift);
        scale = 1 / sum;
      } else if (info_.op == kRowLayerNorm) {
        double sum = 0, squares = 0;
        for (std::size_t j = 0; j < cols; ++j) sum += row[j];
        shift = sum / cols;
        for (std::size_t j = 0; j < cols; ++j) squares += (row[j] - shift) * (row[j] - shift);
        scale = 1 / std::sqrt(squares / cols + epsilon);
      } else {
        double squares = 0;
        for (std::size_t j = 0; j < cols; ++j) squares += row[j] * row[j];
        scale = 1 / std::sqrt(squares / cols + epsilon);
      }
      mean[r] = shift;
      rstd[r] = scale;
      for (std::size_t j = 0; j < cols; ++j) {
        double value = info_.op == kRowSoftmax ? std::exp(row[j] - shift) * scale
                                               : (row[j] - shift) * scale;
        if (weight) value *= (*weight)[j];
        if (bias) value += (*bias)[j];
        value = activate_reference(s.flags, value);
        if (residual) value += (*residual)[r * cols + j];
        y[r * cols + j] = value;
      }
    }
    if (s.has(kRowStats)) {
      if (info_.op == kRowLayerNorm) y.insert(y.end(), mean.begin(), mean.end());
      y.insert(y.end(), rstd.begin(), rstd.end());
    }
    return y;
  }

  Work work(const Problem& problem) const override {
    Work work;
    double bytes = 0;
    for (const TensorSpec& spec : tensors(problem))
      bytes += static_cast<double>(spec.elements) * static_cast<double>(dtype_size(spec.dtype));
    work.min_bytes = bytes;
    const RowShape s(info_, problem);
    work.flops = 5.0 * static_cast<double>(s.rows) * s.cols;  // reduce, normalize, scale, shift
    return work;
  }

 private:
  // The template arguments every kernel of the op starts with: OP, KIND_IN, KIND_OUT, FLAGS.
  std::string op_arguments(const Problem& problem, const RowShape& s) const {
    return std::to_string(info_.op) + "," + std::to_string(element_kind(problem.dtype)) + "," +
           std::to_string(element_kind(problem.out_dtype)) + "," + std::to_string(s.flags);
  }

  // The kernel's (and the reference's, writing fp32 to `reference_out`) argument.
  RowParams params(const RowShape& s, std::span<const std::uint64_t> addresses,
                   const CallScalars& scalars, std::uint64_t reference_out) const {
    RowParams p{};
    std::size_t next = 0;
    auto stride = [&](std::size_t tensor) {
      const std::int64_t given = scalars.row_strides.at(tensor);
      return given ? given : static_cast<long long>(s.cols);
    };
    p.x = reinterpret_cast<const void*>(addresses[next]);
    p.x_stride = stride(next++);
    if (s.has(kRowWeight)) p.weight = reinterpret_cast<const void*>(addresses[next++]);
    if (s.has(kRowBias)) p.bias = reinterpret_cast<const void*>(addresses[next++]);
    if (s.has(kRowResidual)) {
      p.residual = reinterpret_cast<const void*>(addresses[next]);
      p.residual_stride = stride(next++);
    }
    p.y = reinterpret_cast<void*>(addresses[next]);
    p.y_stride = stride(next++);
    if (s.has(kRowStats)) {
      if (info_.op == kRowLayerNorm) p.mean = reinterpret_cast<float*>(addresses[next++]);
      p.rstd = reinterpret_cast<float*>(addresses[next++]);
    }
    if (reference_out) {  // the reference writes every output, packed, into its own buffer
      p.y = reinterpret_cast<void*>(reference_out);
      p.y_stride = s.cols;
    }
    p.rows = s.rows;
    p.cols = s.cols;
    p.epsilon = static_cast<float>(scalars.epsilon);
    return p;
  }

  RowOpInfo info_;
  OptionTable options_;
  FamilySource source_;
};

}  // namespace

std::vector<std::unique_ptr<Family>> make_row_norm_families() {
  std::vector<std::unique_ptr<Family>> families;
  for (RowOpInfo info : {RowOpInfo{"softmax", kRowSoftmax, false},
                         RowOpInfo{"layernorm", kRowLayerNorm, false},
                         RowOpInfo{"rmsnorm", kRowRmsNorm, false},
                         RowOpInfo{"layernorm_act_residual", kRowLayerNorm, true},
                         RowOpInfo{"rmsnorm_act_residual", kRowRmsNorm, true}})
    families.push_back(std::make_unique<RowNormFamily>(info));
  return families;
}

}  // namespace tilesmith
