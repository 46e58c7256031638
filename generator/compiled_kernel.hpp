// Stage 2 of the flow: a rendered source compiled by NVRTC for one exact architecture.
#pragma once

#include <string>
#include <vector>

#include "generator/rendered_source.hpp"

namespace tilesmith {

struct ResourceUsage {
  int registers = -1;  // -1: not reported
  int static_smem_bytes = 0;
  int stack_frame_bytes = 0;
  int spill_store_bytes = 0;
  int spill_load_bytes = 0;
};

struct Cubin {
  std::vector<char> bytes;
};

struct CompiledKernel {
  std::string source_hash;    // RenderedSource::hash
  std::string arch;           // "sm_90a"
  std::string nvrtc_version;  // "13.0"
  std::string lowered_name;   // mangled kernel symbol in the cubin
  Cubin cubin;
  ResourceUsage resources;
  std::string log;  // NVRTC/ptxas log
  double compile_seconds = 0;
};

// Compiles `source` with NVRTC for `arch`. Throws Error carrying the family, config, arch and
// the full NVRTC log when compilation fails.
CompiledKernel compile(const RenderedSource& source, const std::string& arch);

// PTX for `source` (for `tilesmith source --emit ptx`).
std::string compile_to_ptx(const RenderedSource& source, const std::string& arch);

std::string nvrtc_version();  // "13.0"

// Parses ptxas' verbose report (as NVRTC returns it in the log) for the named kernel.
ResourceUsage parse_resource_usage(const std::string& log, const std::string& lowered_name);

}  // namespace tilesmith
