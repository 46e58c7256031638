// Stage 2 of the flow: a rendered source compiled by NVRTC for one exact architecture.
#pragma once

#include <string>
#include <vector>

#include "generator/rendered_source.hpp"

namespace tilesmith {

// -1 in any field: not known. Registers and the stack frame come from the cubin's ELF
// attributes and are known for every compiled kernel; shared memory and spills come from ptxas'
// -v report in the log, which NVRTC omits when it answers from its cache.
struct ResourceUsage {
  int registers = -1;
  int static_smem_bytes = -1;
  int stack_frame_bytes = -1;
  int spill_store_bytes = -1;
  int spill_load_bytes = -1;

  // Spilled registers live in the stack frame, so without ptxas' report a frame is the sign.
  bool spills() const {
    if (spill_store_bytes >= 0) return spill_store_bytes > 0 || spill_load_bytes > 0;
    return stack_frame_bytes > 0;
  }
};

struct Cubin {
  std::vector<char> bytes;
};

struct CompiledKernel {
  std::string source_hash;    // RenderedSource::hash
  std::string arch;           // "sm_90a"
  std::string nvrtc_version;  // "13.0"
  // Mangled symbols in the cubin, one per RenderedSource::kernel_expressions entry.
  std::vector<std::string> lowered_names;
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

// Instantiates `source`'s kernels in NVRTC's front end only (--fdevice-syntax-only): their
// static_asserts and template errors, without code generation, in a fraction of a compile's
// time. Throws Error with the log where one fails.
void check_instantiation(const RenderedSource& source, const std::string& arch);

std::string nvrtc_version();  // "13.0"

// Registers, shared memory and spills of a compiled config are those of its first kernel (the
// main one; others are small copies and reductions).
// Parses ptxas' verbose report (as NVRTC returns it in the log) for the named kernel; every
// field stays -1 when the log has no report for it.
ResourceUsage parse_resource_usage(const std::string& log, const std::string& lowered_name);

// Registers and stack frame of the named kernel from the cubin's .nv.info attributes (the other
// fields stay -1). Throws Error when the cubin is not an ELF file or lacks the kernel.
ResourceUsage read_cubin_resources(const Cubin& cubin, const std::string& lowered_name);

}  // namespace tilesmith
