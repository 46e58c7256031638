#include "tuner/workbench.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <cstring>
#include <mutex>

#include "generator/compiled_kernel.hpp"
#include "templates/embedded_files.hpp"

namespace tilesmith::tuner {
namespace {

using driver::api;

// Support and reference kernels compiled once per process and architecture.
const CompiledKernel& compiled_once(const RenderedSource& source, const std::string& arch) {
  static std::mutex mutex;
  static std::map<std::string, CompiledKernel> compiled;
  std::lock_guard lock(mutex);
  std::string key = source.hash + "/" + arch;
  auto it = compiled.find(key);
  if (it == compiled.end()) it = compiled.emplace(key, compile(source, arch)).first;
  return it->second;
}

RenderedSource support_source(const std::string& expression) {
  RenderedSource source;
  source.family = "support";
  source.main_name = "support_kernels.cu";
  source.text = std::string(embedded::file("common/support_kernels.cuh"));
  source.headers["common/tile_primitives.cuh"] =
      std::string(embedded::file("common/tile_primitives.cuh"));
  source.kernel_expressions = {expression};
  source.hash = content_hash(source.text + source.headers.begin()->second + expression);
  return source;
}

LaunchGeometry grid_stride(std::uint64_t count) {
  LaunchGeometry geometry;
  geometry.block[0] = 256;
  geometry.grid[0] = static_cast<unsigned>(std::clamp<std::uint64_t>((count + 255) / 256, 1, 4096));
  return geometry;
}

double percentile(std::vector<float> sorted, double q) {
  std::size_t index = static_cast<std::size_t>(q * (sorted.size() - 1) + 0.5);
  return sorted[std::min(index, sorted.size() - 1)];
}

// Median, minimum, p10, p90 and spread of the samples (sorted here) into `timing`.
void summarize(std::vector<float>& samples, Timing& timing) {
  std::sort(samples.begin(), samples.end());
  timing.repetitions = static_cast<int>(samples.size());
  timing.median_ms = percentile(samples, 0.5);
  timing.min_ms = samples.front();
  timing.p10_ms = percentile(samples, 0.1);
  timing.p90_ms = percentile(samples, 0.9);
  timing.spread = timing.median_ms > 0 ? (timing.p90_ms - timing.p10_ms) / timing.median_ms : 0;
}

}  // namespace

TimingVerdict judge_samples(std::vector<float> samples, const TimingOptions& options) {
  if (options.precision <= 0 || samples.empty()) return TimingVerdict::more;
  std::sort(samples.begin(), samples.end());
  const double n = static_cast<double>(samples.size()), half = 0.98 * std::sqrt(n);
  const auto rank = [&](double r) { return samples[static_cast<std::size_t>(std::clamp(r, 0.0, n - 1))]; };
  const double low = rank(std::floor(n / 2 - half)), high = rank(std::ceil(n / 2 + half));
  if (options.best_ms > 0 && low > options.best_ms * (1 + options.precision))
    return TimingVerdict::cannot_win;
  if ((high - low) / 2 <= options.precision * percentile(samples, 0.5)) return TimingVerdict::precise;
  return TimingVerdict::more;
}

struct Workbench::Kernels {
  driver::ReadyKernel reference;
  driver::ReadyKernel read_flush;
  std::map<int, driver::ReadyKernel> fill;  // by element kind
  std::map<int, driver::ReadyKernel> compare;  // by element kind
};

Workbench::Workbench(const Family& family, const Problem& problem, const DeviceTarget& device)
    : family_(family), problem_(problem), device_(device), specs_(family.tensors(problem)) {
  const std::string arch = device.arch();
  const std::string what = family.name() + " " + problem.key();
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    buffers_.emplace_back(specs_[i].elements * dtype_size(specs_[i].dtype),
                          "tensor " + specs_[i].name + " of " + what);
    addresses_.push_back(buffers_.back().address());
  }
  std::size_t reference_elements = 0;
  for (std::size_t i = 0; i < specs_.size(); ++i)
    if (specs_[i].is_output) {
      outputs_.push_back({i, reference_elements});
      reference_elements += specs_[i].elements;
    }
  if (outputs_.empty()) throw Error(what + ": the family declares no output tensor");
  reference_out_ =
      driver::DeviceBuffer(reference_elements * sizeof(float), "reference of " + what);
  totals_ = driver::DeviceBuffer(3 * sizeof(double) * outputs_.size(), "comparison totals");
  // Twice the L2, so nothing a timed launch reads survives from the previous one.
  std::size_t flush_bytes = std::max<std::int64_t>(2 * device.l2_bytes, 64 << 20) / 16 * 16;
  l2_flush_ = driver::DeviceBuffer(flush_bytes, "the L2 flush buffer");
  // One repeated word: read_flush folds it to zero and never writes (support_kernels.cuh).
  TILESMITH_CU(api().cuMemsetD32Async(l2_flush_.address(), 0x5a5a5a5a, flush_bytes / 4, stream_.get()),
               "filling the L2 flush buffer");

