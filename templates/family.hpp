// A template family: the kernel source plus the descriptor the generator, tuner and runtime use.
// Adding a family is a folder under templates/ implementing this interface and one registry line.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "templates/problem.hpp"
#include "tilesmith/types.hpp"

namespace tilesmith {

struct ParamSpec {
  std::string name;
  std::vector<int> values;
};

// Whether a point of a product is worth listing: false for a combination of parameters that no
// problem and no device could run, so a large product is pruned as it is walked, never held whole.
// Asked with the point's values in the space's order, as the walk holds them: a product of
// millions is walked in well under a second only if no Config is built for what it leaves out.
using Admits = std::function<bool(std::span<const int> values)>;

// The cartesian product of a space's value lists, in a fixed order (the last parameter varies
// fastest); with `only`, just the configs that take its values (a parameter it names that the
// space lacks leaves nothing); with `admits`, just the configs it admits.
std::vector<Config> enumerate_space(const std::vector<ParamSpec>& space, const Config& only = {},
                                    const Admits& admits = {});
// How many configs of the product take `only`'s values (admitted or not), without listing them.
std::size_t space_size(const std::vector<ParamSpec>& space, const Config& only = {});
// Why `config` is not a point of `space` (a parameter missing or unknown); nothing when it is.
std::optional<std::string> check_parameters(const std::vector<ParamSpec>& space, const Config& config);

// A family of several templates (variants) whose parameters differ: variant v takes the
// parameters of spaces[v], and its configs carry exactly those plus `variant` = v, so each
// config has one canonical text.
struct VariantSpaces {
  std::vector<std::vector<ParamSpec>> spaces;

  // `variant` with every variant, then every parameter of any variant with all its values (for
  // help texts and --config checks).
  std::vector<ParamSpec> merged() const;
  // Each variant's product, variant 0's first; with `only`, just the configs that take its
  // values; with `admits`, just those it admits (asked with the variant's index and the point's
  // values in that variant's space order, as Admits).
  std::vector<Config> enumerate(
      const Config& only = {},
      const std::function<bool(int variant, std::span<const int> values)>& admits = {}) const;
  // How many configs of the products take `only`'s values (admitted or not).
  std::size_t size(const Config& only = {}) const;
  // Why `config` is not a config of its variant (no or an unknown variant, a parameter missing
  // or foreign to it); nothing when it is.
  std::optional<std::string> check(const Config& config) const;
};

// The options an op accepts, each with its values; the first value is the default, written by
// leaving the option out so each problem has one key.
using OptionTable = std::map<std::string, std::vector<std::string>>;

// Throws InvalidArgument, naming `op`, for an option not in `table`, a default given
// explicitly, or a value the option does not take.
void validate_options(const std::string& op, const OptionTable& table, const Problem& problem);
// "a=col, act=relu|gelu|silu": each option with the values that may be written.
std::string describe_options(const OptionTable& table);

// Clusters of up to this many CTAs launch on every GPU that has clusters; larger ones (sm_90:
// up to 16) need the kernel's non-portable attribute, which the launcher sets.
constexpr unsigned kPortableClusterSize = 8;

struct LaunchGeometry {
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  // Thread-block cluster (sm_90+): {1, 1, 1} is none. A kernel whose cluster shape is compiled
  // in (__cluster_dims__) leaves this at {1, 1, 1}.
  unsigned cluster[3] = {1, 1, 1};
  unsigned dynamic_smem_bytes = 0;
  // The kernel strides over its work by gridDim.x (a persistent grid): the launcher shrinks
  // grid[0] to the CTAs (whole clusters) the device holds at once, as the driver's occupancy
  // calculator counts them, so no CTA waits for a second wave.
  bool persistent = false;
  // CTAs that wait on each other through global memory, in groups of this many consecutive
  // blockIdx.x (a row shared by CTAs without a cluster): every CTA of a group must run at once,
  // so the launch is cooperative (the driver refuses it rather than leave a CTA waiting for one
  // that cannot start) and a persistent grid shrinks to whole groups. 1: none.
  unsigned waiting_group = 1;
};

// A TMA descriptor (CUtensorMap) that the driver stage encodes on the host, with
// cuTensorMapEncodeTiled, into a kernel's argument bytes: templates describe tensor maps, they
// never call the driver. Tiled, interleave none, out-of-bounds elements read as zeros.
struct TensorMapSpec {
  std::uint32_t offset = 0;  // of the 128-byte TensorMap (common/tensor_map.h) in the arguments
  DType dtype = DType::bf16;
  std::uint32_t rank = 2;
  std::uint64_t address = 0;            // the tensor's base: 16-byte aligned
  std::uint64_t dims[5] = {};           // elements, innermost first
  std::uint64_t stride_bytes[4] = {};   // of dimensions 1 .. rank-1: multiples of 16
  std::uint32_t box[5] = {};            // elements per copy, innermost first
  std::uint32_t swizzle_bytes = 128;    // 0, 32, 64 or 128
  // How much L2 fetches from DRAM around each request it misses: 0 (the request alone), 64,
  // 128 or 256 bytes.
  std::uint32_t l2_promotion_bytes = 256;
};

// A kernel's single by-value parameter struct, as bytes: every tilesmith kernel takes exactly
// one `Params` argument, so launching needs no per-family argument marshalling. Tensor maps
// inside it are listed in `tensor_maps` and encoded by the driver stage just before the launch.
// Fixed capacity, so building one on the runtime's hot path allocates nothing.
struct KernelArgs {
  // The largest: matmul's sm_90a kernel reading its weight in row phases (1600 bytes; its
  // B's and C's maps and 8 phase maps).
  static constexpr std::size_t kCapacity = 2048;
  static constexpr int kMaxTensorMaps = 10;
  alignas(64) std::array<std::byte, kCapacity> bytes{};  // CUtensorMap: 64-byte aligned
  std::size_t size = 0;
  std::array<TensorMapSpec, kMaxTensorMaps> tensor_maps{};
  int tensor_map_count = 0;

