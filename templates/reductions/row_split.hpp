// How the row kernels (forward and backward) split a row over threads and CTAs: the config's
// parameters, the rules that prune them and the default pick, shared by both descriptors.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "templates/family.hpp"

namespace tilesmith {

// The largest row slice a thread holds in registers, in elements over all the row arrays it
// keeps (the forward: x; the backward: x and dy): 64 fp32 values next to the addresses and the
// epilogue's operands stay under 128 registers.
constexpr int kMaxRowElementsPerThread = 64;
// Threads one SM holds at once (sm_80 and sm_90): the bound on a persistent grid's CTAs per SM.
constexpr int kThreadsPerSm = 2048;

struct RowSplit {
  // cluster: CTAs sharing a row; exchange: how they send each other their partials
  // (RowExchange: a thread-block cluster, or global memory with every SM taking part).
  int vector_bytes, threads_per_row, rows_per_block, cluster, exchange;
  explicit RowSplit(const Config& config);
  int threads() const { return threads_per_row * rows_per_block; }
  int vec(DType in) const;
  // Vectors each thread holds: the row's vectors (one more for a row not starting on a vector
  // boundary) over the cluster's threads of a row.
  int items(long long cols, DType in) const;
};

// vector_bytes, threads_per_row, rows_per_block, cluster, exchange.
std::vector<ParamSpec> row_split_space();

// Why this split cannot run `rows` x `cols` of `in` on `device` when each thread keeps
// `row_arrays` arrays of its slice in registers; nothing when it can. A global exchange needs a
// persistent grid: the family says whether its config has one.
std::optional<std::string> reject_row_split(const RowSplit& split, long long rows, long long cols,
                                            DType in, int row_arrays, const DeviceTarget& device);

// 16-byte vectors, the fewest threads per row that hold it in at most 16 (then all allowed)
// elements per array, 128 threads per CTA for short rows, CTAs sharing a row only where one CTA
// cannot hold it (a cluster first, then a global exchange: no cluster on this GPU). `extras` hold the family's other parameters in order of preference: the first
// that leaves a config `rejected` (the family's rule) accepts is used.
Config default_row_split(const std::vector<Config>& extras, long long cols, DType in, int row_arrays,
                         const std::function<bool(const Config&)>& rejected);

// Workspace bytes of the boards a global exchange needs (row_board_bytes per group of CTAs
// sharing rows), for the most groups a persistent grid of this split holds on `device`; 0 for
// an exchange through a cluster.
std::size_t row_boards_bytes(const RowSplit& split, long long rows, const DeviceTarget& device);

// Shape checks common to every row op: ROWSxCOLS, each at least 1, at most `max_cols` columns.
void validate_row_shape(const std::string& op, const Problem& problem, long long max_cols);

}  // namespace tilesmith