  kernels_ = std::make_unique<Kernels>();
  RenderedSource reference = render_reference(family, problem);
  kernels_->reference = driver::load_kernel(compiled_once(reference, arch),
                                            family.reference_launch(problem).dynamic_smem_bytes,
                                            "reference " + reference.describe());
  kernels_->read_flush = driver::load_kernel(
      compiled_once(support_source("tilesmith::read_flush"), arch), 0, "tilesmith::read_flush");
  for (const TensorSpec& spec : specs_) {
    int kind = element_kind(spec.dtype);
    if (kernels_->fill.count(kind)) continue;
    std::string expression = "tilesmith::fill_normal<" + std::to_string(kind) + ">";
    kernels_->fill.emplace(kind, driver::load_kernel(compiled_once(support_source(expression), arch),
                                                     0, expression));
  }
  for (const Output& output : outputs_) {
    int kind = element_kind(specs_[output.tensor].dtype);
    if (kernels_->compare.count(kind)) continue;
    std::string expression = "tilesmith::compare_with_reference<" + std::to_string(kind) + ">";
    kernels_->compare.emplace(
        kind, driver::load_kernel(compiled_once(support_source(expression), arch), 0, expression));
  }
}

Workbench::~Workbench() = default;

void Workbench::refresh_inputs(std::uint64_t seed) {
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    const TensorSpec& spec = specs_[i];
    if (spec.family_filled) {
      std::vector<std::byte> contents(buffers_[i].bytes());
      family_.fill_input(problem_, i, addresses_, contents);
      TILESMITH_CU(api().cuMemcpyHtoD(addresses_[i], contents.data(), contents.size()),
                   "writing input " + spec.name);
      continue;
    }
    if (spec.is_output) {
      // 0xFF bytes are NaN in f16, bf16 and f32: an element the kernel never writes shows.
      TILESMITH_CU(api().cuMemsetD8Async(addresses_[i], 0xFF, buffers_[i].bytes(), stream_.get()),
                   "poisoning output " + spec.name);
      continue;
    }
    struct {  // FillParams in support_kernels.cuh
      std::uint64_t out, count, seed;
    } params{addresses_[i], spec.elements, seed * 131 + i};
    kernels_->fill.at(element_kind(spec.dtype))
        .first()
        .launch(grid_stride(spec.elements), KernelArgs::of(params), stream_.get());
  }
  stream_.synchronize("filling inputs of " + problem_.key());
  inputs_seed_ = seed;
}

void Workbench::run_reference() {
  if (inputs_seed_ && reference_seed_ == inputs_seed_) return;  // these inputs' reference is in hand
  kernels_->reference.first().launch(
      family_.reference_launch(problem_),
      family_.reference_args(problem_, addresses_, reference_out_.address()), stream_.get());
  reference_seed_ = inputs_seed_;
}

LaunchPlan Workbench::plan(const Config& config) {
  const std::size_t bytes = family_.workspace_bytes(config, problem_, device_);
  if (bytes > workspace_.bytes())
    workspace_ = driver::DeviceBuffer(bytes, "the workspace of " + problem_.key());
  return family_.plan(config, problem_, device_, addresses_, bytes ? workspace_.address() : 0,
                      CallScalars{});
}

Verification Workbench::verify(const driver::ReadyKernel& kernel, const Config& config) {
  kernel.run(plan(config), stream_.get());
  stream_.synchronize("running " + kernel.first().description());
  return check_output();
}

