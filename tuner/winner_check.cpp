#include "tuner/winner_check.hpp"

#include <algorithm>

#include "generator/compiled_kernel.hpp"
#include "generator/rendered_source.hpp"
#include "templates/registry.hpp"
#include "tuner/gpu_worker.hpp"

namespace tilesmith::tuner {

std::vector<WinnerCheck> check_winners(const cache::Database& database,
                                       const std::vector<cache::Winner>& winners,
                                       const WinnerCheckOptions& options) {
  GpuWorker gpu(options.device_ordinal, options.candidate_timeout_s);
  if (!gpu.available()) throw Error("verify needs a GPU: " + gpu.unavailable_reason());
  const DeviceTarget& device = gpu.device();
  const std::string arch = device.arch();
  const std::string nvrtc = nvrtc_version();
  std::vector<WinnerCheck> checks;
  for (const cache::Winner& winner : winners) {
    WinnerCheck check;
    check.winner = winner;
    const Problem& problem = winner.problem;
    const Family& family = find_family(problem.op);
    if (winner.template_hash != template_hash(family)) {
      // Its config may not even render with this build's templates; the runtime never uses it.
      check.verdict = "older templates";
      check.passed = true;
      check.detail = "not checked: the runtime does not use it ('tilesmith tune --stale')";
      checks.push_back(std::move(check));
      continue;
    }
    if (std::optional<std::string> why = family.reject(winner.config, problem, device)) {
      check.verdict = "rejected";
      check.detail = *why;
      checks.push_back(std::move(check));
      continue;
    }
    std::optional<CompiledKernel> kernel;
    try {
      const RenderedSource source = render(family, winner.config, problem);
      kernel = database.cubin(source, arch, nvrtc);
      if (!kernel) kernel = compile(source, arch);
    } catch (const Error& error) {
      check.verdict = "compile failed";
      check.detail = error.what();
      checks.push_back(std::move(check));
      continue;
    }
    TimingOptions timing;  // to its median's 1%, with no early stop: it is measured, not raced
    const GpuTrialResult result =
        gpu.evaluate(family, problem, winner.config, *kernel, options.seed, timing);
    check.rel_error = result.verification.rel_error;
    check.allowed_ms = winner.median_ms * (1 + std::max(winner.spread, options.tolerance));
    if (result.status != cache::TrialStatus::ok) {
      check.verdict = std::string(cache::status_name(result.status));
      check.detail = result.detail;
    } else {
      check.median_ms = result.timing.median_ms;
      check.passed = check.median_ms <= check.allowed_ms;
      check.verdict = check.passed ? "ok" : "slower";
    }
    checks.push_back(std::move(check));
  }
  return checks;
}

}  // namespace tilesmith::tuner