  template <class T>
  static KernelArgs of(const T& params) {
    static_assert(sizeof(T) <= kCapacity, "kernel parameter struct too large");
    static_assert(std::is_trivially_copyable_v<T>);
    KernelArgs args;
    std::memcpy(args.bytes.data(), &params, sizeof(T));
    args.size = sizeof(T);
    return args;
  }
  // Asks for `member`, a TensorMap inside `params` (the struct `of` copied), to be encoded from
  // `spec`: the driver stage fills it in just before each launch.
  template <class T, class Map>
  void request_tensor_map(const T& params, const Map& member, TensorMapSpec spec) {
    static_assert(sizeof(Map) == 128, "a tensor map is 128 bytes");
    const auto offset = reinterpret_cast<const std::byte*>(&member) -
                        reinterpret_cast<const std::byte*>(&params);
    if (tensor_map_count == kMaxTensorMaps || offset < 0 || offset % 64 ||
        static_cast<std::size_t>(offset) + 128 > size)
      throw Error("a tensor map outside the kernel arguments, misaligned, or one too many");
    spec.offset = static_cast<std::uint32_t>(offset);
    tensor_maps[static_cast<std::size_t>(tensor_map_count++)] = spec;
  }
};

// One launch of a call: which of the config's kernels (an index into kernel_expressions), where,
// with what; or, kernel kZeroFill, `zero_bytes` (a multiple of 4) from `zero_address` cleared
// (a workspace whose counters a kernel needs at zero: the stream orders it before the next step).
struct LaunchStep {
  static constexpr int kZeroFill = -1;
  int kernel = 0;
  LaunchGeometry geometry;
  KernelArgs args;
  std::uint64_t zero_address = 0, zero_bytes = 0;
};

// Everything one call of a config runs, in order, on one stream: the main kernel, and where a
// config needs them a padding copy before it or a split-K reduction after it. Fixed capacity:
// the runtime builds one per call without allocating.
struct LaunchPlan {
  static constexpr int kMaxSteps = 4;
  std::array<LaunchStep, kMaxSteps> steps{};
  int step_count = 0;

