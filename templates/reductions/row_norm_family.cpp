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
#include "templates/reductions/row_split.hpp"

namespace tilesmith {
namespace {

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

// Bytes of shared memory row_norm declares statically (the exchange's partials, two sets),
// rounded up; the ring comes on top.
constexpr std::size_t kStaticRowSmem = 2048;

// The dynamic shared memory of a persistent CTA: its ring of `stages` row groups of x, its
// columns of weight and bias (those present), and the ring of the residual (vectors of y's
// type), each rows_per_block x threads_per_row threads x `items` vectors.
std::size_t ring_bytes(const Config& config, const Problem& problem, int flags) {
  const RowSplit c(config);
  const std::size_t stages = static_cast<std::size_t>(config.at("stages"));
  if (stages == 0) return 0;
  const std::size_t vectors = static_cast<std::size_t>(c.threads()) *
                              static_cast<std::size_t>(c.items(problem.shape.at(1), problem.dtype));
  const std::size_t params = ((flags & kRowWeight) != 0) + ((flags & kRowBias) != 0);
  const std::size_t residual = (flags & kRowResidual) != 0
                                   ? stages * static_cast<std::size_t>(c.vec(problem.dtype)) *
                                         dtype_size(problem.out_dtype)
                                   : 0;
  return vectors * ((stages + params) * static_cast<std::size_t>(c.vector_bytes) + residual);
}

class RowNormFamily final : public Family {
 public:
  explicit RowNormFamily(RowOpInfo info) : info_(info), options_(options_of(info)) {
    for (const char* file :
         {"reductions/row_norm.cuh", "reductions/row_norm_reference.cuh",
          "reductions/row_norm_params.h", "common/host_device.h", "common/tile_primitives.cuh", "common/activation.h",
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

  // The row split, and `stages`: 0 loads each CTA's rows straight into registers (a grid of
  // every row group); N > 0 runs a persistent grid whose CTAs keep their next N row groups in
  // flight into a shared-memory ring (cp.async) while they reduce and write the current one, and
  // read weight and bias from a copy in shared memory.
  std::vector<ParamSpec> space() const override {
    std::vector<ParamSpec> params = row_split_space();
    params.push_back({"stages", {0, 1, 2, 4}});
    return params;
  }

  std::optional<std::string> reject(const Config& config, const Problem& problem,
                                    const DeviceTarget& device) const override {
    if (auto wrong = check_parameters(space(), config)) return wrong;
    const RowShape s(info_, problem);
    const RowSplit split(config);
    if (auto wrong = reject_row_split(split, s.rows, s.cols, problem.dtype, 1, device)) return wrong;
    const int stages = config.at("stages");
    if (stages < 0 || stages > 4) return "stages from 0 to 4";
    // CTAs waiting on each other must all run at once: a persistent grid.
    if (stages == 0 && split.exchange == kRowExchangeGlobal) return "a global exchange needs the ring (stages > 0)";
    if (stages == 0) return std::nullopt;
    const std::size_t ring = ring_bytes(config, problem, s.flags);
    if (static_cast<long long>(ring + kStaticRowSmem) > device.max_smem_per_block_optin)
      return "a ring of " + std::to_string(ring) + " bytes of shared memory";
    // A CTA that runs a single row group has nothing to fetch ahead.
    const long long groups = (s.rows + split.rows_per_block - 1) / split.rows_per_block;
    if (groups * split.cluster <= device.sm_count) return "no more row groups than SMs for the ring";
    return std::nullopt;
  }

  // The persistent ring where it fits (the fetch ahead pays wherever every SM gets several row
  // groups), else rows straight into registers.
  Config default_config(const Problem& problem, const DeviceTarget& device) const override {
    auto rejected = [&](const Config& config) { return reject(config, problem, device).has_value(); };
    return default_row_split({Config{{{"stages", 2}}}, Config{{{"stages", 0}}}}, problem.shape.at(1),
                             problem.dtype, 1, rejected);
  }

  void validate(const Problem& problem) const override {
    const std::string op = info_.name;
    if (problem.op != op) throw InvalidArgument(op + ": asked for op " + quote_input(problem.op));
    validate_options(op, options_, problem);
    // A cluster of 8 CTAs x 512 threads x 64 elements (the register rule) on sm_90 (16 CTAs hold
    // it with 32 each); 32768 in one CTA elsewhere (reject() says so). Longer rows need a
    // variant that keeps the row in shared memory or streams it twice (not built yet).
    validate_row_shape(op, problem, 8 * 512 * kMaxRowElementsPerThread);
  }

  std::string kernel_file(const Config&) const override { return "reductions/row_norm.cuh"; }

  std::vector<std::string> kernel_expressions(const Config& config,
                                              const Problem& problem) const override {
    const RowShape s(info_, problem);
    const RowSplit c(config);
    return {"tilesmith::row_norm<" + op_arguments(problem, s) + "," +
            std::to_string(c.vec(problem.dtype)) + "," + std::to_string(c.threads_per_row) + "," +
            std::to_string(c.rows_per_block) + "," + std::to_string(c.items(s.cols, problem.dtype)) +
            "," + std::to_string(c.cluster) + "," + std::to_string(c.exchange) + "," +
            std::to_string(config.at("stages")) + ">"};
  }

  // The boards of a global exchange (row_split.hpp).
  std::size_t workspace_bytes(const Config& config, const Problem& problem,
                              const DeviceTarget& device) const override {
    return row_boards_bytes(RowSplit(config), problem.shape.at(0), device);
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

  LaunchPlan plan(const Config& config, const Problem& problem, const DeviceTarget& device,
                  std::span<const std::uint64_t> addresses, std::uint64_t workspace,
                  const CallScalars& scalars) const override {
    const RowShape s(info_, problem);
    const RowSplit c(config);
    LaunchGeometry geometry;
    geometry.grid[0] = static_cast<unsigned>((s.rows + c.rows_per_block - 1) / c.rows_per_block *
                                             c.cluster);
    geometry.block[0] = static_cast<unsigned>(c.threads());
    if (config.at("stages") > 0) {
      geometry.dynamic_smem_bytes = static_cast<unsigned>(ring_bytes(config, problem, s.flags));
      geometry.persistent = true;
    }
    RowParams p = params(s, addresses, scalars, 0);
    LaunchPlan plan;
    if (c.exchange == kRowExchangeGlobal) {
      geometry.waiting_group = static_cast<unsigned>(c.cluster);
      p.boards = reinterpret_cast<void*>(workspace);
      plan.add_zero_fill(workspace, workspace_bytes(config, problem, device));
    } else {
      geometry.cluster[0] = static_cast<unsigned>(c.cluster);
    }
    plan.add(0, geometry, KernelArgs::of(p));
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
