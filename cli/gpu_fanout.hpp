// `tune --gpus`: one sweep spread over several GPUs of this host. Each GPU gets a child
// `tilesmith tune --device N`; the GPUs of one model split their model's space into shards (the
// database keys results by model, so each model is tuned for itself), and every child writes to
// the one database. The children's output comes back line by line, each line led by its GPU.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace tilesmith::cli {

// "all" or a comma-separated list of distinct ordinals below `visible`: the GPUs to tune on,
// in the order given. Throws InvalidArgument naming what is wrong.
std::vector<int> parse_gpu_list(const std::string& text, int visible);

// One child: the GPU it tunes on, its model, its shard of that model's space (shard/shards;
// 0/1: the whole space), its compile jobs, and its arguments after "tilesmith".
struct GpuChild {
  int ordinal = 0;
  std::string model;
  int shard = 0, shards = 1, jobs = 1;
  std::vector<std::string> args;
};

// A GPU to tune on, and the model key the database files its results under.
struct GpuOnHost {
  int ordinal = 0;
  std::string model;
};

// What the whole command asks for that the GPUs share: its own shard of the space (a host's
// part of a sweep over hosts), its compile jobs, and a budget in candidates or in seconds.
struct SharedSweep {
  int shard_index = 0, shard_count = 1;
  int compile_jobs = 1;
  std::optional<int> max_candidates;
  std::string seconds_budget;  // as written ("30s"); empty: none
};

// The children of `tune --gpus`: `tune`, the command's other arguments (`passed`), then each
// GPU's own --device, --jobs, --shard and --budget. The G GPUs of a model take shards
// i + N*j of N*G (i/N: the command's shard), so they split that model's space and nothing
// else; the compile jobs are split evenly; a budget in candidates is split within each model
// (a GPU whose share is 0 gets no child), one in seconds applies to each.
std::vector<GpuChild> split_over_gpus(const std::vector<GpuOnHost>& gpus,
                                      const std::vector<std::string>& passed,
                                      const SharedSweep& shared);

// Runs the children at once and waits for them all. SIGINT and SIGTERM reach this process
// alone (each child runs in a process group of its own) and are passed on to every child, which
// stops as a single sweep does. Returns 0 when every child did; else 128 + the signal when
// interrupted; else the first non-zero status.
int run_children(const std::vector<GpuChild>& children);

}  // namespace tilesmith::cli