  LaunchStep& add(int kernel, const LaunchGeometry& geometry, const KernelArgs& args) {
    if (step_count == kMaxSteps) throw Error("a launch plan holds at most 4 launches");
    LaunchStep& step = steps[static_cast<std::size_t>(step_count++)];
    step.kernel = kernel;
    step.geometry = geometry;
    step.args = args;
    return step;
  }
  void add_zero_fill(std::uint64_t address, std::uint64_t bytes) {
    if (bytes % 4) throw Error("a zero fill of " + std::to_string(bytes) + " bytes (not whole words)");
    LaunchStep& step = add(LaunchStep::kZeroFill, LaunchGeometry{}, KernelArgs{});
    step.zero_address = address;
    step.zero_bytes = bytes;
  }
  std::span<const LaunchStep> all() const { return {steps.data(), static_cast<std::size_t>(step_count)}; }
};

// A buffer the kernel reads or writes; the tuner allocates, fills and poisons them generically.
struct TensorSpec {
  std::string name;
  DType dtype;
  std::size_t elements;
  bool is_output;
  // An input whose contents the family writes (Family::fill_input: a table of other tensors'
  // addresses and lengths), not random values; `elements` of `dtype` give its size.
  bool family_filled = false;
};

// What a call passes besides its tensors and workspace that does not change the kernel, so is
// not part of the problem's key. The tuner times the defaults.
struct CallScalars {
  static constexpr std::size_t kMaxTensors = 12;
  // Elements from one row of each tensor to the next, in tensors() order; 0: rows packed. Which
  // tensors have rows is the family's to say (the reductions: x, y, residual).
  std::array<std::int64_t, kMaxTensors> row_strides{};
  // Elements from one batch's matrix of each tensor to the next, in tensors() order; nothing:
  // batches packed; 0: one matrix shared by every batch. Which tensors have batches is the
  // family's to say (matmul: A, B, residual, C).
  std::array<std::optional<std::int64_t>, kMaxTensors> batch_strides{};
  // Elements from one head of each tensor to the next, in tensors() order; 0: as the layout
  // packs them. Only tensors with heads have them (attention: Q, K, V, O).
  std::array<std::int64_t, kMaxTensors> head_strides{};
  double epsilon = 1e-5;  // the norms' floor under the variance
  std::optional<double> softmax_scale;  // attention's; nothing: 1 / sqrt(head dim)
  bool operator==(const CallScalars&) const = default;
};

struct Work {
  double flops = 0;      // useful floating-point operations
  double min_bytes = 0;  // each input read once, each output written once
};

// Embedded source of a family: every file its kernels are built from, by include name
// ("matmul/matmul.cuh", "common/tile_primitives.cuh"). A config's translation unit includes the
// file that holds its kernels (Family::kernel_file); NVRTC parses only what is included.
struct FamilySource {
  std::map<std::string, std::string> files;
};

class Family {
 public:
  virtual ~Family() = default;

  virtual std::string name() const = 0;
  virtual const FamilySource& source() const = 0;

  // The parameter space and the rule that prunes a config before it is compiled. `reject`
  // returns the reason a config cannot run this problem on this device, or nothing.
  virtual std::vector<ParamSpec> space() const = 0;
  virtual std::optional<std::string> reject(const Config& config, const Problem& problem,
                                            const DeviceTarget& device) const = 0;
  // Every config of the space. Default: the product of space()'s value lists. A family whose
  // variants take different parameters (one template on mma.sync, one on wgmma) lists the
  // union of their products instead, and may leave out the combinations no problem could run
  // (pruned as the product is walked). With `only`, just the configs that take its values (a
  // sweep's --only), without building the rest.
  virtual std::vector<Config> enumerate(const Config& only) const;
  std::vector<Config> enumerate() const { return enumerate(Config{}); }
  // The size of the product (or products) that enumerate walks, left-out combinations
  // included; with `only`, of the part that takes its values. Counted, not listed.
  virtual std::size_t space_size(const Config& only) const;
  std::size_t space_size() const { return space_size(Config{}); }
  // A config that is valid for any problem the family accepts on this device.
  virtual Config default_config(const Problem& problem, const DeviceTarget& device) const = 0;
  // Whether `borrowed`, tuned for another shape, should run `problem` rather than
  // default_config (the runtime's nearest-shape fallback asks). Default: yes, a tuned config
  // knows more than the default. A family says no where its own estimate ranks the default
  // first (matmul: the borrowed tile's waves on this shape cost more than the default's).
  virtual bool outranks_default(const Config& borrowed, const Problem& problem,
                                const DeviceTarget& device) const;

