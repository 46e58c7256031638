#include "support/probe_family.hpp"

#include <memory>
#include <mutex>

#include "templates/registry.hpp"

namespace tilesmith::testing {
namespace {

const char* kProbeSource = R"PROBE(
struct ProbeParams { const float* in; float* out; long long n; };

template <int BEHAVIOR, int BLOCK, int SLOW>
__global__ void __launch_bounds__(BLOCK) probe_kernel(const ProbeParams p) {
  long long i = blockIdx.x * (long long)BLOCK + threadIdx.x;
  if (SLOW) {  // thousands of unrolled steps: seconds in NVRTC and ptxas, the result unchanged
    float x = i < p.n ? p.in[i] : 0.f;
#pragma unroll
    for (int k = 0; k < 6000; ++k) x = __sinf(x * 1.0001f + k);
    if (x == 12345.f) p.out[0] = x;  // keeps the loop; never true for these inputs' results
  }
  if (BEHAVIOR == 2) {  // never finishes: only the watchdog ends it
    // A volatile global load the compiler cannot drop (a volatile local was optimized away);
    // the inputs are finite random values, so x == x always holds.
    volatile const float* in = p.in;
    while (in[0] == in[0]) {}
  }
  if (i < p.n) {
    if (BEHAVIOR == 1) p.out[i + (1ll << 40)] = 1.f;  // a terabyte past the buffer: faults
    p.out[i] = p.in[i] + (BEHAVIOR == 3 ? 1.f : 0.f);
  }
}

__global__ void probe_reference(const ProbeParams p) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < p.n) p.out[i] = p.in[i];
}
)PROBE";

struct ProbeParams {
  const float* in;
  float* out;
  long long n;
};

// "probe": the four behaviors. "probe_slow_default": correct kernels only, whose default is
// the one slow to compile (`slow` = 1).
class ProbeFamily final : public Family {
 public:
  explicit ProbeFamily(bool slow_default) : slow_default_(slow_default) {
    source_.files["probe.cuh"] = kProbeSource;
  }
  std::string name() const override { return slow_default_ ? "probe_slow_default" : "probe"; }
  const FamilySource& source() const override { return source_; }
  std::vector<ParamSpec> space() const override {
    if (slow_default_) return {{"behavior", {kCorrect}}, {"block", {32, 64, 128, 256}}, {"slow", {0, 1}}};
    return {{"behavior", {kCorrect, kFault, kHang, kWrong}}, {"block", {128, 256}}};
  }
  std::optional<std::string> reject(const Config& config, const Problem&,
                                    const DeviceTarget&) const override {
    if (!config.values.count("behavior") || !config.values.count("block")) return "incomplete";
    return std::nullopt;
  }
  Config default_config(const Problem&, const DeviceTarget&) const override {
    if (slow_default_) return Config{{{"behavior", kCorrect}, {"block", 256}, {"slow", 1}}};
    return Config{{{"behavior", kCorrect}, {"block", 256}}};
  }
  void validate(const Problem& problem) const override {
    if (problem.shape.size() != 1 || problem.dtype != DType::f32 || problem.out_dtype != DType::f32)
      throw Error("probe: expects one dimension and f32");
  }
  std::string kernel_file(const Config&) const override { return "probe.cuh"; }
  std::string shape_form() const override { return "N"; }
  std::string options_help() const override { return "none; f32 only"; }
  std::vector<std::string> kernel_expressions(const Config& config,
                                              const Problem&) const override {
    const int slow = config.values.count("slow") ? config.at("slow") : 0;
    return {"probe_kernel<" + std::to_string(config.at("behavior")) + "," +
            std::to_string(config.at("block")) + "," + std::to_string(slow) + ">"};
  }
  static LaunchGeometry launch(const Config& config, const Problem& problem) {
    LaunchGeometry g;
    g.block[0] = config.at("block");
    g.grid[0] = static_cast<unsigned>((problem.shape[0] + g.block[0] - 1) / g.block[0]);
    return g;
  }
  std::vector<TensorSpec> tensors(const Problem& problem) const override {
    auto n = static_cast<std::size_t>(problem.shape[0]);
    return {{"in", DType::f32, n, false}, {"out", DType::f32, n, true}};
  }
  LaunchPlan plan(const Config& config, const Problem& problem, const DeviceTarget&,
                  std::span<const std::uint64_t> a, std::uint64_t,
                  const CallScalars&) const override {
    LaunchPlan plan;
    plan.add(0, launch(config, problem),
             KernelArgs::of(ProbeParams{reinterpret_cast<const float*>(a[0]),
                                        reinterpret_cast<float*>(a[1]), problem.shape[0]}));
    return plan;
  }
  std::string reference_file() const override { return "probe.cuh"; }
  std::string reference_expression(const Problem&) const override { return "probe_reference"; }
  LaunchGeometry reference_launch(const Problem& problem) const override {
    return launch(default_config(problem, {}), problem);
  }
  KernelArgs reference_args(const Problem& problem, std::span<const std::uint64_t> a,
                            std::uint64_t out) const override {
    return KernelArgs::of(ProbeParams{reinterpret_cast<const float*>(a[0]),
                                      reinterpret_cast<float*>(out), problem.shape[0]});
  }
  std::vector<double> reference_cpu(const Problem&,
                                    const std::vector<std::vector<double>>& inputs) const override {
    return inputs.at(0);
  }
  Work work(const Problem& problem) const override {
    return {0.0, 8.0 * static_cast<double>(problem.shape[0])};
  }

 private:
  bool slow_default_;
  FamilySource source_;
};

}  // namespace

void register_probe_family() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_family(std::make_unique<ProbeFamily>(false));
    register_family(std::make_unique<ProbeFamily>(true));
  });
}

}  // namespace tilesmith::testing
