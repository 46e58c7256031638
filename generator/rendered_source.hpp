// Stage 1 of the flow: a family, a config and a problem rendered into one translation unit.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "templates/family.hpp"

namespace tilesmith {

struct RenderedSource {
  std::string family;
  Config config;
  std::string main_name;                       // file name NVRTC reports in its log
  std::string text;                            // the translation unit
  std::map<std::string, std::string> headers;  // embedded headers, by include name
  // NVRTC name expressions of the kernels, in the order the launch plan numbers them.
  std::vector<std::string> kernel_expressions;
  // Identity of the code NVRTC compiles: configs that render the same kernels share it.
  std::string hash;
  // What `hash` was until 2026-11 (the config comment included): older databases store their
  // cubins under it (Database::cubin looks there too).
  std::string hash_with_config;

  // "matmul kernel tilesmith::matmul_kernel<...>": for messages.
  std::string describe() const;
};

// Renders the candidate kernel for `config`. Deterministic.
RenderedSource render(const Family& family, const Config& config, const Problem& problem);
// Renders the family's reference kernel for `problem` (verification only).
RenderedSource render_reference(const Family& family, const Problem& problem);

// Hash of everything a family's kernels are built from: results are stored under it, so a
// changed template never silently reuses old results.
std::string template_hash(const Family& family);

// 128-bit FNV-1a of `text`, as 32 hex digits.
std::string content_hash(const std::string& text);

}  // namespace tilesmith