  // Throws Error when the family cannot express this problem (bad shape, unsupported dtype).
  virtual void validate(const Problem& problem) const = 0;
  // The problem a call with these scalars runs as: where they need kernels the problem's own
  // would not be (matmul: strides off the 16-byte boundaries its shape alone gives), an option
  // that says so. Default: the problem itself.
  virtual Problem problem_for_call(Problem problem, const CallScalars& scalars) const;

  // The file of source() holding this config's kernels, and their NVRTC name expressions: one
  // translation unit per config, several kernels when its plan launches several.
  virtual std::string kernel_file(const Config& config) const = 0;
  virtual std::vector<std::string> kernel_expressions(const Config& config,
                                                      const Problem& problem) const = 0;

  // Buffers in the order `plan` expects their addresses; outputs are poisoned before every
  // checked run.
  virtual std::vector<TensorSpec> tensors(const Problem& problem) const = 0;
  // The contents of a family_filled input, written into `bytes` (its size); `addresses` are
  // every tensor's, in tensors() order. Default: throws (no family-filled inputs).
  virtual void fill_input(const Problem& problem, std::size_t tensor,
                          std::span<const std::uint64_t> addresses, std::span<std::byte> bytes) const;
  // Device memory a call needs besides its tensors (split-K partial sums, padded copies),
  // allocated once by the tuner and the runtime and reused.
  virtual std::size_t workspace_bytes(const Config& config, const Problem& problem,
                                      const DeviceTarget& device) const;
  // The launches of one call. `device` sets what depends on the GPU (a persistent grid's size);
  // `workspace` holds workspace_bytes (0 when none are needed).
  virtual LaunchPlan plan(const Config& config, const Problem& problem,
                          const DeviceTarget& device,
                          std::span<const std::uint64_t> tensor_addresses,
                          std::uint64_t workspace, const CallScalars& scalars) const = 0;

  // The trusted reference: a simple kernel in `reference_file` writing fp32 values to
  // `reference_out`, every output tensor's in turn (tensors() order), one per element, for the
  // default CallScalars.
  virtual std::string reference_file() const = 0;
  virtual std::string reference_expression(const Problem& problem) const = 0;
  virtual LaunchGeometry reference_launch(const Problem& problem) const = 0;
  virtual KernelArgs reference_args(const Problem& problem,
                                    std::span<const std::uint64_t> tensor_addresses,
                                    std::uint64_t reference_out) const = 0;
  // CPU reference for small problems (used to check the GPU reference itself); inputs are the
  // input tensors converted to double, in `tensors` order; returns the outputs laid out as the
  // GPU reference writes them.
  virtual std::vector<double> reference_cpu(const Problem& problem,
                                            const std::vector<std::vector<double>>& inputs) const = 0;

  // Largest accepted ||out - ref|| / ||ref|| of one output tensor. Default: by its dtype.
  virtual double tolerance(const Problem& problem, const TensorSpec& output) const;

  // For help texts: the shape's form ("MxNxK or BxMxNxK (B batches)") and the options the op
  // takes, with their values ("a=col (A stored k x m), ...").
  virtual std::string shape_form() const = 0;
  virtual std::string options_help() const = 0;

  virtual Work work(const Problem& problem) const = 0;
};

}  // namespace tilesmith
