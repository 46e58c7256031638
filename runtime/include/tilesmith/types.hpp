// The vocabulary every stage and every user shares: element types and the one error type.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

namespace tilesmith {

enum class DType { f16, bf16, f32 };

std::string_view dtype_name(DType dtype);  // "f16", "bf16", "f32"
DType parse_dtype(std::string_view name);  // "f16"/"fp16"/"half", "bf16", "f32"/"fp32"; throws Error
std::size_t dtype_size(DType dtype);

// Every failure inside tilesmith is an Error whose message names the stage and the context
// (op, shape, config, the NVRTC log or the driver's message).
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An Error in what the caller passed (a shape, a dtype, a pointer, an option): the C ABI returns
// TILESMITH_INVALID_ARGUMENT for it rather than TILESMITH_ERROR.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

}  // namespace tilesmith
