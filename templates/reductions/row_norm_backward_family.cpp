// The backward row ops' descriptors: softmax_backward, layernorm_backward and rmsnorm_backward
// (row_norm_backward.cuh). One class serves the three; each op is its own family. A call is
// one launch, or two where dweight or dbias are written: the rows' kernel leaves one partial
// row of column sums per group of CTAs in the workspace, and column_sums adds them.
#include <algorithm>
#include <cmath>
#include <string>

#include "templates/embedded_files.hpp"
#include "templates/reductions/row_norm_family.hpp"
#include "templates/reductions/row_norm_params.h"
#include "templates/reductions/row_split.hpp"

namespace tilesmith {
namespace {

// Each thread keeps two arrays of its slice (x and dy, then xhat and g) from read to write.
constexpr int kRowArrays = 2;
// Rows up to a cluster of 16 CTAs (sm_90) x 512 threads x 32 elements per array.
constexpr long long kMaxBackwardCols = 16ll * 512 * kMaxRowElementsPerThread / kRowArrays;
// The workspace's head: the int the rows' kernel sets to the groups that ran (16 bytes keep the
// partials' rows aligned).
constexpr std::uint64_t kGroupsRanBytes = 16;
// The kernel's static shared memory (the row partials and the cluster mailbox) stays under this.
constexpr long long kStaticSmemBytes = 1024;

struct BackwardOpInfo {
  const char* name;
  RowOp op;
};

OptionTable options_of(const BackwardOpInfo& info) {
  OptionTable options;
  if (info.op == kRowSoftmax) return options;
  options["weight"] = {"1", "0"};
  if (info.op == kRowLayerNorm) options["bias"] = {"1", "0"};
  return options;
}

struct BackwardShape {
  long long rows = 0;
  int cols = 0;
  int flags = 0;  // kRowWeight (reads weight, writes dweight), kRowBias (writes dbias)
  BackwardShape(const BackwardOpInfo& info, const Problem& problem) {
    rows = problem.shape.at(0);
    cols = static_cast<int>(problem.shape.at(1));
    if (info.op != kRowSoftmax && problem.option("weight", "1") == "1") flags |= kRowWeight;
    if (info.op == kRowLayerNorm && problem.option("bias", "1") == "1") flags |= kRowBias;
  }
  bool has(int flag) const { return (flags & flag) != 0; }
  int sums() const { return (has(kRowWeight) ? 1 : 0) + (has(kRowBias) ? 1 : 0); }
};

class RowNormBackwardFamily final : public Family {
 public:
  explicit RowNormBackwardFamily(BackwardOpInfo info) : info_(info), options_(options_of(info)) {
    for (const char* file :
         {"reductions/row_norm_backward.cuh", "reductions/row_norm_backward_reference.cuh",
          "reductions/row_norm.cuh", "reductions/row_norm_params.h", "common/host_device.h", "common/tile_primitives.cuh",
          "common/activation.h", "common/elementwise.cuh", "common/hopper.cuh",
          "common/tensor_map.h"})
      source_.files[file] = std::string(embedded::file(file));
  }

  std::string name() const override { return info_.name; }
  const FamilySource& source() const override { return source_; }
  std::string shape_form() const override {
    return "ROWSxCOLS (the forward's shape; dx per row, dweight and dbias over the rows)";
  }
  std::string options_help() const override {
    std::string help = options_.empty() ? "none" : describe_options(options_);
    if (info_.op == kRowSoftmax) return help + "; takes y and dy; dtypes: the forward's (y, dy: out)";
    return help + " (weight=0: no weight, no dweight; bias=0: no dbias); takes x, dy, " +
           (info_.op == kRowLayerNorm ? "mean, " : "") +
           "rstd (the forward's stats); dtypes: the forward's (x, dx: in; dy: out)";
  }

  // The forward's split, how many CTAs per SM the persistent grid launches at most (more hide
  // latency, fewer leave fewer partial rows of column sums to add; the launcher trims what does
  // not fit at once), and the row groups each CTA keeps in flight into a shared-memory ring
  // (0: none, each row read when its turn comes).
  std::vector<ParamSpec> space() const override {
    std::vector<ParamSpec> space = row_split_space();
    space.push_back({"ctas_per_sm", {1, 2, 4, 8, 16}});
    space.push_back({"stages", {0, 1, 2, 3, 4}});
    return space;
  }

