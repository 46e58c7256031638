// The template sources, embedded at build time by cmake/embed_files.cmake.
#pragma once

#include <cstddef>
#include <string_view>

namespace tilesmith::embedded {

struct File {
  const char* path;  // relative to templates/, e.g. "matmul/matmul.cuh"
  const char* text;
};
extern const File kFiles[];
extern const std::size_t kFileCount;

// The embedded text of `path`; throws Error if it was not embedded.
std::string_view file(std::string_view path);

}  // namespace tilesmith::embedded
