#include <nvrtc.h>

#include <chrono>
#include <regex>
#include <vector>

#include "generator/compiled_kernel.hpp"

namespace tilesmith {
namespace {

std::string describe(const RenderedSource& source, const std::string& arch) {
  return source.describe() + " for " + arch;
}

void check(nvrtcResult result, const char* call, const RenderedSource& source,
           const std::string& arch, const std::string& log = "") {
  if (result == NVRTC_SUCCESS) return;
  std::string message = std::string("NVRTC ") + call + " failed (" + nvrtcGetErrorString(result) +
                        ") compiling " + describe(source, arch);
  if (!log.empty()) message += ":\n" + log;
  throw Error(message);
}

// An NVRTC program that is destroyed on every path.
class Program {
 public:
  Program(const RenderedSource& source, const std::string& arch) : source_(source), arch_(arch) {
    std::vector<const char*> texts, names;
    for (const auto& [name, text] : source.headers) {
      names.push_back(name.c_str());
      texts.push_back(text.c_str());
    }
    check(nvrtcCreateProgram(&program_, source.text.c_str(), source.main_name.c_str(),
                             static_cast<int>(texts.size()), texts.data(), names.data()),
          "nvrtcCreateProgram", source, arch);
    if (source.kernel_expressions.empty())
      throw Error("compiling " + describe(source, arch) + ": no kernel name expression");
    for (const std::string& expression : source.kernel_expressions)
      check(nvrtcAddNameExpression(program_, expression.c_str()), "nvrtcAddNameExpression", source,
            arch);
  }
  ~Program() { nvrtcDestroyProgram(&program_); }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;

  // Returns the log; throws with the log on failure. `extra`: one more option, or null.
  std::string compile(bool verbose_ptxas, const char* extra = nullptr) {
    std::string arch_option = "--gpu-architecture=" + arch_;
    std::vector<const char*> options = {arch_option.c_str(), "-std=c++17", "--use_fast_math"};
    if (verbose_ptxas) options.push_back("-Xptxas=-v");  // registers, smem, spills into the log
    if (extra) options.push_back(extra);
    nvrtcResult result =
        nvrtcCompileProgram(program_, static_cast<int>(options.size()), options.data());
    std::string log = this->log();
    check(result, "nvrtcCompileProgram", source_, arch_, log);
    return log;
  }

  std::string log() {
    std::size_t size = 0;
    if (nvrtcGetProgramLogSize(program_, &size) != NVRTC_SUCCESS || size <= 1) return "";
    std::string text(size, '\0');
    if (nvrtcGetProgramLog(program_, text.data()) != NVRTC_SUCCESS) return "";
    text.resize(text.find('\0'));  // NVRTC 13.0 ends the log with two NULs, not one
    return text;
  }

  nvrtcProgram get() const { return program_; }

 private:
  const RenderedSource& source_;
  std::string arch_;
  nvrtcProgram program_ = nullptr;
};

}  // namespace

std::string nvrtc_version() {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) throw Error("nvrtcVersion failed");
  return std::to_string(major) + "." + std::to_string(minor);
}

ResourceUsage parse_resource_usage(const std::string& log, const std::string& lowered_name) {
  ResourceUsage usage;
  // ptxas reports per function: "Compiling entry function 'NAME'", then "Function properties
  // for NAME", "N bytes stack frame, N bytes spill stores, N bytes spill loads", and
  // "Used N registers, ... N bytes smem".
  std::size_t start = log.find("Compiling entry function '" + lowered_name + "'");
  if (start == std::string::npos) return usage;
  std::size_t end = log.find("Compiling entry function", start + 1);
  std::string section = log.substr(start, end == std::string::npos ? std::string::npos : end - start);
  usage.static_smem_bytes = usage.stack_frame_bytes = 0;  // reported only when non-zero
  usage.spill_store_bytes = usage.spill_load_bytes = 0;
  std::smatch match;
  if (std::regex_search(section, match, std::regex(R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)"))) {
    usage.stack_frame_bytes = std::stoi(match[1]);
    usage.spill_store_bytes = std::stoi(match[2]);
    usage.spill_load_bytes = std::stoi(match[3]);
  }
  if (std::regex_search(section, match, std::regex(R"(Used (\d+) registers)")))
    usage.registers = std::stoi(match[1]);
  if (std::regex_search(section, match, std::regex(R"((\d+) bytes smem)")))
    usage.static_smem_bytes = std::stoi(match[1]);
  return usage;
}

CompiledKernel compile(const RenderedSource& source, const std::string& arch) {
  auto start = std::chrono::steady_clock::now();
  Program program(source, arch);
  CompiledKernel kernel;
  kernel.log = program.compile(/*verbose_ptxas=*/true);
  for (const std::string& expression : source.kernel_expressions) {
    const char* lowered = nullptr;
    check(nvrtcGetLoweredName(program.get(), expression.c_str(), &lowered), "nvrtcGetLoweredName",
          source, arch);
    kernel.lowered_names.push_back(lowered);
  }
  std::size_t size = 0;
  check(nvrtcGetCUBINSize(program.get(), &size), "nvrtcGetCUBINSize", source, arch);
  kernel.cubin.bytes.resize(size);
  check(nvrtcGetCUBIN(program.get(), kernel.cubin.bytes.data()), "nvrtcGetCUBIN", source, arch);
  kernel.source_hash = source.hash;
  kernel.arch = arch;
  kernel.nvrtc_version = nvrtc_version();
  const ResourceUsage reported = parse_resource_usage(kernel.log, kernel.lowered_names.front());
  kernel.resources = read_cubin_resources(kernel.cubin, kernel.lowered_names.front());
  kernel.resources.static_smem_bytes = reported.static_smem_bytes;
  kernel.resources.spill_store_bytes = reported.spill_store_bytes;
  kernel.resources.spill_load_bytes = reported.spill_load_bytes;
  kernel.compile_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return kernel;
}

void check_instantiation(const RenderedSource& source, const std::string& arch) {
  Program program(source, arch);
  program.compile(/*verbose_ptxas=*/false, "--fdevice-syntax-only");
}

std::string compile_to_ptx(const RenderedSource& source, const std::string& arch) {
  // A virtual architecture makes NVRTC stop at PTX: compute_90a for sm_90a.
  std::string virtual_arch = arch;
  if (virtual_arch.rfind("sm_", 0) == 0) virtual_arch.replace(0, 3, "compute_");
  Program program(source, virtual_arch);
  program.compile(/*verbose_ptxas=*/false);
  std::size_t size = 0;
  check(nvrtcGetPTXSize(program.get(), &size), "nvrtcGetPTXSize", source, virtual_arch);
  std::string ptx(size, '\0');
  check(nvrtcGetPTX(program.get(), ptx.data()), "nvrtcGetPTX", source, virtual_arch);
  if (!ptx.empty() && ptx.back() == '\0') ptx.pop_back();
  return ptx;
}

}  // namespace tilesmith