  std::optional<std::string> reject(const Config& config, const Problem& problem,
                                    const DeviceTarget& device) const override {
    if (auto wrong = check_parameters(space(), config)) return wrong;
    const BackwardShape s(info_, problem);
    const RowSplit c(config);
    if (auto reason = reject_row_split(c, s.rows, s.cols, problem.dtype, kRowArrays, device))
      return reason;
    const int ctas_per_sm = config.at("ctas_per_sm");
    if (ctas_per_sm < 1 || ctas_per_sm * c.threads() > kThreadsPerSm)
      return std::to_string(ctas_per_sm) + " CTAs of " + std::to_string(c.threads()) +
             " threads do not fit on one SM";
    // A CTA's column sums and ring stay in shared memory.
    const std::size_t smem = ring_smem_bytes(config, problem);
    if (static_cast<long long>(smem) + kStaticSmemBytes > device.max_smem_per_block_optin)
      return "the column sums and the ring need " + std::to_string(smem) + " bytes of shared memory";
    const int stages = config.at("stages");
    if (stages < 0 || stages > 4) return "stages from 0 to 4";
    // A CTA that runs a single row group has nothing to fetch ahead.
    if (stages > 0 && (s.rows + c.rows_per_block - 1) / c.rows_per_block <= groups(config, problem, device))
      return "no more row groups than CTAs (clusters) for the ring";
    return std::nullopt;
  }

  Config default_config(const Problem& problem, const DeviceTarget& device) const override {
    // The ring where each CTA takes several row groups.
    auto rejected = [&](const Config& config) { return reject(config, problem, device).has_value(); };
    return default_row_split({Config{{{"ctas_per_sm", 2}, {"stages", 1}}},
                              Config{{{"ctas_per_sm", 2}, {"stages", 0}}}},
                             problem.shape.at(1), problem.dtype, kRowArrays, rejected);
  }

  void validate(const Problem& problem) const override {
    const std::string op = info_.name;
    if (problem.op != op) throw InvalidArgument(op + ": asked for op " + quote_input(problem.op));
    validate_options(op, options_, problem);
    validate_row_shape(op, problem, kMaxBackwardCols);
  }

  std::string kernel_file(const Config&) const override {
    return "reductions/row_norm_backward.cuh";
  }

  std::vector<std::string> kernel_expressions(const Config& config,
                                              const Problem& problem) const override {
    const BackwardShape s(info_, problem);
    const RowSplit c(config);
    std::vector<std::string> kernels = {
        "tilesmith::row_norm_backward<" + op_arguments(problem, s) + "," +
        std::to_string(c.vec(problem.dtype)) + "," + std::to_string(c.threads_per_row) + "," +
        std::to_string(c.rows_per_block) + "," + std::to_string(c.items(s.cols, problem.dtype)) +
        "," + std::to_string(c.cluster) + "," + std::to_string(c.exchange) + "," +
        std::to_string(config.at("stages")) + ">"};
    if (s.sums() > 0)
      kernels.push_back("tilesmith::column_sums<" + std::to_string(element_kind(problem.dtype)) + ">");
    return kernels;
  }

  // The forward's input (softmax: its output y), dy, weight, the statistics; dx, dweight, dbias.
  std::vector<TensorSpec> tensors(const Problem& problem) const override {
    const BackwardShape s(info_, problem);
    const auto rows = static_cast<std::size_t>(s.rows), cols = static_cast<std::size_t>(s.cols);
    std::vector<TensorSpec> specs;
    if (info_.op == kRowSoftmax)
      specs.push_back({"y", problem.out_dtype, rows * cols, false});
    else
      specs.push_back({"x", problem.dtype, rows * cols, false});
    specs.push_back({"dy", problem.out_dtype, rows * cols, false});
    if (s.has(kRowWeight)) specs.push_back({"weight", problem.dtype, cols, false});
    if (info_.op == kRowLayerNorm) specs.push_back({"mean", DType::f32, rows, false});
    if (info_.op != kRowSoftmax) specs.push_back({"rstd", DType::f32, rows, false});
    specs.push_back({"dx", problem.dtype, rows * cols, true});
    if (s.has(kRowWeight)) specs.push_back({"dweight", problem.dtype, cols, true});
    if (s.has(kRowBias)) specs.push_back({"dbias", problem.dtype, cols, true});
    return specs;
  }

