#include "tuner/compile_pool.hpp"

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <system_error>
#include <thread>

#include "tuner/interrupt.hpp"

namespace tilesmith::tuner {
namespace {

using nlohmann::json;

Message compile_request(const CompileJob& job) {
  const RenderedSource& s = job.source;
  return Message{{{"family", s.family},
                  {"config", s.config.text()},
                  {"main_name", s.main_name},
                  {"text", s.text},
                  {"headers", s.headers},
                  {"kernel_expressions", s.kernel_expressions},
                  {"hash", s.hash},
                  {"arch", job.arch}},
                 ""};
}

RenderedSource source_from_request(const json& h) {
  RenderedSource s;
  s.family = h.at("family");
  s.config = Config::parse(h.at("config"));
  s.main_name = h.at("main_name");
  s.text = h.at("text");
  s.headers = h.at("headers").get<std::map<std::string, std::string>>();
  s.kernel_expressions = h.at("kernel_expressions").get<std::vector<std::string>>();
  s.hash = h.at("hash");
  return s;
}

Message compile_reply(const CompiledKernel& k) {
  return Message{{{"ok", true},
                  {"source_hash", k.source_hash},
                  {"arch", k.arch},
                  {"nvrtc_version", k.nvrtc_version},
                  {"lowered_names", k.lowered_names},
                  {"log", k.log},
                  {"registers", k.resources.registers},
                  {"static_smem_bytes", k.resources.static_smem_bytes},
                  {"stack_frame_bytes", k.resources.stack_frame_bytes},
                  {"spill_store_bytes", k.resources.spill_store_bytes},
                  {"spill_load_bytes", k.resources.spill_load_bytes},
                  {"compile_seconds", k.compile_seconds}},
                 std::string(k.cubin.bytes.begin(), k.cubin.bytes.end())};
}

CompiledKernel kernel_from_reply(const Message& m) {
  const json& h = m.header;
  CompiledKernel k;
  k.source_hash = h.at("source_hash");
  k.arch = h.at("arch");
  k.nvrtc_version = h.at("nvrtc_version");
  k.lowered_names = h.at("lowered_names").get<std::vector<std::string>>();
  k.log = h.at("log");
  k.resources.registers = h.at("registers");
  k.resources.static_smem_bytes = h.at("static_smem_bytes");
  k.resources.stack_frame_bytes = h.at("stack_frame_bytes");
  k.resources.spill_store_bytes = h.at("spill_store_bytes");
  k.resources.spill_load_bytes = h.at("spill_load_bytes");
  k.compile_seconds = h.at("compile_seconds");
  k.cubin.bytes.assign(m.payload.begin(), m.payload.end());
  return k;
}

}  // namespace

int default_compile_processes() {
  return std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, 16);
}

CompilePool::CompilePool(int processes) {
  if (processes <= 0) processes = default_compile_processes();
  try {
    for (int i = 0; i < processes; ++i) threads_.emplace_back([this] { serve(); });
  } catch (const std::system_error& error) {
    // A destroyed joinable thread would terminate the program: stop the ones that started.
    const std::size_t started = threads_.size();
    stop_and_join();
    throw Error("cannot start compile job " + std::to_string(started + 1) + " of " +
                std::to_string(processes) + ": " + error.what());
  }
}

CompilePool::~CompilePool() { stop_and_join(); }

void CompilePool::stop_and_join() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (std::thread& thread : threads_) thread.join();
  threads_.clear();
}

void CompilePool::submit(CompileJob job) {
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back(std::move(job));
    ++in_flight_;
  }
  work_ready_.notify_one();
}

std::size_t CompilePool::pending() const {
  std::lock_guard lock(mutex_);
  return in_flight_;
}

CompileOutcome CompilePool::next() {
  std::unique_lock lock(mutex_);
  if (in_flight_ == 0) throw Error("CompilePool::next with nothing submitted");
  // A signal cannot notify a condition variable: look for one every 50 ms.
  while (!result_ready_.wait_for(lock, std::chrono::milliseconds(50),
                                 [this] { return !results_.empty(); }))
    throw_if_interrupted();
  CompileOutcome outcome = std::move(results_.front());
  results_.pop_front();
  --in_flight_;
  return outcome;
}

void CompilePool::serve() {
  std::unique_ptr<WorkerProcess> worker;
  for (;;) {
    CompileJob job;
    {
      std::unique_lock lock(mutex_);
      work_ready_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      if (stopping_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    CompileOutcome outcome;
    outcome.id = job.id;
    try {
      if (!worker) worker = std::make_unique<WorkerProcess>("compile", "-");
      worker->send(compile_request(job));
      std::optional<Message> reply = worker->receive(/*timeout_s=*/600);
      if (!reply) {
        outcome.error = "the compile worker died (" + worker->exit_description() + ") compiling " +
                        job.source.describe();
        worker.reset();
      } else if (!reply->header.at("ok").get<bool>()) {
        outcome.error = reply->header.at("error");
      } else {
        outcome.kernel = kernel_from_reply(*reply);
      }
    } catch (const Interrupted&) {
      return;  // not a compile failure: the sweep is stopping and will not record this job
    } catch (const std::exception& error) {
      outcome.error = error.what();
      worker.reset();
    }
    {
      std::lock_guard lock(mutex_);
      results_.push_back(std::move(outcome));
    }
    result_ready_.notify_one();
  }
}

int compile_worker_main(const WorkerArgs& args) {
  while (std::optional<Message> request = read_message(args.in_fd)) {
    Message reply;
    try {
      reply = compile_reply(compile(source_from_request(request->header),
                                    request->header.at("arch").get<std::string>()));
    } catch (const std::exception& error) {
      reply = Message{{{"ok", false}, {"error", error.what()}}, ""};
    }
    write_message(args.out_fd, reply);
  }
  return 0;
}

}  // namespace tilesmith::tuner
