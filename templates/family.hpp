// A template family: the kernel source plus the descriptor the generator, tuner and runtime use.
// Adding a family is a folder under templates/ implementing this interface and one registry line.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "templates/problem.hpp"

namespace tilesmith {

struct ParamSpec {
  std::string name;
  std::vector<int> values;
};

struct LaunchGeometry {
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned dynamic_smem_bytes = 0;
};

// A kernel's single by-value parameter struct, as bytes: every tilesmith kernel takes exactly
// one `Params` argument, so launching needs no per-family argument marshalling.
// Fixed capacity, so building one on the runtime's hot path allocates nothing.
struct KernelArgs {
  static constexpr std::size_t kCapacity = 256;
  alignas(16) std::array<std::byte, kCapacity> bytes{};
  std::size_t size = 0;
  template <class T>
  static KernelArgs of(const T& params) {
    static_assert(sizeof(T) <= kCapacity, "kernel parameter struct too large");
    static_assert(std::is_trivially_copyable_v<T>);
    KernelArgs args;
    std::memcpy(args.bytes.data(), &params, sizeof(T));
    args.size = sizeof(T);
    return args;
  }
};

// A buffer the kernel reads or writes; the tuner allocates, fills and poisons them generically.
struct TensorSpec {
  std::string name;
  DType dtype;
  std::size_t elements;
  bool is_output;
};

struct Work {
  double flops = 0;      // useful floating-point operations
  double min_bytes = 0;  // each input read once, each output written once
};

// Embedded source of a family: the main file and the headers it includes, by include name.
struct FamilySource {
  std::string main_name;  // "matmul.cuh"
  std::string main_text;
  std::map<std::string, std::string> headers;  // include name -> text
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
  // A config that is valid for any problem the family accepts on this device.
  virtual Config default_config(const Problem& problem, const DeviceTarget& device) const = 0;

  // Throws Error when the family cannot express this problem (bad shape, unsupported dtype).
  virtual void validate(const Problem& problem) const = 0;

  // The NVRTC name expression of the kernel for this config and problem, and its launch rule.
  virtual std::string kernel_expression(const Config& config, const Problem& problem) const = 0;
  virtual LaunchGeometry launch(const Config& config, const Problem& problem) const = 0;

  // Buffers in the order `args` expects them; outputs are poisoned before every checked run.
  virtual std::vector<TensorSpec> tensors(const Problem& problem) const = 0;
  virtual KernelArgs args(const Problem& problem,
                          std::span<const std::uint64_t> tensor_addresses) const = 0;

  // The trusted reference: a simple kernel in the same source writing fp32 output to
  // `reference_out` (one element per element of the first output tensor).
  virtual std::string reference_expression(const Problem& problem) const = 0;
  virtual LaunchGeometry reference_launch(const Problem& problem) const = 0;
  virtual KernelArgs reference_args(const Problem& problem,
                                    std::span<const std::uint64_t> tensor_addresses,
                                    std::uint64_t reference_out) const = 0;
  // CPU reference for small problems (used to check the GPU reference itself); inputs are the
  // input tensors converted to double, in `tensors` order.
  virtual std::vector<double> reference_cpu(const Problem& problem,
                                            const std::vector<std::vector<double>>& inputs) const = 0;

  // Largest accepted ||out - ref|| / ||ref||, by output dtype.
  virtual double tolerance(const Problem& problem) const;

  virtual Work work(const Problem& problem) const = 0;
};

}  // namespace tilesmith