  // The count of groups that ran (kGroupsRanBytes), then the column sums' partial rows for the
  // most groups the plan launches, then the boards of a global exchange.
  std::size_t workspace_bytes(const Config& config, const Problem& problem,
                              const DeviceTarget& device) const override {
    return boards_offset(config, problem, device) +
           row_boards_bytes(RowSplit(config), problem.shape.at(0), device);
  }

  LaunchPlan plan(const Config& config, const Problem& problem, const DeviceTarget& device,
                  std::span<const std::uint64_t> addresses, std::uint64_t workspace,
                  const CallScalars& scalars) const override {
    const BackwardShape s(info_, problem);
    const RowSplit c(config);
    const long long group_count = groups(config, problem, device);
    LaunchGeometry rows;
    rows.grid[0] = static_cast<unsigned>(group_count * c.cluster);
    rows.block[0] = static_cast<unsigned>(c.threads());
    rows.dynamic_smem_bytes = static_cast<unsigned>(dynamic_smem_bytes(config, problem, device));
    // Groups past what the GPU holds at once would wait for a second wave: the launcher trims
    // them, and the kernel records how many ran for column_sums.
    rows.persistent = true;
    RowBackwardParams p = params(s, addresses, scalars, 0);
    p.stage_weight = stages_weight(config, problem, device) ? 1 : 0;
    if (s.sums() > 0) {
      p.groups_ran = reinterpret_cast<int*>(workspace);
      p.partials = reinterpret_cast<float*>(workspace + kGroupsRanBytes);
    }
    LaunchPlan plan;
    if (c.exchange == kRowExchangeGlobal) {
      const std::uint64_t boards = workspace + boards_offset(config, problem, device);
      rows.waiting_group = static_cast<unsigned>(c.cluster);
      p.boards = reinterpret_cast<void*>(boards);
      plan.add_zero_fill(boards, row_boards_bytes(c, s.rows, device));
    } else {
      rows.cluster[0] = static_cast<unsigned>(c.cluster);
    }
    plan.add(0, rows, KernelArgs::of(p));
    if (s.sums() > 0) {
      ColumnSumParams sums{};
      sums.partials = p.partials;
      std::size_t next = addresses.size() - static_cast<std::size_t>(s.sums());
      for (int sum = 0; sum < s.sums(); ++sum) sums.out[sum] = reinterpret_cast<void*>(addresses[next++]);
      sums.groups = p.groups_ran;
      sums.cols = s.cols;
      // One round of loads over the partials (column_sums takes 8 groups a thread at once):
      // enough threads per column for the groups, then as many columns per CTA as leave two
      // CTAs per SM (at least 8: a warp then reads 32-byte sectors whole).
      int depth = 1;
      while (depth < 128 && depth * 8 < group_count) depth *= 2;
      int width = 256;
      while (width > 8 && width / 2 >= s.cols) width /= 2;
      width = std::min(width, 1024 / depth);
      while (width > 8 && (s.cols + width - 1) / width * s.sums() < 2LL * device.sm_count) width /= 2;
      LaunchGeometry columns;
      columns.grid[0] = static_cast<unsigned>((s.cols + width - 1) / width);
      columns.grid[1] = static_cast<unsigned>(s.sums());
      columns.block[0] = static_cast<unsigned>(width);
      columns.block[1] = static_cast<unsigned>(depth);
      plan.add(1, columns, KernelArgs::of(sums));
    }
    return plan;
  }

  std::string reference_file() const override {
    return "reductions/row_norm_backward_reference.cuh";
  }
  std::string reference_expression(const Problem& problem) const override {
    return "tilesmith::row_norm_backward_reference<" +
           op_arguments(problem, BackwardShape(info_, problem)) + ">";
  }
  LaunchGeometry reference_launch(const Problem& problem) const override {
    const BackwardShape s(info_, problem);
    LaunchGeometry geometry;  // a warp per row, then a thread per column
    geometry.grid[0] = static_cast<unsigned>((s.rows + 7) / 8 + (s.sums() ? (s.cols + 255) / 256 : 0));
    geometry.block[0] = 256;
    return geometry;
  }
  KernelArgs reference_args(const Problem& problem, std::span<const std::uint64_t> addresses,
                            std::uint64_t reference_out) const override {
    return KernelArgs::of(params(BackwardShape(info_, problem), addresses, CallScalars{}, reference_out));
  }