Verification Workbench::check_output() {
  run_reference();
  TILESMITH_CU(api().cuMemsetD8Async(totals_.address(), 0, totals_.bytes(), stream_.get()),
               "clearing comparison totals");
  for (std::size_t o = 0; o < outputs_.size(); ++o) {
    const TensorSpec& spec = specs_[outputs_[o].tensor];
    struct {  // CompareParams in support_kernels.cuh
      std::uint64_t out, reference, count, totals;
    } params{addresses_[outputs_[o].tensor],
             reference_out_.address() + outputs_[o].reference_offset * sizeof(float),
             spec.elements, totals_.address() + o * 3 * sizeof(double)};
    kernels_->compare.at(element_kind(spec.dtype))
        .first()
        .launch(grid_stride(params.count), KernelArgs::of(params), stream_.get());
  }
  stream_.synchronize("comparing " + problem_.key() + " with the reference");
  std::vector<double> totals(3 * outputs_.size());
  TILESMITH_CU(api().cuMemcpyDtoH(totals.data(), totals_.address(), totals.size() * sizeof(double)),
               "reading comparison totals");
  // Each output against its own tolerance; the result reports the one furthest past (or
  // closest to) its bound, named when there are several.
  Verification result;
  result.passed = true;
  double worst = -1;
  for (std::size_t o = 0; o < outputs_.size(); ++o) {
    const TensorSpec& spec = specs_[outputs_[o].tensor];
    const double* t = &totals[3 * o];
    std::uint64_t nonfinite;
    std::memcpy(&nonfinite, &t[2], sizeof nonfinite);
    const double tolerance = family_.tolerance(problem_, spec);
    const double error = t[1] > 0 ? std::sqrt(t[0] / t[1]) : std::sqrt(t[0]);
    const bool passed = nonfinite == 0 && std::isfinite(error) && error <= tolerance;
    const std::string name = outputs_.size() > 1 ? "output " + spec.name + ": " : "";
    result.nonfinite += nonfinite;
    if (nonfinite && result.passed)
      result.detail = name + std::to_string(nonfinite) + " of " + std::to_string(spec.elements) +
                      " outputs are NaN/Inf (unwritten or overflowed)";
    else if (!passed && result.passed)
      result.detail = name + "relative error " + std::to_string(error) + " exceeds tolerance " +
                      std::to_string(tolerance);
    const double ratio = std::isfinite(error) ? error / tolerance : INFINITY;
    if (ratio > worst || (!passed && result.passed)) {
      worst = ratio;
      result.rel_error = error;
      result.tolerance = tolerance;
    }
    result.passed = result.passed && passed;
  }
  return result;
}

void Workbench::flush_l2(CUstream stream) {
  struct {  // FlushParams in support_kernels.cuh
    std::uint64_t data, count, sink;
  } params{l2_flush_.address(), l2_flush_.bytes() / 16, l2_flush_.address()};
  kernels_->read_flush.first().launch(grid_stride(params.count), KernelArgs::of(params), stream);
}

void Workbench::bring_clocks_up(CUstream stream) {
  if (clocks_up_) return;
  clocks_up_ = true;
  constexpr float kBusyMs = 100;
  driver::Event start, stop;
  start.record(stream);
  for (float spent = 0; spent < kBusyMs;) {
    for (int i = 0; i < 64; ++i) flush_l2(stream);
    stop.record(stream);
    spent = stop.since(start);
  }
}

Timing Workbench::time(const driver::ReadyKernel& kernel, const Config& config,
                       const TimingOptions& options) {
  const LaunchPlan call = plan(config);
  CUstream stream = stream_.get();
  bring_clocks_up(stream);
  for (int i = 0; i < options.warmup; ++i) kernel.run(call, stream);
  // One timed launch sizes the run: enough repetitions for ~target_ms of kernel time.
  driver::Event probe_start, probe_stop;
  flush_l2(stream);
  probe_start.record(stream);
  kernel.run(call, stream);
  probe_stop.record(stream);
  float probe_ms = std::max(probe_stop.since(probe_start), 1e-3f);
  int repetitions = std::clamp(static_cast<int>(options.target_ms / probe_ms),
                               options.min_repetitions, options.max_repetitions);

  std::vector<driver::Event> starts(repetitions), stops(repetitions);
  std::vector<float> samples;
  Timing timing;
  timing.kernel_ms = probe_ms;
  auto enqueue = [&](int from, int to) {
    for (int i = from; i < to; ++i) {
      flush_l2(stream);
      starts[i].record(stream);
      kernel.run(call, stream);
      stops[i].record(stream);
    }
    for (int i = from; i < to; ++i) samples.push_back(stops[i].since(starts[i]));
    for (int i = from; i < to; ++i) timing.kernel_ms += samples[i];
  };
  int done = std::min(5, repetitions);
  enqueue(0, done);
  std::vector<float> sorted = samples;
  std::sort(sorted.begin(), sorted.end());
  if (options.give_up_factor > 0 && options.best_ms > 0 &&
      percentile(sorted, 0.5) > options.give_up_factor * options.best_ms) {
    timing.stopped_early = true;
  } else {
    while (done < repetitions) {
      const int next = std::min(repetitions, std::max(done + 10, options.min_repetitions));
      enqueue(done, next);
      done = next;
      const TimingVerdict verdict = judge_samples(samples, options);
      timing.cannot_win = verdict == TimingVerdict::cannot_win;
      if (verdict != TimingVerdict::more) break;
    }
  }
  summarize(samples, timing);
  return timing;
}

