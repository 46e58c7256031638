// The C ABI over tilesmith::Runtime: exceptions stop here and become a status and a message.
#include <cstring>
#include <string>

#include "tilesmith/runtime.hpp"
#include "tilesmith/tilesmith.h"

struct tilesmith_runtime {
  tilesmith::Runtime runtime;
};

namespace {

thread_local std::string last_error;

template <class Body>
int guarded(Body&& body) {
  try {
    body();
    last_error.clear();
    return TILESMITH_OK;
  } catch (const tilesmith::InvalidArgument& error) {
    last_error = error.what();
    return TILESMITH_INVALID_ARGUMENT;
  } catch (const std::exception& error) {
    last_error = error.what();
    return TILESMITH_ERROR;
  }
}

tilesmith::DType to_dtype(int dtype) {
  switch (dtype) {
    case TILESMITH_F16: return tilesmith::DType::f16;
    case TILESMITH_BF16: return tilesmith::DType::bf16;
    case TILESMITH_F32: return tilesmith::DType::f32;
  }
  throw tilesmith::InvalidArgument("unknown dtype code " + std::to_string(dtype) +
                                  " (TILESMITH_F16, TILESMITH_BF16 or TILESMITH_F32)");
}

}  // namespace

extern "C" {

int tilesmith_runtime_create(const char* database_path, int device_ordinal, tilesmith_runtime** out) {
  if (!out) {
    last_error = "tilesmith_runtime_create: out is NULL";
    return TILESMITH_INVALID_ARGUMENT;
  }
  *out = nullptr;
  return guarded([&] {
    tilesmith::RuntimeOptions options;
    if (database_path) options.database = database_path;
    options.device_ordinal = device_ordinal;
    *out = new tilesmith_runtime{tilesmith::Runtime(options)};
  });
}

void tilesmith_runtime_destroy(tilesmith_runtime* runtime) { delete runtime; }

int tilesmith_matmul(tilesmith_runtime* runtime, const void* a, const void* b, void* c, int64_t m,
                     int64_t n, int64_t k, int dtype, int out_dtype, void* stream) {
  return guarded([&] {
    const tilesmith::MatmulArgs args{a, b, c, m, n, k, to_dtype(dtype), to_dtype(out_dtype)};
    if (!runtime) throw tilesmith::InvalidArgument("tilesmith_matmul: runtime is NULL");
    runtime->runtime.matmul(args, stream);
  });
}

int tilesmith_matmul_config(tilesmith_runtime* runtime, int64_t m, int64_t n, int64_t k, int dtype,
                            int out_dtype, char* config, int config_capacity, int* tuned) {
  return guarded([&] {
    const tilesmith::MatmulArgs args{nullptr, nullptr, nullptr, m,
                                     n,       k,       to_dtype(dtype), to_dtype(out_dtype)};
    if (!runtime || !config || config_capacity <= 0)
      throw tilesmith::InvalidArgument("tilesmith_matmul_config: NULL runtime or config buffer");
    tilesmith::DispatchInfo info = runtime->runtime.describe_matmul(args);
    std::snprintf(config, static_cast<std::size_t>(config_capacity), "%s", info.config.c_str());
    if (tuned) *tuned = info.tuned ? 1 : 0;
  });
}

const char* tilesmith_last_error(void) { return last_error.c_str(); }

}  // extern "C"
