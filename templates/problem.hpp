// What a template family is asked about: the problem, the device it must run on, and a config.
// These are the inputs of every later stage; they carry no behaviour of any family.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tilesmith/types.hpp"

namespace tilesmith {

// Maps by name that look names up as string views (no std::string made per lookup: the runtime
// builds a launch plan from a config and a problem on every call whose tensors moved).
using ProblemOptions = std::map<std::string, std::string, std::less<>>;
using ConfigValues = std::map<std::string, int, std::less<>>;

// One operation instance. `shape` is the family's own dimension list (matmul: M, N, K).
// `options` are what else changes the kernel (a layout, an activation, a bias present), by name;
// values that do not change it (an epsilon, a softmax scale) are call arguments, not options.
struct Problem {
  Problem() = default;
  Problem(std::string op_name, DType in, DType out, std::vector<std::int64_t> dims,
          ProblemOptions kernel_options = {})
      : op(std::move(op_name)),
        dtype(in),
        out_dtype(out),
        shape(std::move(dims)),
        options(std::move(kernel_options)) {}

  std::string op;
  DType dtype = DType::bf16;      // input element type
  DType out_dtype = DType::bf16;  // output element type
  std::vector<std::int64_t> shape;
  ProblemOptions options;

  // Canonical, stable text used as the database key: "matmul bf16->bf16 4096x4096x4096", and
  // with options "softmax bf16->bf16 32768x4096 [act=gelu,weight=1]". A problem without options
  // keeps the key it had before options existed.
  std::string key() const;
  std::string shape_text() const;    // "4096x4096x4096"
  std::string options_text() const;  // "act=gelu,weight=1"; "" when there are none
  // The value of option `name`, or `fallback` (its default) when the problem leaves it out.
  std::string option(std::string_view name, std::string_view fallback = "") const;
  bool operator==(const Problem&) const = default;
};

// "name=value,..." (names and values of letters, digits, '_', '-' and '.') -> options; throws
// InvalidArgument for a malformed item or a name given twice.
ProblemOptions parse_options(const std::string& text);

std::vector<std::int64_t> parse_shape(const std::string& text);  // "MxNxK" -> {M,N,K}; throws

// User input quoted in an error message, cut to a readable length: a 10 KB argument is named by
// its start and its size, not echoed whole. "'4096x40...' (10240 characters)".
std::string quote_input(std::string_view text);

// The code of `dtype` in kernel template arguments: ElementKind in common/tile_primitives.cuh.
int element_kind(DType dtype);

// A point of a family's parameter space. Ordered by name so its text form is canonical.
struct Config {
  ConfigValues values;

  int at(std::string_view name) const;  // throws Error naming the missing parameter
  std::string text() const;               // "block_k=32,block_m=128,..."
  static Config parse(const std::string& text);  // inverse of text(); throws Error
  bool operator==(const Config&) const = default;
  bool operator<(const Config& other) const { return values < other.values; }
};

// The device a config is generated for: what constraints and the launch rule depend on. Read
// off the GPU by the driver stage, or assumed from the architecture when there is no GPU.
struct DeviceTarget {
  std::string name;  // "NVIDIA H100 80GB HBM3"
  int cc_major = 0;
  int cc_minor = 0;
  int sm_count = 0;
  int max_threads_per_block = 1024;
  int max_smem_per_block_optin = 0;  // bytes a block may use after raising its dynamic limit
  int regs_per_block = 65536;
  std::int64_t l2_bytes = 0;

  // NVRTC's --gpu-architecture: the exact arch, "sm_90a" on Hopper (wgmma, setmaxnreg).
  std::string arch() const;
  // The model key results are stored under: name, compute capability and SM count.
  std::string model_key() const;
  // Typical limits of an architecture, for rendering and compiling without a GPU.
  static DeviceTarget assumed_for_arch(const std::string& arch);  // "sm_80", "sm_90a", ...
};

}  // namespace tilesmith
