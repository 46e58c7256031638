#include "templates/reductions/row_split.hpp"

#include <algorithm>

#include "templates/reductions/row_norm_params.h"

namespace tilesmith {

RowSplit::RowSplit(const Config& config)
    : vector_bytes(config.at("vector_bytes")),
      threads_per_row(config.at("threads_per_row")),
      rows_per_block(config.at("rows_per_block")),
      cluster(config.at("cluster")),
      // Configs stored before the parameter existed exchanged through clusters.
      exchange(config.values.count("exchange") ? config.at("exchange") : kRowExchangeCluster) {}

int RowSplit::vec(DType in) const {
  return std::max(1, vector_bytes / static_cast<int>(dtype_size(in)));
}

int RowSplit::items(long long cols, DType in) const {
  const long long vectors = (cols + vec(in) - 1) / vec(in);
  const long long holders = static_cast<long long>(cluster) * threads_per_row;
  return static_cast<int>((vectors + holders - 1) / holders);
}

std::vector<ParamSpec> row_split_space() {
  return {{"vector_bytes", {4, 8, 16}},
          {"threads_per_row", {4, 8, 16, 32, 64, 128, 256, 512, 1024}},
          {"rows_per_block", {1, 2, 4, 8, 16}},
          {"cluster", {1, 2, 4, 8, 16}},
          {"exchange", {kRowExchangeCluster, kRowExchangeGlobal}}};
}

std::optional<std::string> reject_row_split(const RowSplit& c, long long rows, long long cols,
                                            DType in, int row_arrays, const DeviceTarget& device) {
  auto power_of_two = [](int v) { return v > 0 && (v & (v - 1)) == 0; };
  if (!power_of_two(c.vector_bytes) || c.vector_bytes > 16) return "vector_bytes must be 4, 8 or 16";
  if (c.vector_bytes < static_cast<int>(dtype_size(in))) return "a vector holds at least one element";
  if (!power_of_two(c.threads_per_row) || !power_of_two(c.rows_per_block) || !power_of_two(c.cluster))
    return "threads_per_row, rows_per_block and cluster are powers of two";
  if (c.threads() < 32 || c.threads() > std::min(1024, device.max_threads_per_block))
    return "a CTA of " + std::to_string(c.threads()) + " threads (32 to 1024)";
  if (c.exchange != kRowExchangeCluster && c.exchange != kRowExchangeGlobal)
    return "exchange is 0 (a cluster) or 1 (global memory)";
  if (c.exchange == kRowExchangeGlobal && c.cluster == 1)
    return "a global exchange is for CTAs sharing a row (cluster > 1)";
  if (c.cluster > 1) {
    if (c.exchange == kRowExchangeCluster && device.cc_major < 9) return "clusters need sm_90";
    if (c.cluster > 16) return "at most 16 CTAs share a row";
    if (c.rows_per_block != 1) return "a cluster shares one row per CTA";
    // Below ~2K elements per CTA the exchange through distributed shared memory costs more
    // than the CTA's share of the row.
    if (cols / c.cluster < 2048) return "fewer than 2048 elements of the row per CTA";
  }
  const int vec = c.vec(in);
  const int elements = c.items(cols, in) * vec;
  const int per_array = kMaxRowElementsPerThread / row_arrays;
  if (elements > per_array)
    return "each thread would hold " + std::to_string(elements) + " elements of the row (" +
           std::to_string(per_array) + " fit in registers)";
  // The row slices, the epilogue's operands of one vector and ~40 of addresses and indices
  // within what __launch_bounds__ leaves each thread, or ptxas spills. A second array costs one
  // more register per vector held besides its elements (the backward's column-sum slots and
  // weight loads: 32 fp32 vectors of one element each, estimated at 106 without it, spilled at
  // a cap of 128).
  const int register_cap = std::min(255, device.regs_per_block / c.threads());
  const int needed = row_arrays * elements + 2 * vec + (row_arrays - 1) * c.items(cols, in) + 40;
  if (needed > register_cap)
    return "each thread would need about " + std::to_string(needed) + " registers; " +
           std::to_string(register_cap) + " available to " + std::to_string(c.threads()) + " threads";
  // Idle threads: more than half of a row's threads holding nothing is waste another config
  // avoids (a warp per row is always allowed: the shortest rows need it).
  const long long vectors = (cols + vec - 1) / vec;
  if (c.threads_per_row > 32 && vectors * 2 <= static_cast<long long>(c.cluster) * c.threads_per_row)
    return "more than half of the row's threads would hold nothing";
  if (c.rows_per_block > 1 && c.rows_per_block >= 2 * rows)
    return "more than half of the CTA's rows would be past the last";
  return std::nullopt;
}

Config default_row_split(const std::vector<Config>& extras, long long cols, DType in, int row_arrays,
                         const std::function<bool(const Config&)>& rejected) {
  for (int exchange : {kRowExchangeCluster, kRowExchangeGlobal})
  for (const Config& extra : extras)
    for (int limit : {16, kMaxRowElementsPerThread / row_arrays})
      for (int vector_bytes : {16, 8, 4})
        for (int cluster : {1, 2, 4, 8, 16})
          for (int threads : {32, 64, 128, 256, 512, 1024}) {
            Config config = extra;
            config.values["vector_bytes"] = vector_bytes;
            config.values["threads_per_row"] = threads;
            config.values["rows_per_block"] = std::max(1, 128 / threads);
            config.values["cluster"] = cluster;
            config.values["exchange"] = exchange;
            while (config.values["rows_per_block"] > 1 && rejected(config))
              config.values["rows_per_block"] /= 2;
            const RowSplit c(config);
            if (!rejected(config) && c.items(cols, in) * c.vec(in) <= limit) return config;
          }
  // Nothing fits: the family's reject() says why when this config is used.
  Config fallback = extras.back();
  for (const ParamSpec& param : row_split_space()) fallback.values[param.name] = param.values.front();
  return fallback;
}

std::size_t row_boards_bytes(const RowSplit& split, long long rows, const DeviceTarget& device) {
  if (split.exchange != kRowExchangeGlobal) return 0;
  const long long resident = static_cast<long long>(std::max(device.sm_count, 1)) *
                             std::max(1, kThreadsPerSm / split.threads()) / split.cluster;
  const long long groups = std::min((rows + split.rows_per_block - 1) / split.rows_per_block, resident);
  return static_cast<std::size_t>(std::max(groups, 1ll) * row_board_bytes(split.cluster));
}

void validate_row_shape(const std::string& op, const Problem& problem, long long max_cols) {
  if (problem.shape.size() != 2)
    throw InvalidArgument(op + ": shape " + quote_input(problem.shape_text()) + " must be ROWSxCOLS");
  const long long rows = problem.shape[0], cols = problem.shape[1];
  if (rows < 1 || cols < 1 || rows >= (1ll << 40) || rows * cols >= (1ll << 40))
    throw InvalidArgument(op + ": shape " + quote_input(problem.shape_text()) +
                          " needs 1 <= rows, 1 <= cols and rows x cols < 2^40");
  if (cols > max_cols)
    throw InvalidArgument(op + ": rows of " + std::to_string(cols) + " columns are longer than the " +
                          std::to_string(max_cols) + " that fit on chip");
}

}  // namespace tilesmith
