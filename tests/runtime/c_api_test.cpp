// The C ABI as another language uses it: libtilesmith.so loaded with dlopen. Status codes tell
// the caller's mistakes (TILESMITH_INVALID_ARGUMENT) from everything else (TILESMITH_ERROR).
#include <dlfcn.h>

#include <filesystem>
#include <string>

#include "support/test_support.hpp"
#include "tilesmith/tilesmith.h"

namespace tilesmith {
namespace {

class CApi : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::filesystem::path library =
        std::filesystem::read_symlink("/proc/self/exe").parent_path().parent_path() /
        "libtilesmith.so";
    handle_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(handle_, nullptr) << dlerror();
    create_ = reinterpret_cast<decltype(create_)>(dlsym(handle_, "tilesmith_runtime_create"));
    destroy_ = reinterpret_cast<decltype(destroy_)>(dlsym(handle_, "tilesmith_runtime_destroy"));
    matmul_ = reinterpret_cast<decltype(matmul_)>(dlsym(handle_, "tilesmith_matmul"));
    matmul_ex_ = reinterpret_cast<decltype(matmul_ex_)>(dlsym(handle_, "tilesmith_matmul_ex"));
    last_error_ = reinterpret_cast<decltype(last_error_)>(dlsym(handle_, "tilesmith_last_error"));
    ASSERT_TRUE(create_ && destroy_ && matmul_ && matmul_ex_ && last_error_);
  }
  void TearDown() override {
    if (handle_) dlclose(handle_);
  }
  std::string last_error() const { return last_error_(); }

  void* handle_ = nullptr;
  decltype(&tilesmith_runtime_create) create_ = nullptr;
  decltype(&tilesmith_runtime_destroy) destroy_ = nullptr;
  decltype(&tilesmith_matmul) matmul_ = nullptr;
  decltype(&tilesmith_matmul_ex) matmul_ex_ = nullptr;
  decltype(&tilesmith_last_error) last_error_ = nullptr;
};

TEST_F(CApi, CallersMistakesAreInvalidArgumentsEvenWithoutARuntime) {
  alignas(16) static char buffer[64];
  EXPECT_EQ(matmul_(nullptr, buffer, buffer, buffer, 4, 4, 4, 7, TILESMITH_BF16, nullptr),
            TILESMITH_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("unknown dtype code 7"), std::string::npos) << last_error();
  EXPECT_EQ(matmul_(nullptr, buffer, buffer, buffer, 4, 4, 4, TILESMITH_BF16, -1, nullptr),
            TILESMITH_INVALID_ARGUMENT);
  EXPECT_EQ(matmul_(nullptr, buffer, buffer, buffer, 4, 4, 4, TILESMITH_BF16, TILESMITH_BF16,
                    nullptr),
            TILESMITH_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("runtime is NULL"), std::string::npos) << last_error();
  EXPECT_EQ(create_(nullptr, 0, nullptr), TILESMITH_INVALID_ARGUMENT);
}

// The descriptor's codes are checked before anything else, each named in the message.
TEST_F(CApi, ADescriptorsBadCodesAreInvalidArguments) {
  alignas(16) static char buffer[64];
  EXPECT_EQ(matmul_ex_(nullptr, nullptr, nullptr), TILESMITH_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("descriptor is NULL"), std::string::npos) << last_error();
  tilesmith_matmul_desc desc{};
  desc.a = desc.b = buffer;
  desc.c = buffer;
  desc.batch = 1;
  desc.m = desc.n = desc.k = 4;
  desc.dtype = desc.out_dtype = TILESMITH_BF16;
  desc.b_layout = 2;
  EXPECT_EQ(matmul_ex_(nullptr, &desc, nullptr), TILESMITH_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("unknown layout code 2 for B"), std::string::npos) << last_error();
  desc.b_layout = TILESMITH_COLUMN_MAJOR;
  desc.activation = 9;
  EXPECT_EQ(matmul_ex_(nullptr, &desc, nullptr), TILESMITH_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("unknown activation code 9"), std::string::npos) << last_error();
  desc.activation = TILESMITH_ACT_GELU;
  EXPECT_EQ(matmul_ex_(nullptr, &desc, nullptr), TILESMITH_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("runtime is NULL"), std::string::npos) << last_error();
}

TEST_F(CApi, NoGpuIsAnErrorNotAnInvalidArgument) {
  std::string why;
  if (driver::gpu_available(&why))
    GTEST_SKIP() << "a GPU is present: the no-GPU error cannot happen on this machine";
  tilesmith_runtime* runtime = nullptr;
  testing::TempDir dir;
  EXPECT_EQ(create_(dir.file("c.db").c_str(), 0, &runtime), TILESMITH_ERROR);
  EXPECT_EQ(runtime, nullptr);
  EXPECT_NE(last_error().find("no CUDA driver/GPU found"), std::string::npos) << last_error();
}

using GpuCApi = CApi;

TEST_F(GpuCApi, BadArgumentsOfALiveRuntimeAreInvalidArguments) {
  TILESMITH_REQUIRE_GPU();
  testing::TempDir dir;
  tilesmith_runtime* runtime = nullptr;
  ASSERT_EQ(create_(dir.file("c.db").c_str(), 0, &runtime), TILESMITH_OK) << last_error();
  alignas(16) static char host[64];
  EXPECT_EQ(matmul_(runtime, host, host, host, 4, 4, 4, 9, TILESMITH_BF16, nullptr),
            TILESMITH_INVALID_ARGUMENT);
  EXPECT_EQ(matmul_(runtime, host + 2, host, host, 4, 4, 4, TILESMITH_BF16, TILESMITH_BF16,
                    nullptr),
            TILESMITH_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("not 16-byte aligned"), std::string::npos) << last_error();
  EXPECT_EQ(matmul_(runtime, host, host, host, 0, 4, 4, TILESMITH_BF16, TILESMITH_BF16, nullptr),
            TILESMITH_INVALID_ARGUMENT);
  destroy_(runtime);
}

}  // namespace
}  // namespace tilesmith
