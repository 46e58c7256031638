#include "tilesmith/runtime.hpp"

#include <array>
#include <cmath>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <initializer_list>
#include <memory>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "cache/database.hpp"
#include "driver/cuda_driver.hpp"
#include "driver/gpu_objects.hpp"
#include "generator/compiled_kernel.hpp"
#include "nearest_winner.hpp"
#include "templates/attention/attention_shape.hpp"
#include "templates/registry.hpp"

namespace tilesmith {
namespace {

// The in-memory key: plain values, so a hit hashes and compares without allocating.
struct DispatchKey {
  const Family* family;
  DType dtype, out_dtype;
  std::array<std::int64_t, 6> shape;
  std::int64_t options;  // the family's options as one number (matmul: layouts and epilogue)
  bool operator==(const DispatchKey&) const = default;
};

struct DispatchKeyHash {
  std::size_t operator()(const DispatchKey& key) const {
    std::size_t h = std::hash<const void*>()(key.family);
    auto mix = [&h](std::int64_t v) { h ^= std::hash<std::int64_t>()(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
    mix(static_cast<int>(key.dtype));
    mix(static_cast<int>(key.out_dtype));
    for (auto d : key.shape) mix(d);
    mix(key.options);
    return h;
  }
};

// A resolved shape. A config whose plan needs a workspace (padding copies, split-K partials)
// gets one per stream: calls on one stream run in order and can share it, calls on two streams
// must not. Shapes without a workspace (most) never take the lock.
struct Entry {
  driver::ReadyKernel kernel;
  Config config;
  Problem problem;
  std::size_t workspace_bytes = 0;
  std::mutex workspace_mutex;
  std::unordered_map<CUstream, driver::DeviceBuffer> workspaces;
  DispatchInfo info;
  // The last call's plan, its tensor maps encoded, and what it was built from: loops that call
  // with the same buffers (most do) skip building it and encoding its maps. Shared and never
  // changed once made, so a warm call copies a pointer under the lock, not the plan's ~14 KB.
  struct BuiltPlan {
    std::array<std::uint64_t, CallScalars::kMaxTensors> addresses{};
    std::uint64_t workspace = 0;
    CallScalars scalars;
    LaunchPlan plan;
  };
  std::mutex plan_mutex;
  std::shared_ptr<const BuiltPlan> last_plan;

  std::uint64_t workspace_for(CUstream stream) {
    if (workspace_bytes == 0) return 0;
    std::lock_guard lock(workspace_mutex);
    auto it = workspaces.find(stream);
    if (it == workspaces.end())
      it = workspaces
               .emplace(stream, driver::DeviceBuffer(workspace_bytes,
                                                     "the workspace of " + problem.key()))
               .first;
    return it->second.address();
  }
};

// A call's tensors in its family's order (Family::tensors), each with its row stride, and the
// call's other arguments: on the stack, so a call allocates nothing.
struct CallTensors {
  std::array<std::uint64_t, CallScalars::kMaxTensors> addresses{};
  CallScalars scalars;
  std::size_t count = 0;
  void add(const void* pointer, std::int64_t row_stride = 0,
           std::optional<std::int64_t> batch_stride = std::nullopt, std::int64_t head_stride = 0) {
    scalars.row_strides[count] = row_stride;
    scalars.batch_strides[count] = batch_stride;
    scalars.head_strides[count] = head_stride;
    addresses[count++] = reinterpret_cast<std::uint64_t>(pointer);
  }
};

void require_pointer(const void* pointer, const char* name) {
  if (!pointer) throw InvalidArgument(std::string("matmul: ") + name + " is a null pointer");
  // cp.async moves 16-byte chunks: every tile row starts on a 16-byte boundary.
  if (reinterpret_cast<std::uintptr_t>(pointer) % 16)
    throw InvalidArgument(std::string("matmul: ") + name + " is not 16-byte aligned");
}

// $TILESMITH_JIT: "off"/"0"/"false" forbid NVRTC, "on"/"1"/"true" or unset allow it; anything
// else is an error rather than a guess.
bool jit_from_environment() {
  const char* value = std::getenv("TILESMITH_JIT");
  if (!value || !*value) return true;
  const std::string text = value;
  if (text == "off" || text == "0" || text == "false") return false;
  if (text == "on" || text == "1" || text == "true") return true;
  throw InvalidArgument("TILESMITH_JIT=" + text + ": want off (no NVRTC: stored kernels only) or on");
}

}  // namespace

struct Runtime::Impl {
  RuntimeOptions options;
  CUcontext context = nullptr;  // the device's primary context, made current on every call
  DeviceTarget device;
  std::string arch;
  cache::Toolchain toolchain;  // this process's driver and NVRTC: a winner timed under others is refused
  bool jit = true;  // RuntimeOptions::jit, resolved
  std::unique_ptr<cache::Database> database;
  // RuntimeOptions::system_database, opened read-only; null when there is none. Read under
  // database_mutex like the user's, never written.
  std::unique_ptr<cache::Database> system_database;
  const Family& matmul_family = find_family("matmul");
  const Family& multi_sum_family = find_family("multi_sum");
  const Family& attention_family = find_family("attention");
  const Family& attention_backward_family = find_family("attention_backward");
  // By RowOp.
  const std::array<const Family*, 5> row_families = {
      &find_family("softmax"), &find_family("layernorm"), &find_family("rmsnorm"),
      &find_family("layernorm_act_residual"), &find_family("rmsnorm_act_residual")};
  // By RowBackwardOp.
  const std::array<const Family*, 3> row_backward_families = {
      &find_family("softmax_backward"), &find_family("layernorm_backward"),
      &find_family("rmsnorm_backward")};
  // A key's entry, or the resolution that will produce it. The thread that inserts the slot
  // resolves it with no lock of the map held, so warm calls of other keys never wait on a
  // compile; a thread missing the same key meanwhile waits on `resolved` for that one result.
  struct Slot {
    std::atomic<bool> ready{false};  // `entry` is set: the hot path's one check
    std::unique_ptr<Entry> entry;
    std::mutex mutex;  // guards done and error
    std::condition_variable resolved;
    bool done = false;
    std::exception_ptr error;  // the resolution failed; the slot has left the map
  };
  std::shared_mutex mutex;  // guards the map; held exclusively only to insert or drop a slot
  std::unordered_map<DispatchKey, std::shared_ptr<Slot>, DispatchKeyHash> entries;
  std::atomic<int> compilations{0};
  // Guards the database and the two flags below: resolutions of different keys run at once,
  // each taking it for its reads and writes, never while compiling.
  std::mutex database_mutex;
  bool gpu_recorded = false;         // misses need the GPU's row; written on the first miss
  bool cache_warning_given = false;  // one warning per Runtime, however many writes fail

