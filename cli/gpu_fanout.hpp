// `tune --gpus`: one sweep spread over several GPUs of this host. Each GPU gets a child
// `tilesmith tune --device N`; the GPUs of one model split their model's space into shards (the
// database keys results by model, so each model is tuned for itself), and every child writes to
// the one database. The children's output comes back line by line, each line led by its GPU.
#pragma once

#include <string>
#include <vector>

namespace tilesmith::cli {

// "all" or a comma-separated list of distinct ordinals below `visible`: the GPUs to tune on,
// in the order given. Throws InvalidArgument naming what is wrong.
std::vector<int> parse_gpu_list(const std::string& text, int visible);

// One child: the GPU it tunes on and its arguments after "tilesmith".
struct GpuChild {
  int ordinal = 0;
  std::vector<std::string> args;
};

// Runs the children at once and waits for them all. SIGINT and SIGTERM reach this process
// alone (each child runs in a process group of its own) and are passed on to every child, which
// stops as a single sweep does. Returns 0 when every child did; else 128 + the signal when
// interrupted; else the first non-zero status.
int run_children(const std::vector<GpuChild>& children);

}  // namespace tilesmith::cli