std::vector<Timing> Workbench::time_together(const std::vector<const driver::ReadyKernel*>& kernels,
                                             const std::vector<Config>& configs,
                                             const TimingOptions& options) {
  CUstream stream = stream_.get();
  bring_clocks_up(stream);
  // plan() grows the one workspace to what a config needs, moving it: the plans are made once
  // it holds the largest.
  for (const Config& config : configs) plan(config);
  std::vector<LaunchPlan> calls;
  for (const Config& config : configs) calls.push_back(plan(config));
  for (std::size_t c = 0; c < kernels.size(); ++c)
    for (int i = 0; i < options.warmup; ++i) kernels[c]->run(calls[c], stream);
  const std::size_t count = kernels.size();
  std::vector<std::vector<float>> samples(count);
  std::vector<Timing> timings(count);
  int rounds = 0;
  while (rounds < options.max_repetitions) {
    const int batch = std::min(10, options.max_repetitions - rounds);
    std::vector<driver::Event> starts(batch * count), stops(batch * count);
    for (int r = 0; r < batch; ++r)
      for (std::size_t c = 0; c < count; ++c) {
        flush_l2(stream);
        starts[r * count + c].record(stream);
        kernels[c]->run(calls[c], stream);
        stops[r * count + c].record(stream);
      }
    for (int r = 0; r < batch; ++r)
      for (std::size_t c = 0; c < count; ++c) {
        const float ms = stops[r * count + c].since(starts[r * count + c]);
        samples[c].push_back(ms);
        timings[c].kernel_ms += ms;
      }
    rounds += batch;
    if (rounds < options.min_repetitions) continue;
    bool precise = true;
    for (std::size_t c = 0; c < count && precise; ++c)
      precise = judge_samples(samples[c], options) == TimingVerdict::precise;
    if (precise) break;
  }
  for (std::size_t c = 0; c < count; ++c) summarize(samples[c], timings[c]);
  return timings;
}

std::vector<float> Workbench::reference_output() {
  run_reference();
  stream_.synchronize("running the reference of " + problem_.key());
  std::vector<float> host(reference_out_.bytes() / sizeof(float));
  TILESMITH_CU(api().cuMemcpyDtoH(host.data(), reference_out_.address(), host.size() * sizeof(float)),
               "reading the reference output");
  return host;
}

std::vector<double> Workbench::download(std::size_t index) {
  const TensorSpec& spec = specs_.at(index);
  std::vector<double> values(spec.elements);
  if (spec.dtype == DType::f32) {
    std::vector<float> host(spec.elements);
    TILESMITH_CU(api().cuMemcpyDtoH(host.data(), addresses_[index], host.size() * 4),
                 "reading tensor " + spec.name);
    std::copy(host.begin(), host.end(), values.begin());
    return values;
  }
  std::vector<std::uint16_t> host(spec.elements);
  TILESMITH_CU(api().cuMemcpyDtoH(host.data(), addresses_[index], host.size() * 2),
               "reading tensor " + spec.name);
  for (std::size_t i = 0; i < host.size(); ++i) {
    std::uint16_t bits = host[i];
    if (spec.dtype == DType::bf16) {
      std::uint32_t wide = static_cast<std::uint32_t>(bits) << 16;
      float value;
      std::memcpy(&value, &wide, 4);
      values[i] = value;
    } else {  // IEEE half
      int exponent = (bits >> 10) & 0x1f, mantissa = bits & 0x3ff;
      double magnitude = exponent == 0    ? std::ldexp(mantissa, -24)
                         : exponent == 31 ? (mantissa ? NAN : INFINITY)
                                          : std::ldexp(1024 + mantissa, exponent - 25);
      values[i] = (bits & 0x8000) ? -magnitude : magnitude;
    }
  }
  return values;
}

}  // namespace tilesmith::tuner