  // What the runtime writes to the database (a miss for a later sweep, a cubin so the next
  // process skips NVRTC) saves work later and is not needed now. A failure to write it (a
  // read-only or locked file, a full disk) must not cost the caller's matmul, whose kernel is in
  // hand. It is not silent either, or an unwritable cache would pass for "nothing to tune" and
  // "nothing to compile": the first failure is reported on stderr, once per Runtime.
  template <class Write>
  void write_to_cache(const char* what, const Problem& problem, const char* consequence,
                      Write&& write) {
    try {
      write();
    } catch (const std::exception& error) {
      if (cache_warning_given) return;
      cache_warning_given = true;
      std::fprintf(stderr,
                   "tilesmith: warning: could not store %s for %s in the database, so %s (the "
                   "matmul goes on): %s\n",
                   what, problem.key().c_str(), consequence, error.what());
    }
  }

  // The databases a lookup reads, in the order their entries win: the user's, then the system's.
  std::vector<const cache::Database*> databases() const {
    std::vector<const cache::Database*> sources = {database.get()};
    if (system_database) sources.push_back(system_database.get());
    return sources;
  }

  // Counts an untuned shape in the table of misses, for `tilesmith tune --misses`.
  void record_miss(const cache::TrialKey& key) {
    write_to_cache("the miss", key.problem, "'tilesmith misses' will not list it", [&] {
      if (!gpu_recorded) {
        database->record_gpu(device, toolchain);
        gpu_recorded = true;
      }
      database->record_miss(key);
    });
  }

  // The slow path, under no lock of the map: this shape's winner, the nearest tuned shape's,
  // else the default config; with the JIT off, the first of them whose cubin is stored. The
  // database is read and written under database_mutex, NVRTC runs under none.
  std::unique_ptr<Entry> resolve(const Family& family, const Problem& problem) {
    family.validate(problem);
    auto entry = std::make_unique<Entry>();
    entry->problem = problem;
    const std::string templates = template_hash(family);
    const cache::TrialKey key{device.model_key(), problem, templates};
    std::unique_lock database_lock(database_mutex);
    // This shape's own winner: the user's, else the system database's. A winner vouches only for
    // the kernel its sweep timed: one tuned with another NVRTC or driver is refused, each entry
    // on its own, and the lookup goes on as if it were missing.
    std::optional<cache::Winner> winner;
    KernelSource winner_source = KernelSource::database_winner;
    std::string refused;
    bool has_winner = false;
    for (const cache::Database* source : databases()) {
      std::optional<cache::Winner> found = source->winner(key);
      if (!found) continue;
      has_winner = true;
      if (std::string why = cache::toolchain_mismatch(found->toolchain, toolchain); !why.empty()) {
        if (refused.empty()) refused = std::move(why);
        continue;
      }
      winner = std::move(found);
      if (source != database.get()) winner_source = KernelSource::system_winner;
      break;
    }
    // Recorded before compiling, so a shape whose fallback kernel fails to build still shows up
    // to be tuned. A stored winner that this device rejects is not counted: a sweep picks the
    // winner from the key's trials again, so that miss would never clear. Nor is a stale one:
    // `tune --stale` takes those.
    if (!has_winner) record_miss(key);
    // Takes `config` where its cubin is stored (the user's database first), or with the JIT on
    // where it can be compiled.
    std::optional<CompiledKernel> compiled;
    std::optional<RenderedSource> source;
    bool cubin_is_users = false;
    auto take = [&](const Config& config, DispatchInfo info) {
      source = render(family, config, problem);
      compiled = database->cubin(*source, arch, toolchain.nvrtc_version);
      cubin_is_users = compiled.has_value();
      if (!compiled && system_database)
        compiled = system_database->cubin(*source, arch, toolchain.nvrtc_version);
      if (!compiled && !jit) return false;
      entry->config = config;
      entry->info = std::move(info);
      entry->info.refused_winner = refused;
      return true;
    };
    bool taken = winner && !family.reject(winner->config, problem, device) &&
                 take(winner->config, {winner_source, winner->config.text(), true, problem.key()});
    if (!taken) {
      std::vector<cache::Winner> usable;  // the nearest shape's winner must not be stale either
      for (const cache::Database* source : databases())
        for (cache::Winner& other : source->winners(device.model_key()))
          if (cache::toolchain_mismatch(other.toolchain, toolchain).empty())
            usable.push_back(std::move(other));
      if (auto near = nearest_winner(usable, family, problem, device, templates))
        taken = take(near->config, {KernelSource::nearest_winner, near->config.text(), false,
                                    near->problem.key()});
    }
    if (!taken) {
      const Config fallback = family.default_config(problem, device);
      taken = take(fallback, {KernelSource::default_cached, fallback.text(), false, ""});
    }
    if (!taken)
      throw Error(family.name() + " " + problem.key() + ": " +
                  (system_database ? "neither database holds a" : "the database holds no") +
                  " kernel for it on " +
                  device.model_key() + " with NVRTC " + toolchain.nvrtc_version +
                  " (not its winner's, the nearest tuned shape's or the default config's), and "
                  "TILESMITH_JIT=off forbids compiling one: tune the shape ('tilesmith tune "
                  "--misses' takes it from the misses) or run it once with the JIT on");
    if (compiled) {
      // Used now: a cubin budget evicts it last (the system database is never written).
      if (cubin_is_users)
        write_to_cache("the cubin's use", problem, "a cubin budget may evict it sooner", [&] {
          database->touch_cubin(compiled->source_hash, arch, toolchain.nvrtc_version);
        });
    } else {
      // A new NVRTC version or an untuned shape: compile once, keep the cubin for next time.
      database_lock.unlock();
      compiled = compile(*source, arch);
      ++compilations;
      database_lock.lock();
      write_to_cache("the compiled kernel", problem, "the next process compiles it again",
                     [&] { database->put_cubin(*compiled); });
      if (entry->info.source == KernelSource::default_cached)
        entry->info.source = KernelSource::default_compiled;
    }
    database_lock.unlock();
    const Config& config = entry->config;
    entry->workspace_bytes = family.workspace_bytes(config, problem, device);
    const std::vector<std::uint64_t> no_tensors(family.tensors(problem).size(), 0);
    entry->kernel = driver::load_kernel(
        *compiled, family.plan(config, problem, device, no_tensors, 0, CallScalars{}),
        family.name() + " " + problem.key() + " [" + config.text() + "]");
    return entry;
  }