  std::vector<double> reference_cpu(const Problem& problem,
                                    const std::vector<std::vector<double>>& inputs) const override {
    const BackwardShape s(info_, problem);
    std::size_t next = 0;
    const std::vector<double>& x = inputs.at(next++);
    const std::vector<double>& dy = inputs.at(next++);
    const std::vector<double>* weight = s.has(kRowWeight) ? &inputs.at(next++) : nullptr;
    const std::vector<double>* mean = info_.op == kRowLayerNorm ? &inputs.at(next++) : nullptr;
    const std::vector<double>* rstd = info_.op != kRowSoftmax ? &inputs.at(next++) : nullptr;
    const std::size_t rows = static_cast<std::size_t>(s.rows), cols = static_cast<std::size_t>(s.cols);
    std::vector<double> dx(rows * cols), dweight(cols), dbias(cols);
    for (std::size_t r = 0; r < rows; ++r) {
      std::vector<double> xhat(cols), g(cols);
      double sum_g = 0, sum_gx = 0;
      for (std::size_t j = 0; j < cols; ++j) {
        const std::size_t i = r * cols + j;
        xhat[j] = info_.op == kRowSoftmax ? x[i] : (x[i] - (mean ? (*mean)[r] : 0.0)) * (*rstd)[r];
        g[j] = weight ? dy[i] * (*weight)[j] : dy[i];
        sum_g += g[j];
        sum_gx += g[j] * xhat[j];
        dweight[j] += dy[i] * xhat[j];
        dbias[j] += dy[i];
      }
      for (std::size_t j = 0; j < cols; ++j) {
        const std::size_t i = r * cols + j;
        if (info_.op == kRowSoftmax)
          dx[i] = x[i] * (dy[i] - sum_gx);
        else if (info_.op == kRowRmsNorm)
          dx[i] = (*rstd)[r] * (g[j] - xhat[j] * sum_gx / cols);
        else
          dx[i] = (*rstd)[r] * (g[j] - sum_g / cols - xhat[j] * sum_gx / cols);
      }
    }
    if (s.has(kRowWeight)) dx.insert(dx.end(), dweight.begin(), dweight.end());
    if (s.has(kRowBias)) dx.insert(dx.end(), dbias.begin(), dbias.end());
    return dx;
  }

  Work work(const Problem& problem) const override {
    Work work;
    for (const TensorSpec& spec : tensors(problem))
      work.min_bytes += static_cast<double>(spec.elements) * static_cast<double>(dtype_size(spec.dtype));
    const BackwardShape s(info_, problem);
    work.flops = 8.0 * static_cast<double>(s.rows) * s.cols;  // xhat, g, two sums, dx, columns
    return work;
  }

 private:
  std::string op_arguments(const Problem& problem, const BackwardShape& s) const {
    return std::to_string(info_.op) + "," + std::to_string(element_kind(problem.dtype)) + "," +
           std::to_string(element_kind(problem.out_dtype)) + "," + std::to_string(s.flags);
  }

  // The workspace: how many groups ran and the column sums' partials (those with sums), then
  // the boards of a global exchange, from this offset (16-byte aligned).
  std::size_t boards_offset(const Config& config, const Problem& problem, const DeviceTarget& device) const {
    const BackwardShape s(info_, problem);
    if (s.sums() == 0) return 0;
    const std::size_t sums = kGroupsRanBytes + static_cast<std::size_t>(s.sums()) *
                                                   static_cast<std::size_t>(groups(config, problem, device)) *
                                                   static_cast<std::size_t>(s.cols) * sizeof(float);
    return (sums + 15) / 16 * 16;
  }

  // Groups of CTAs the persistent grid asks for: ctas_per_sm on every SM, no more than the rows
  // need (the launcher may run fewer).
  static long long groups(const Config& config, const Problem& problem, const DeviceTarget& device) {
    const RowSplit c(config);
    const long long row_groups = (problem.shape.at(0) + c.rows_per_block - 1) / c.rows_per_block;
    const long long resident =
        std::max(1ll, static_cast<long long>(std::max(device.sm_count, 1)) * config.at("ctas_per_sm") / c.cluster);
    return std::min(row_groups, resident);
  }

  // The column sums' shared memory: a slot per element a thread holds (as row_norm_backward's
  // SLOTS), per sum, per row of the CTA; none where the sums stay in registers.
  std::size_t column_slot_bytes(const Config& config, const Problem& problem) const {
    const BackwardShape s(info_, problem);
    const RowSplit c(config);
    const int vec = c.vec(problem.dtype);
    const int extra = std::max(1, (vec - 1 + c.threads_per_row - 1) / c.threads_per_row);
    const int elements = c.items(s.cols, problem.dtype) * vec + extra;
    if (row_column_sums_in_registers(elements, s.sums(), c.threads(), c.rows_per_block)) return 0;
    return static_cast<std::size_t>(s.sums()) * static_cast<std::size_t>(c.rows_per_block) *
           static_cast<std::size_t>(elements) * c.threads_per_row * sizeof(float);
  }

