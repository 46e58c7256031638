// Shared test helpers: GPU tests skip cleanly (saying why) without a GPU; expected errors;
// temp databases.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>

#include "driver/cuda_driver.hpp"
#include "tilesmith/types.hpp"

namespace tilesmith::testing {

// GPU tests begin with this: skipped, with the driver's reason, when no GPU is present.
#define TILESMITH_REQUIRE_GPU()                                         \
  do {                                                                  \
    std::string why_no_gpu;                                             \
    if (!::tilesmith::driver::gpu_available(&why_no_gpu))               \
      GTEST_SKIP() << "GPU test skipped: " << why_no_gpu;               \
  } while (0)

// `call` must throw InvalidArgument whose message contains `message`.
template <class Call>
void expect_invalid_argument(Call&& call, const std::string& message) {
  try {
    call();
    ADD_FAILURE() << "accepted; expected an error saying: " << message;
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find(message), std::string::npos) << error.what();
  }
}

// A fresh directory removed when the test ends.
class TempDir {
 public:
  TempDir() {
    std::random_device seed;
    path_ = std::filesystem::temp_directory_path() /
            ("tilesmith-test-" + std::to_string(seed()) + std::to_string(seed()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path file(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

}  // namespace tilesmith::testing