  // `make_problem` runs only on a miss: a hit builds nothing and allocates nothing. A resolved
  // slot stays in the map for the Runtime's life, so the Entry returned stays valid.
  template <class MakeProblem>
  Entry& lookup(const DispatchKey& key, MakeProblem&& make_problem, DispatchInfo* info) {
    std::shared_ptr<Slot> slot;
    {
      std::shared_lock lock(mutex);
      auto it = entries.find(key);
      if (it != entries.end() && it->second->ready.load(std::memory_order_acquire)) {
        Entry& entry = *it->second->entry;
        if (info) {
          *info = entry.info;
          info->source = KernelSource::memory;  // copies a string: describe_matmul, not the hot path
        }
        return entry;
      }
      if (it != entries.end()) slot = it->second;  // being resolved by another thread
    }
    bool resolving = false;
    if (!slot) {
      std::unique_lock lock(mutex);
      auto it = entries.find(key);
      if (it == entries.end()) {
        it = entries.emplace(key, std::make_shared<Slot>()).first;
        resolving = true;
      }
      slot = it->second;
    }
    if (resolving) {
      try {
        slot->entry = resolve(*key.family, make_problem());
      } catch (...) {
        {
          std::unique_lock lock(mutex);
          entries.erase(key);  // the next call tries again
        }
        std::lock_guard guard(slot->mutex);
        slot->error = std::current_exception();
        slot->done = true;
        slot->resolved.notify_all();
        throw;
      }
      slot->ready.store(true, std::memory_order_release);
      std::lock_guard guard(slot->mutex);
      slot->done = true;
      slot->resolved.notify_all();
    } else {
      std::unique_lock guard(slot->mutex);
      slot->resolved.wait(guard, [&] { return slot->done; });
      if (slot->error) std::rethrow_exception(slot->error);
    }
    if (info) *info = slot->entry->info;
    return *slot->entry;
  }

  // Enqueues the kernel resolved for `key` on `stream`, its plan built from `tensors`.
  template <class MakeProblem>
  void call(const DispatchKey& key, MakeProblem&& make_problem, const CallTensors& tensors,
            void* stream) {
    driver::make_current(context);
    Entry& entry = lookup(key, make_problem, nullptr);
    const CUstream on = static_cast<CUstream>(stream);
    const std::uint64_t workspace = entry.workspace_for(on);
    std::shared_ptr<const Entry::BuiltPlan> built;
    {
      std::lock_guard guard(entry.plan_mutex);
      built = entry.last_plan;
    }
    if (!built || built->addresses != tensors.addresses || built->workspace != workspace ||
        !(built->scalars == tensors.scalars)) {
      auto fresh = std::make_shared<Entry::BuiltPlan>();
      fresh->addresses = tensors.addresses;
      fresh->workspace = workspace;
      fresh->scalars = tensors.scalars;
      fresh->plan = key.family->plan(entry.config, entry.problem, device,
                                     std::span<const std::uint64_t>(tensors.addresses.data(), tensors.count),
                                     workspace, tensors.scalars);
      driver::encode_tensor_maps(fresh->plan);
      built = std::move(fresh);
      std::lock_guard guard(entry.plan_mutex);
      entry.last_plan = built;
    }
    entry.kernel.run(built->plan, on);
  }