  // Elements of a row group the CTA holds (its threads x items x vector).
  static std::size_t group_elements(const Config& config, const Problem& problem) {
    const RowSplit c(config);
    return static_cast<std::size_t>(c.threads()) *
           static_cast<std::size_t>(c.items(problem.shape.at(1), problem.dtype)) *
           static_cast<std::size_t>(c.vec(problem.dtype));
  }

  // The column sums' slots, then (16-byte aligned) the ring: `stages` row groups of x's and dy's
  // vectors (as row_norm_backward's RING_START and X_RING).
  std::size_t ring_smem_bytes(const Config& config, const Problem& problem) const {
    const std::size_t x_bytes = dtype_size(info_.op == kRowSoftmax ? problem.out_dtype : problem.dtype);
    const std::size_t ring = static_cast<std::size_t>(config.at("stages")) * group_elements(config, problem) *
                             (x_bytes + dtype_size(problem.out_dtype));
    return (column_slot_bytes(config, problem) + 15) / 16 * 16 + ring;
  }

  // The weight's vectors at the CTA's columns (WEIGHT_SLOTS), after the ring.
  static std::size_t weight_smem_bytes(const Config& config, const Problem& problem) {
    return group_elements(config, problem) * dtype_size(problem.dtype);
  }

  // With a ring, the weight's vectors are copied once per CTA where they fit: else every row
  // reads them from L2 (the column sums and the ring come first).
  bool stages_weight(const Config& config, const Problem& problem, const DeviceTarget& device) const {
    if (config.at("stages") == 0 || !BackwardShape(info_, problem).has(kRowWeight)) return false;
    const std::size_t smem = ring_smem_bytes(config, problem) + weight_smem_bytes(config, problem);
    return static_cast<long long>(smem) + kStaticSmemBytes <= device.max_smem_per_block_optin;
  }

  std::size_t dynamic_smem_bytes(const Config& config, const Problem& problem, const DeviceTarget& device) const {
    return ring_smem_bytes(config, problem) +
           (stages_weight(config, problem, device) ? weight_smem_bytes(config, problem) : 0);
  }

  RowBackwardParams params(const BackwardShape& s, std::span<const std::uint64_t> addresses,
                           const CallScalars& scalars, std::uint64_t reference_out) const {
    RowBackwardParams p{};
    std::size_t next = 0;
    auto stride = [&](std::size_t tensor) {
      const std::int64_t given = scalars.row_strides.at(tensor);
      return given ? given : static_cast<long long>(s.cols);
    };
    p.x = reinterpret_cast<const void*>(addresses[next]);
    p.x_stride = stride(next++);
    p.dy = reinterpret_cast<const void*>(addresses[next]);
    p.dy_stride = stride(next++);
    if (s.has(kRowWeight)) p.weight = reinterpret_cast<const void*>(addresses[next++]);
    if (info_.op == kRowLayerNorm) p.mean = reinterpret_cast<const float*>(addresses[next++]);
    if (info_.op != kRowSoftmax) p.rstd = reinterpret_cast<const float*>(addresses[next++]);
    p.dx = reinterpret_cast<void*>(addresses[next]);
    p.dx_stride = stride(next++);
    if (reference_out) {  // the reference writes dx, dweight and dbias, packed, into its buffer
      p.dx = reinterpret_cast<void*>(reference_out);
      p.dx_stride = s.cols;
    }
    p.rows = s.rows;
    p.cols = s.cols;
    return p;
  }

  BackwardOpInfo info_;
  OptionTable options_;
  FamilySource source_;
};

}  // namespace

std::vector<std::unique_ptr<Family>> make_row_norm_backward_families() {
  std::vector<std::unique_ptr<Family>> families;
  for (BackwardOpInfo info : {BackwardOpInfo{"softmax_backward", kRowSoftmax},
                              BackwardOpInfo{"layernorm_backward", kRowLayerNorm},
                              BackwardOpInfo{"rmsnorm_backward", kRowRmsNorm}})
    families.push_back(std::make_unique<RowNormBackwardFamily>(info));
  return families;
}

}  // namespace tilesmith
