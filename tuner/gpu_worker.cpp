#include "tuner/gpu_worker.hpp"

#include <unistd.h>

#include <chrono>
#include <map>

#include "driver/cuda_driver.hpp"
#include "templates/problem_json.hpp"
#include "templates/registry.hpp"
#include "tuner/interrupt.hpp"

namespace tilesmith::tuner {
namespace {

using nlohmann::json;

json device_json(const DeviceTarget& d) {
  return {{"name", d.name},
          {"cc_major", d.cc_major},
          {"cc_minor", d.cc_minor},
          {"sm_count", d.sm_count},
          {"max_threads_per_block", d.max_threads_per_block},
          {"max_smem_per_block_optin", d.max_smem_per_block_optin},
          {"regs_per_block", d.regs_per_block},
          {"l2_bytes", d.l2_bytes}};
}

DeviceTarget device_from_json(const json& j) {
  DeviceTarget d;
  d.name = j.at("name");
  d.cc_major = j.at("cc_major");
  d.cc_minor = j.at("cc_minor");
  d.sm_count = j.at("sm_count");
  d.max_threads_per_block = j.at("max_threads_per_block");
  d.max_smem_per_block_optin = j.at("max_smem_per_block_optin");
  d.regs_per_block = j.at("regs_per_block");
  d.l2_bytes = j.at("l2_bytes");
  return d;
}

// A timing as the worker sends it (the fields the tuner records), and back.
json timing_json(const Timing& timing) {
  return {{"median_ms", timing.median_ms},
          {"min_ms", timing.min_ms},
          {"spread", timing.spread},
          {"repetitions", timing.repetitions}};
}
Timing timing_from_json(const json& j) {
  Timing timing;
  timing.median_ms = j.at("median_ms");
  timing.min_ms = j.at("min_ms");
  timing.spread = j.at("spread");
  timing.repetitions = j.at("repetitions");
  return timing;
}

// What the worker sends back for one candidate. `fatal` means its context is unusable.
Message trial_reply(cache::TrialStatus status, const std::string& detail,
                    const Verification& verification, const Timing& timing) {
  Message reply;
  reply.header = timing_json(timing);
  reply.header["status"] = cache::status_name(status);
  reply.header["detail"] = detail;
  reply.header["rel_error"] = verification.rel_error;
  reply.header["nonfinite"] = verification.nonfinite;
  return reply;
}

// The driver result of the last failure in this process, to tell a dead context from a
// refused launch.
bool context_is_dead() {
  CUresult state = driver::api().cuCtxSynchronize();
  return state != CUDA_SUCCESS && driver::is_sticky(state);
}

}  // namespace

GpuWorker::GpuWorker(int device_ordinal, double candidate_timeout_s)
    : device_ordinal_(device_ordinal), timeout_s_(candidate_timeout_s) {
  start();
}

GpuWorker::~GpuWorker() = default;

std::vector<Timing> GpuWorker::retime(const Family& family, const Problem& problem,
                                      const std::vector<std::pair<Config, CompiledKernel>>& candidates,
                                      std::uint64_t seed, const TimingOptions& timing) {
  if (!process_ || !device_) start();
  if (!device_) throw Error("GPU worker unavailable: " + unavailable_reason_);
  Message request;
  json listed = json::array();
  for (const auto& [config, kernel] : candidates) {
    listed.push_back({{"config", config.text()},
                      {"lowered_names", kernel.lowered_names},
                      {"arch", kernel.arch},
                      {"source_hash", kernel.source_hash},
                      {"bytes", kernel.cubin.bytes.size()}});
    request.payload.append(reinterpret_cast<const char*>(kernel.cubin.bytes.data()), kernel.cubin.bytes.size());
  }
  request.header = {{"family", family.name()},
                    {"problem", problem},
                    {"retime", listed},
                    {"seed", seed},
                    {"timing",
                     {{"precision", timing.precision},
                      {"min_repetitions", timing.min_repetitions},
                      {"max_repetitions", timing.max_repetitions}}}};
  bool timed_out = false;
  std::optional<Message> reply;
  try {
    process_->send(request);
    // Each candidate has already run within the watchdog once; together they get as many.
    reply = process_->receive(timeout_s_ * static_cast<double>(candidates.size()), &timed_out);
  } catch (const Interrupted&) {
    process_.reset();
    throw;
  }
  if (!reply || reply->header.contains("error")) {
    const std::string why = reply ? reply->header["error"].get<std::string>()
                                  : timed_out ? "no answer in time" : process_->exit_description();
    process_.reset();
    ++restarts_;
    throw Error("re-timing the finalists: " + why);
  }
  std::vector<Timing> timings;
  for (const json& t : reply->header.at("timings")) timings.push_back(timing_from_json(t));
  if (timings.size() != candidates.size()) throw Error("re-timing the finalists: a timing is missing");
  return timings;
}

namespace {

// The worker's side of GpuWorker::retime: loads and verifies each candidate, then times them
// together.
Message retime_reply(const json& h, const std::string& payload, std::unique_ptr<Workbench>& bench,
                     const DeviceTarget& device) {
  const Family& family = find_family(h.at("family"));
  const Problem problem = h.at("problem").get<Problem>();
  if (!bench || bench->problem().key() != problem.key()) {
    bench.reset();
    bench = std::make_unique<Workbench>(family, problem, device);
  }
  std::vector<driver::ReadyKernel> kernels;
  std::vector<Config> configs;
  std::size_t offset = 0;
  for (const json& listed : h.at("retime")) {
    CompiledKernel compiled;
    compiled.lowered_names = listed.at("lowered_names").get<std::vector<std::string>>();
    compiled.arch = listed.at("arch");
    compiled.source_hash = listed.at("source_hash");
    const std::size_t bytes = listed.at("bytes");
    if (offset + bytes > payload.size()) throw Error("re-timing: the cubins are cut short");
    compiled.cubin.bytes.assign(payload.begin() + offset, payload.begin() + offset + bytes);
    offset += bytes;
    configs.push_back(Config::parse(listed.at("config")));
    kernels.push_back(driver::load_kernel(compiled, bench->plan(configs.back()),
                                          family.name() + " [" + configs.back().text() + "]"));
    bench->refresh_inputs(h.at("seed").get<std::uint64_t>());
    const Verification verification = bench->verify(kernels.back(), configs.back());
    if (!verification.passed)
      throw Error("finalist " + configs.back().text() + " failed verification: " + verification.detail);
  }
  TimingOptions options;
  options.precision = h.at("timing").at("precision");
  options.min_repetitions = h.at("timing").at("min_repetitions");
  options.max_repetitions = h.at("timing").at("max_repetitions");
  std::vector<const driver::ReadyKernel*> pointers;
  for (const driver::ReadyKernel& kernel : kernels) pointers.push_back(&kernel);
  json timings = json::array();
  for (const Timing& t : bench->time_together(pointers, configs, options))
    timings.push_back(timing_json(t));
  return Message{{{"timings", timings}}, ""};
}

}  // namespace

void GpuWorker::start() {
  process_ = std::make_unique<WorkerProcess>("gpu", std::to_string(device_ordinal_));
  bool timed_out = false;
  // cuInit + primary context: 0.2-0.3 s measured; allow generous slack on a busy machine.
  std::optional<Message> hello = process_->receive(60, &timed_out);
  if (!hello) {
    unavailable_reason_ = "the GPU worker did not start (" +
                          (timed_out ? std::string("no answer in 60 s") : process_->exit_description()) + ")";
    device_.reset();
    return;
  }
  if (hello->header.contains("error")) {
    unavailable_reason_ = hello->header["error"];
    device_.reset();
    return;
  }
  device_ = device_from_json(hello->header.at("device"));
  driver_version_ = hello->header.at("driver_version");
}

GpuTrialResult GpuWorker::evaluate(const Family& family, const Problem& problem,
                                   const Config& config, const CompiledKernel& kernel,
                                   std::uint64_t seed, const TimingOptions& timing) {
  if (!process_ || !device_) start();
  if (!device_) throw Error("GPU worker unavailable: " + unavailable_reason_);
  Message request;
  request.header = {{"family", family.name()},
                    {"problem", problem},
                    {"config", config.text()},
                    {"lowered_names", kernel.lowered_names},
                    {"arch", kernel.arch},
                    {"source_hash", kernel.source_hash},
                    {"seed", seed},
                    {"timing",
                     {{"best_ms", timing.best_ms},
                      {"give_up_factor", timing.give_up_factor},
                      {"target_ms", timing.target_ms},
                      {"precision", timing.precision}}}};
  request.payload.assign(kernel.cubin.bytes.begin(), kernel.cubin.bytes.end());

  GpuTrialResult result;
  std::optional<Message> reply;
  bool timed_out = false;
  try {
    process_->send(request);
    reply = process_->receive(timeout_s_, &timed_out);
  } catch (const Interrupted&) {
    // Not the candidate's fault: stop its work now; the sweep withdraws the trial.
    process_.reset();
    throw;
  } catch (const Error& error) {
    result.detail = error.what();
  }
  if (!reply) {
    process_->kill();
    result.status = timed_out ? cache::TrialStatus::timeout : cache::TrialStatus::fault;
    result.detail = timed_out ? "no result after " + std::to_string(static_cast<int>(timeout_s_)) +
                                    " s: the watchdog killed the GPU worker"
                              : "the GPU worker died (" + process_->exit_description() + ")" +
                                    (result.detail.empty() ? "" : ": " + result.detail);
    process_.reset();
    ++restarts_;
    return result;
  }
  const json& h = reply->header;
  result.status = cache::parse_status(h.at("status").get<std::string>());
  result.detail = h.at("detail");
  result.verification.rel_error = h.at("rel_error");
  result.verification.nonfinite = h.at("nonfinite");
  result.timing = timing_from_json(h);
  if (h.contains("seconds")) {
    const json& s = h.at("seconds");
    result.seconds = {s.at("load"), s.at("verify"), s.at("timing"), s.at("kernels")};
  }
  if (h.value("fatal", false)) {  // the worker exits after a fault; start a new one next time
    process_.reset();
    ++restarts_;
  }
  return result;
}

int gpu_worker_main(const WorkerArgs& args) {
  int ordinal = std::stoi(args.argument);
  DeviceTarget device;
  try {
    driver::make_current(ordinal);
    device = driver::describe_device(ordinal);
    write_message(args.out_fd, Message{{{"device", device_json(device)},
                                        {"driver_version", driver::driver_version()}},
                                       ""});
  } catch (const Error& error) {
    write_message(args.out_fd, Message{{{"error", error.what()}}, ""});
    return 0;
  }

  std::unique_ptr<Workbench> bench;  // kept while consecutive candidates share a problem
  while (std::optional<Message> request = read_message(args.in_fd)) {
    const json& h = request->header;
    Verification verification;
    Timing timing;
    Message reply;
    bool fatal = false;
    if (h.contains("retime")) {
      try {
        reply = retime_reply(h, request->payload, bench, device);
      } catch (const std::exception& error) {
        fatal = context_is_dead();
        reply = Message{{{"error", error.what()}}, ""};
      }
      write_message(args.out_fd, reply);
      if (fatal) return 3;
      continue;
    }
    TrialSeconds seconds;
    auto clock = std::chrono::steady_clock::now();
    auto lap = [&](double& into) {  // the time since the last lap, into one phase
      const auto now = std::chrono::steady_clock::now();
      into += std::chrono::duration<double>(now - clock).count();
      clock = now;
    };
    try {
      const Family& family = find_family(h.at("family"));
      Problem problem = h.at("problem").get<Problem>();
      Config config = Config::parse(h.at("config"));
      if (!bench || bench->problem().key() != problem.key()) {
        bench.reset();
        bench = std::make_unique<Workbench>(family, problem, device);
      }
      CompiledKernel compiled;
      compiled.lowered_names = h.at("lowered_names").get<std::vector<std::string>>();
      compiled.arch = h.at("arch");
      compiled.source_hash = h.at("source_hash");
      compiled.cubin.bytes.assign(request->payload.begin(), request->payload.end());
      driver::ReadyKernel ready = driver::load_kernel(
          compiled, bench->plan(config), family.name() + " " + problem.key() + " [" + config.text() + "]");
      lap(seconds.load);
      bench->refresh_inputs(h.at("seed").get<std::uint64_t>());
      verification = bench->verify(ready, config);
      lap(seconds.verify);
      if (!verification.passed) {
        reply = trial_reply(cache::TrialStatus::wrong, verification.detail, verification, timing);
      } else {
        TimingOptions options;
        options.best_ms = h.at("timing").at("best_ms");
        options.give_up_factor = h.at("timing").at("give_up_factor");
        options.target_ms = h.at("timing").at("target_ms");
        options.precision = h.at("timing").at("precision");
        timing = bench->time(ready, config, options);
        lap(seconds.timing);
        seconds.kernels = timing.kernel_ms / 1000;
        reply = trial_reply(timing.stopped_early ? cache::TrialStatus::pruned_early
                                                 : cache::TrialStatus::ok,
                            timing.stopped_early ? "slower than the best by more than the give-up factor" : "",
                            verification, timing);
      }
    } catch (const std::exception& error) {
      fatal = context_is_dead();
      reply = trial_reply(fatal ? cache::TrialStatus::fault : cache::TrialStatus::launch_failed,
                          error.what(), verification, timing);
    }
    reply.header["fatal"] = fatal;
    reply.header["seconds"] = {{"load", seconds.load}, {"verify", seconds.verify},
                               {"timing", seconds.timing}, {"kernels", seconds.kernels}};
    write_message(args.out_fd, reply);
    if (fatal) return 3;  // the context is gone: every later call would fail too
  }
  return 0;
}

}  // namespace tilesmith::tuner