  // What a call with `key` resolves to (loads it if needed).
  template <class MakeProblem>
  DispatchInfo describe(const DispatchKey& key, MakeProblem&& make_problem) {
    driver::make_current(context);
    DispatchInfo info;
    lookup(key, make_problem, &info);
    return info;
  }
};

Runtime::Runtime(RuntimeOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = options;
  impl_->context = driver::primary_context(options.device_ordinal);  // "no CUDA driver/GPU found"
  driver::make_current(impl_->context);
  impl_->device = driver::describe_device(options.device_ordinal);
  impl_->arch = impl_->device.arch();
  impl_->toolchain = {driver::driver_version(), nvrtc_version()};
  impl_->jit = options.jit ? *options.jit : jit_from_environment();
  impl_->database = std::make_unique<cache::Database>(
      options.database.empty() ? cache::Database::default_path() : options.database);
  std::filesystem::path system = options.system_database;
  if (const char* from_environment = std::getenv("TILESMITH_SYSTEM_DB");
      system.empty() && from_environment && *from_environment)
    system = from_environment;
  if (!system.empty()) {
    try {
      impl_->system_database = std::make_unique<cache::Database>(system, cache::Access::read_only);
    } catch (const Error& error) {
      throw Error(std::string("the system database (RuntimeOptions::system_database or "
                              "TILESMITH_SYSTEM_DB): ") + error.what());
    }
  }
}

Runtime::~Runtime() = default;

namespace {
// Whether a stride is not a multiple of 8 elements, so may break the 16-byte alignment of rows
// or batches of 16-bit elements (Family::problem_for_call decides, per dtype, whether the
// problem then needs aligned=0). Part of the in-memory key: it allocates nothing.
bool strides_off_16_bytes(const MatmulArgs& args) {
  std::int64_t all = args.lda | args.ldb | args.ldc | args.ld_residual;
  for (const auto& stride : {args.batch_stride_a, args.batch_stride_b, args.batch_stride_c,
                             args.batch_stride_residual})
    all |= stride.value_or(0);
  return all % 8 != 0;
}

// Whether A's and B's rows are more than an element apart: an operand stored as rows of one
// element runs as one row of its other layout only when they are not (problem_for_call), so a
// packed call and a strided view of the same shape resolve to different problems.
DispatchKey matmul_key(const Family& family, const MatmulArgs& args) {
  const std::int64_t options = static_cast<std::int64_t>(args.a_layout) |
                               static_cast<std::int64_t>(args.b_layout) << 1 |
                               static_cast<std::int64_t>(args.activation) << 2 |
                               std::int64_t{args.bias != nullptr} << 4 |
                               std::int64_t{args.residual != nullptr} << 5 |
                               std::int64_t{strides_off_16_bytes(args)} << 6 |
                               std::int64_t{args.lda > 1} << 7 | std::int64_t{args.ldb > 1} << 8;
  return {&family, args.dtype, args.out_dtype.value_or(args.dtype),
          {args.batch, args.m, args.n, args.k}, options};
}

// The problem of these arguments: options only where they differ from the defaults, so the
// key is the one a sweep (`tune --option ...`) stores.
Problem matmul_problem(const Family& family, const MatmulArgs& args, const CallScalars& scalars) {
  Problem problem;
  problem.op = "matmul";
  problem.dtype = args.dtype;
  problem.out_dtype = args.out_dtype.value_or(args.dtype);
  problem.shape = {args.m, args.n, args.k};
  if (args.batch != 1) problem.shape.insert(problem.shape.begin(), args.batch);
  if (args.a_layout == Layout::column_major) problem.options["a"] = "col";
  if (args.b_layout == Layout::column_major) problem.options["b"] = "col";
  static const char* const activations[] = {"none", "relu", "gelu", "silu"};
  const auto act = static_cast<std::size_t>(args.activation);
  if (act >= 4) throw InvalidArgument("matmul: unknown activation code " + std::to_string(act));
  if (act != 0) problem.options["act"] = activations[act];
  if (args.bias) problem.options["bias"] = "1";
  if (args.residual) problem.options["residual"] = "1";
  return family.problem_for_call(std::move(problem), scalars);
}

// In the family's tensor order: A, B, the epilogue's inputs present, C.
CallTensors matmul_tensors(const MatmulArgs& args) {
  CallTensors tensors;
  tensors.add(args.a, args.lda, args.batch_stride_a);
  tensors.add(args.b, args.ldb, args.batch_stride_b);
  if (args.bias) tensors.add(args.bias);
  if (args.residual) tensors.add(args.residual, args.ld_residual, args.batch_stride_residual);
  tensors.add(args.c, args.ldc, args.batch_stride_c);
  return tensors;
}

// The epilogue's inputs are read element by element: aligned to their element, not 16 bytes.
void require_element_aligned(const void* pointer, std::size_t element, const char* name) {
  if (reinterpret_cast<std::uintptr_t>(pointer) % element)
    throw InvalidArgument(std::string("matmul: ") + name + " is not aligned to its " +
                          std::to_string(element) + "-byte elements");
}
}  // namespace

void Runtime::matmul(const MatmulArgs& args, void* stream) {
  require_pointer(args.a, "A");
  require_pointer(args.b, "B");
  require_pointer(args.c, "C");
  if (args.m <= 0 || args.n <= 0 || args.k <= 0 || args.batch <= 0)
    throw InvalidArgument("matmul: shape " + std::to_string(args.batch) + "x" +
                          std::to_string(args.m) + "x" + std::to_string(args.n) + "x" +
                          std::to_string(args.k) + " (batch x m x n x k) has a non-positive dimension");
  const std::size_t out_bytes = dtype_size(args.out_dtype.value_or(args.dtype));
  if (args.bias) require_element_aligned(args.bias, out_bytes, "bias");
  if (args.residual) require_element_aligned(args.residual, out_bytes, "residual");
  const CallTensors tensors = matmul_tensors(args);
  impl_->call(matmul_key(impl_->matmul_family, args),
              [&] { return matmul_problem(impl_->matmul_family, args, tensors.scalars); }, tensors,
              stream);
}

DispatchInfo Runtime::describe_matmul(const MatmulArgs& args) {
  return impl_->describe(matmul_key(impl_->matmul_family, args), [&] {
    return matmul_problem(impl_->matmul_family, args, matmul_tensors(args).scalars);
  });
}

namespace {
bool is_layernorm(RowOp op) { return op == RowOp::layernorm || op == RowOp::layernorm_act_residual; }
bool is_act_residual(RowOp op) {
  return op == RowOp::layernorm_act_residual || op == RowOp::rmsnorm_act_residual;
}

// What the family's kernel depends on, as one number: the tensors present and the activation.
DispatchKey row_key(const Family& family, const RowArgs& args) {
  const std::int64_t options = std::int64_t{args.weight != nullptr} |
                               std::int64_t{args.bias != nullptr} << 1 |
                               std::int64_t{args.rstd != nullptr} << 2 |
                               static_cast<std::int64_t>(args.activation) << 3;
  return {&family, args.dtype, args.out_dtype.value_or(args.dtype), {args.rows, args.cols, 0, 0},
          options};
}

// The problem of these arguments: options only where they differ from the defaults, so the
// key is the one a sweep (`tune --op layernorm --option ...`) stores.
Problem row_problem(const Family& family, const RowArgs& args) {
  Problem problem{family.name(), args.dtype, args.out_dtype.value_or(args.dtype),
                  {args.rows, args.cols}};
  if (args.op != RowOp::softmax && !args.weight) problem.options["weight"] = "0";
  if (is_layernorm(args.op) && !args.bias) problem.options["bias"] = "0";
  if (args.rstd) problem.options["stats"] = "1";
  static const char* const activations[] = {"none", "relu", "gelu", "silu"};
  if (args.activation != Activation::none)
    problem.options["act"] = activations[static_cast<std::size_t>(args.activation)];
  return problem;
}

struct ElementPointer {
  const void* pointer;
  std::size_t element_bytes;
  const char* name;
};

// Each pointer aligned to its elements (null ones pass: presence is checked elsewhere).
void require_aligned(const Family& family, std::initializer_list<ElementPointer> pointers) {
  for (const ElementPointer& p : pointers)
    if (reinterpret_cast<std::uintptr_t>(p.pointer) % p.element_bytes)
      throw InvalidArgument(family.name() + ": " + p.name + " is not aligned to its " +
                            std::to_string(p.element_bytes) + "-byte elements");
}

// The checks a call's arguments get before any lookup (the family validates the shape on a
// miss): each tensor present where the op takes it and only there, aligned to its elements.
const Family& checked_row_family(const std::array<const Family*, 5>& families,
                                 const RowArgs& args) {
  const auto index = static_cast<std::size_t>(args.op);
  if (index >= families.size())
    throw InvalidArgument("rows: unknown op code " + std::to_string(index));
  const Family& family = *families[index];
  // Messages are built only on the way out: a good call allocates nothing here.
  auto error = [&](const std::string& what) { return InvalidArgument(family.name() + what); };
  auto refuse = [&](bool present, const char* what) {
    if (present) throw error(std::string(" takes no ") + what);
  };
  refuse(args.op == RowOp::softmax && (args.weight || args.bias || args.rstd || args.mean),
         "weight, bias, mean or rstd");
  refuse(!is_layernorm(args.op) && (args.bias || args.mean), "bias or mean");
  refuse(!is_act_residual(args.op) && (args.residual || args.activation != Activation::none),
         "residual or activation (the *_act_residual ops do)");
  if (is_act_residual(args.op) && !args.residual)
    throw error(": residual is a null pointer");
  if (is_layernorm(args.op) && (args.mean == nullptr) != (args.rstd == nullptr))
    throw error(": give mean and rstd together, or neither");
  if (static_cast<std::size_t>(args.activation) >= 4)
    throw error(": unknown activation code " + std::to_string(static_cast<int>(args.activation)));
  if (args.rows <= 0 || args.cols <= 0)
    throw error(": shape " + std::to_string(args.rows) + "x" + std::to_string(args.cols) +
                " has a non-positive dimension");
  for (auto [stride, name] : {std::pair{args.x_stride, "x"}, std::pair{args.y_stride, "y"},
                              std::pair{args.residual_stride, "residual"}})
    if (stride != 0 && stride < args.cols)
      throw error(": the row stride of " + std::string(name) + " (" + std::to_string(stride) +
                  ") is shorter than a row (" + std::to_string(args.cols) + ")");
  const std::size_t in = dtype_size(args.dtype), out = dtype_size(args.out_dtype.value_or(args.dtype));
  require_aligned(family,
                  {{args.x, in, "x"}, {args.y, out, "y"}, {args.weight, in, "weight"},
                   {args.bias, in, "bias"}, {args.residual, out, "residual"},
                   {args.mean, 4, "mean"}, {args.rstd, 4, "rstd"}});
  return family;
}

// The same checks for the backward ops: the tensors each op reads and writes, present where it
// takes them and only there.
const Family& checked_row_backward_family(const std::array<const Family*, 3>& families,
                                          const RowBackwardArgs& args) {
  const auto index = static_cast<std::size_t>(args.op);
  if (index >= families.size())
    throw InvalidArgument("rows_backward: unknown op code " + std::to_string(index));
  const Family& family = *families[index];
  auto error = [&](const std::string& what) { return InvalidArgument(family.name() + what); };
  const bool softmax = args.op == RowBackwardOp::softmax;
  const bool layernorm = args.op == RowBackwardOp::layernorm;
  if (softmax && (args.weight || args.mean || args.rstd || args.dweight || args.dbias))
    throw error(" takes no weight, mean, rstd, dweight or dbias");
  if (!softmax && !args.rstd) throw error(": rstd (the forward's statistics) is a null pointer");
  if (layernorm != (args.mean != nullptr))
    throw error(layernorm ? ": mean (the forward's statistics) is a null pointer" : " takes no mean");
  if (!layernorm && args.dbias) throw error(" takes no dbias");
  if ((args.weight == nullptr) != (args.dweight == nullptr))
    throw error(": give weight and dweight together, or neither");
  if (args.rows <= 0 || args.cols <= 0)
    throw error(": shape " + std::to_string(args.rows) + "x" + std::to_string(args.cols) +
                " has a non-positive dimension");
  for (auto [stride, name] : {std::pair{args.x_stride, softmax ? "y" : "x"},
                              std::pair{args.dy_stride, "dy"}, std::pair{args.dx_stride, "dx"}})
    if (stride != 0 && stride < args.cols)
      throw error(": the row stride of " + std::string(name) + " (" + std::to_string(stride) +
                  ") is shorter than a row (" + std::to_string(args.cols) + ")");
  const std::size_t in = dtype_size(args.dtype), out = dtype_size(args.out_dtype.value_or(args.dtype));
  require_aligned(family, {{args.x, softmax ? out : in, softmax ? "y" : "x"}, {args.dy, out, "dy"},
                           {args.dx, in, "dx"}, {args.weight, in, "weight"},
                           {args.dweight, in, "dweight"}, {args.dbias, in, "dbias"},
                           {args.mean, 4, "mean"}, {args.rstd, 4, "rstd"}});
  return family;
}

DispatchKey row_backward_key(const Family& family, const RowBackwardArgs& args) {
  const std::int64_t options =
      std::int64_t{args.weight != nullptr} | std::int64_t{args.dbias != nullptr} << 1;
  return {&family, args.dtype, args.out_dtype.value_or(args.dtype), {args.rows, args.cols, 0, 0},
          options};
}

Problem row_backward_problem(const Family& family, const RowBackwardArgs& args) {
  Problem problem{family.name(), args.dtype, args.out_dtype.value_or(args.dtype),
                  {args.rows, args.cols}};
  if (args.op != RowBackwardOp::softmax && !args.weight) problem.options["weight"] = "0";
  if (args.op == RowBackwardOp::layernorm && !args.dbias) problem.options["bias"] = "0";
  return problem;
}
}  // namespace

void Runtime::rows(const RowArgs& args, void* stream) {
  const Family& family = checked_row_family(impl_->row_families, args);
  if (!args.x || !args.y) throw InvalidArgument(family.name() + ": x or y is a null pointer");
  // In the family's tensor order: x, weight, bias, residual, y, mean, rstd (those present).
  CallTensors tensors;
  tensors.add(args.x, args.x_stride);
  if (args.weight) tensors.add(args.weight);
  if (args.bias) tensors.add(args.bias);
  if (args.residual) tensors.add(args.residual, args.residual_stride);
  tensors.add(args.y, args.y_stride);
  if (args.mean) tensors.add(args.mean);
  if (args.rstd) tensors.add(args.rstd);
  tensors.scalars.epsilon = args.epsilon;
  impl_->call(row_key(family, args), [&] { return row_problem(family, args); }, tensors, stream);
}

DispatchInfo Runtime::describe_rows(const RowArgs& args) {
  const Family& family = checked_row_family(impl_->row_families, args);
  return impl_->describe(row_key(family, args), [&] { return row_problem(family, args); });
}

void Runtime::rows_backward(const RowBackwardArgs& args, void* stream) {
  const Family& family = checked_row_backward_family(impl_->row_backward_families, args);
  if (!args.x || !args.dy || !args.dx)
    throw InvalidArgument(family.name() + (args.op == RowBackwardOp::softmax
                                               ? ": y, dy or dx is a null pointer"
                                               : ": x, dy or dx is a null pointer"));
  // In the family's tensor order: x (or y), dy, weight, mean, rstd, dx, dweight, dbias.
  CallTensors tensors;
  tensors.add(args.x, args.x_stride);
  tensors.add(args.dy, args.dy_stride);
  if (args.weight) tensors.add(args.weight);
  if (args.mean) tensors.add(args.mean);
  if (args.rstd) tensors.add(args.rstd);
  tensors.add(args.dx, args.dx_stride);
  if (args.dweight) tensors.add(args.dweight);
  if (args.dbias) tensors.add(args.dbias);
  impl_->call(row_backward_key(family, args), [&] { return row_backward_problem(family, args); },
              tensors, stream);
}

DispatchInfo Runtime::describe_rows_backward(const RowBackwardArgs& args) {
  const Family& family = checked_row_backward_family(impl_->row_backward_families, args);
  return impl_->describe(row_backward_key(family, args),
                         [&] { return row_backward_problem(family, args); });
}

namespace {
// The bucket a call is tuned under: COUNT x the mean length rounded up to a power of two.
std::int64_t multi_sum_bucket(const MultiSumArgs& args) {
  const std::int64_t mean_length = (args.total_elements + args.count - 1) / args.count;
  std::int64_t bucket = 1;
  while (bucket < mean_length) bucket *= 2;
  return bucket;
}

void check_multi_sum(const MultiSumArgs& args) {
  if (args.count <= 0 || args.total_elements < 0)
    throw InvalidArgument("multi_sum: count " + std::to_string(args.count) + " and total_elements " +
                          std::to_string(args.total_elements) + " must be positive");
  if (reinterpret_cast<std::uintptr_t>(args.table) % 8 || reinterpret_cast<std::uintptr_t>(args.out) %
                                                              dtype_size(args.out_dtype.value_or(DType::f32)))
    throw InvalidArgument("multi_sum: table (8 bytes) or out is not aligned to its elements");
}

DispatchKey multi_sum_key(const Family& family, const MultiSumArgs& args) {
  return {&family, args.dtype, args.out_dtype.value_or(DType::f32),
          {args.count, multi_sum_bucket(args), 0, 0}, std::int64_t{args.mean}};
}

Problem multi_sum_problem(const MultiSumArgs& args) {
  Problem problem{"multi_sum", args.dtype, args.out_dtype.value_or(DType::f32),
                  {args.count, multi_sum_bucket(args)}};
  if (args.mean) problem.options["mean"] = "1";
  return problem;
}
}  // namespace

void Runtime::multi_sum(const MultiSumArgs& args, void* stream) {
  check_multi_sum(args);
  if (!args.table || !args.out) throw InvalidArgument("multi_sum: table or out is a null pointer");
  // The family's tensor order: table, out, the tuner's data (not used by the plan).
  CallTensors tensors;
  tensors.add(args.table);
  tensors.add(args.out);
  tensors.add(nullptr);
  impl_->call(multi_sum_key(impl_->multi_sum_family, args), [&] { return multi_sum_problem(args); },
              tensors, stream);
}

DispatchInfo Runtime::describe_multi_sum(const MultiSumArgs& args) {
  check_multi_sum(args);
  return impl_->describe(multi_sum_key(impl_->multi_sum_family, args),
                         [&] { return multi_sum_problem(args); });
}

namespace {
std::int64_t kv_heads_of(const AttentionArgs& args) { return args.kv_heads ? args.kv_heads : args.heads; }
std::int64_t seq_k_of(const AttentionArgs& args) { return args.seq_k ? args.seq_k : args.seq_q; }

// `op` names the call in errors; `outputs`, the tensors written, each with its strides: rows
// closer than a head dim would overlap, so one write would land on another's.
void check_attention(const char* op, const AttentionArgs& args,
                     std::initializer_list<std::pair<const AttentionArgs::Strides*, const char*>> more_strides,
                     std::initializer_list<std::pair<const AttentionArgs::Strides*, const char*>> outputs) {
  for (std::int64_t dim : {args.batch, args.heads, kv_heads_of(args), args.seq_q, seq_k_of(args), args.head_dim})
    if (dim <= 0)
      throw InvalidArgument(std::string(op) + ": batch " + std::to_string(args.batch) + ", heads " +
                            std::to_string(args.heads) + ", kv_heads " + std::to_string(args.kv_heads) +
                            ", seq_q " + std::to_string(args.seq_q) + ", seq_k " +
                            std::to_string(args.seq_k) + ", head_dim " + std::to_string(args.head_dim) +
                            ": each must be positive (kv_heads and seq_k may be 0: as heads and seq_q)");
  require_supported_head_dim(op, args.head_dim);
  auto check_strides = [&](const AttentionArgs::Strides& strides) {
    if ((strides.batch | strides.head | strides.row) % 8 || strides.batch < 0 || strides.head < 0 ||
        strides.row < 0)
      throw InvalidArgument(std::string(op) + ": strides must be non-negative multiples of 8 elements (16-byte rows)");
  };
  for (const AttentionArgs::Strides* strides : {&args.q_strides, &args.k_strides, &args.v_strides, &args.o_strides})
    check_strides(*strides);
  for (const auto& [strides, name] : more_strides) check_strides(*strides);
  for (const auto& [strides, name] : outputs)
    if (strides->row && strides->row < args.head_dim)
      throw InvalidArgument(std::string(op) + ": " + name + "'s rows are " + std::to_string(strides->row) +
                            " elements apart, less than the head dim " + std::to_string(args.head_dim));
  if (args.scale && !std::isfinite(*args.scale))
    throw InvalidArgument(std::string(op) + ": the softmax scale is not finite");
}

void check_forward(const AttentionArgs& args) { check_attention("attention", args, {}, {{&args.o_strides, "O"}}); }

void check_backward(const AttentionBackwardArgs& args) {
  check_attention("attention_backward", args.forward, {{&args.do_strides, "dO"}},
                  {{&args.dq_strides, "dQ"}, {&args.dk_strides, "dK"}, {&args.dv_strides, "dV"}});
}

// Each tensor present and on a 16-byte boundary (cp.async and TMA move 16-byte chunks); the
// logsumexp on its 4-byte one.
void require_attention_tensors(const char* op,
                               std::initializer_list<std::pair<const void*, const char*>> tensors,
                               const float* lse, bool lse_required) {
  for (auto [pointer, name] : tensors) {
    if (!pointer) throw InvalidArgument(std::string(op) + ": " + name + " is a null pointer");
    if (reinterpret_cast<std::uintptr_t>(pointer) % 16)
      throw InvalidArgument(std::string(op) + ": " + name + " is not 16-byte aligned");
  }
  if (lse_required && !lse)
    throw InvalidArgument(std::string(op) + ": lse (the forward's logsumexp) is a null pointer");
  if (reinterpret_cast<std::uintptr_t>(lse) % 4)
    throw InvalidArgument(std::string(op) + ": lse is not aligned to its 4-byte elements");
}

DispatchKey attention_key(const Family& family, const AttentionArgs& args) {
  return {&family,
          args.dtype,
          args.dtype,
          {args.batch, args.heads, kv_heads_of(args), args.seq_q, seq_k_of(args), args.head_dim},
          std::int64_t{args.causal} | static_cast<std::int64_t>(args.layout) << 1};
}

// Self-attention shapes are written BxHxSxD, the others BxHQxHKVxSQxSKxD: the key a sweep stores.
Problem attention_problem(const std::string& op, const AttentionArgs& args) {
  Problem problem{op, args.dtype, args.dtype, {}};
  if (kv_heads_of(args) == args.heads && seq_k_of(args) == args.seq_q)
    problem.shape = {args.batch, args.heads, args.seq_q, args.head_dim};
  else
    problem.shape = {args.batch, args.heads, kv_heads_of(args), args.seq_q, seq_k_of(args), args.head_dim};
  if (args.causal) problem.options["causal"] = "1";
  if (args.layout == AttentionLayout::bhsd) problem.options["layout"] = "bhsd";
  return problem;
}

void add_attention_tensor(CallTensors& tensors, const void* pointer, const AttentionArgs::Strides& strides) {
  tensors.add(pointer, strides.row, strides.batch ? std::optional<std::int64_t>(strides.batch) : std::nullopt,
              strides.head);
}

// What both ops' tensor orders start with, Q, K, V and O, and the forward call's scale.
CallTensors attention_tensors(const AttentionArgs& args) {
  CallTensors tensors;
  add_attention_tensor(tensors, args.q, args.q_strides);
  add_attention_tensor(tensors, args.k, args.k_strides);
  add_attention_tensor(tensors, args.v, args.v_strides);
  add_attention_tensor(tensors, args.o, args.o_strides);
  tensors.scalars.softmax_scale = args.scale;
  return tensors;
}
}  // namespace

void Runtime::attention(const AttentionArgs& args, void* stream) {
  check_forward(args);
  require_attention_tensors("attention", {{args.q, "Q"}, {args.k, "K"}, {args.v, "V"}, {args.o, "O"}},
                            args.lse, false);
  // The family's tensor order: Q, K, V, O, the logsumexp.
  CallTensors tensors = attention_tensors(args);
  tensors.add(args.lse);
  impl_->call(attention_key(impl_->attention_family, args),
              [&] { return attention_problem("attention", args); }, tensors, stream);
}

DispatchInfo Runtime::describe_attention(const AttentionArgs& args) {
  check_forward(args);
  return impl_->describe(attention_key(impl_->attention_family, args),
                         [&] { return attention_problem("attention", args); });
}

void Runtime::attention_backward(const AttentionBackwardArgs& args, void* stream) {
  check_backward(args);
  const AttentionArgs& f = args.forward;
  require_attention_tensors("attention_backward",
                            {{f.q, "Q"}, {f.k, "K"}, {f.v, "V"}, {f.o, "O"}, {args.d_o, "dO"},
                             {args.dq, "dQ"}, {args.dk, "dK"}, {args.dv, "dV"}},
                            f.lse, true);
  // The family's tensor order: Q, K, V, O, dO, the logsumexp, dQ, dK, dV.
  CallTensors tensors = attention_tensors(f);
  add_attention_tensor(tensors, args.d_o, args.do_strides);
  tensors.add(f.lse);
  add_attention_tensor(tensors, args.dq, args.dq_strides);
  add_attention_tensor(tensors, args.dk, args.dk_strides);
  add_attention_tensor(tensors, args.dv, args.dv_strides);
  impl_->call(attention_key(impl_->attention_backward_family, f),
              [&] { return attention_problem("attention_backward", f); }, tensors, stream);
}

DispatchInfo Runtime::describe_attention_backward(const AttentionBackwardArgs& args) {
  check_backward(args);
  return impl_->describe(attention_key(impl_->attention_backward_family, args.forward),
                         [&] { return attention_problem("attention_backward", args.forward); });
}

int Runtime::compilations() const { return impl_->compilations.load(); }

}  // namespace tilesmith
