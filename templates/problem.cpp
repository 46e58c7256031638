#include "templates/problem.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <sstream>

#include "templates/embedded_files.hpp"

namespace tilesmith {

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::f32: return "f32";
  }
  return "?";
}

DType parse_dtype(std::string_view name) {
  if (name == "f16" || name == "fp16" || name == "half" || name == "float16") return DType::f16;
  if (name == "bf16" || name == "bfloat16") return DType::bf16;
  if (name == "f32" || name == "fp32" || name == "float" || name == "float32") return DType::f32;
  throw InvalidArgument("unknown dtype " + quote_input(name) + " (expected f16, bf16 or f32)");
}

std::size_t dtype_size(DType dtype) { return dtype == DType::f32 ? 4 : 2; }

int element_kind(DType dtype) {
  switch (dtype) {
    case DType::f16: return 0;
    case DType::bf16: return 1;
    case DType::f32: return 2;
  }
  return -1;
}

std::string Problem::shape_text() const {
  std::string text;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) text += 'x';
    text += std::to_string(shape[i]);
  }
  return text;
}

std::string Problem::options_text() const {
  std::string text;
  for (const auto& [name, value] : options) text += (text.empty() ? "" : ",") + name + "=" + value;
  return text;
}

std::string Problem::option(std::string_view name, std::string_view fallback) const {
  auto it = options.find(name);
  return it == options.end() ? std::string(fallback) : it->second;
}

std::string Problem::key() const {
  std::string key = op + " " + std::string(dtype_name(dtype)) + "->" +
                    std::string(dtype_name(out_dtype)) + " " + shape_text();
  if (!options.empty()) key += " [" + options_text() + "]";
  return key;
}

ProblemOptions parse_options(const std::string& text) {
  auto is_word = [](std::string_view word) {
    return !word.empty() && std::all_of(word.begin(), word.end(), [](unsigned char c) {
      return std::isalnum(c) || c == '_' || c == '-' || c == '.';
    });
  };
  ProblemOptions options;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    const std::size_t eq = item.find('=');
    if (eq == std::string::npos || !is_word(std::string_view(item).substr(0, eq)) ||
        !is_word(std::string_view(item).substr(eq + 1)))
      throw InvalidArgument("bad option " + quote_input(item) + " in " + quote_input(text) +
                            ": expected name=value");
    if (!options.emplace(item.substr(0, eq), item.substr(eq + 1)).second)
      throw InvalidArgument("option " + quote_input(item.substr(0, eq)) + " is given twice");
  }
  return options;
}

std::string quote_input(std::string_view text) {
  constexpr std::size_t kShown = 40;
  std::string quote(1, '\'');
  quote.append(text.substr(0, kShown));
  if (text.size() <= kShown) return quote.append(1, '\'');
  return quote.append("...' (").append(std::to_string(text.size())).append(" characters)");
}

std::vector<std::int64_t> parse_shape(const std::string& text) {
  std::vector<std::int64_t> dims;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find_first_of("xX,", start);
    if (end == std::string::npos) end = text.size();
    std::int64_t value = 0;
    auto [ptr, ec] = std::from_chars(text.data() + start, text.data() + end, value);
    if (ec != std::errc() || ptr != text.data() + end || end == start)
      throw InvalidArgument("bad shape " + quote_input(text) +
                            ": expected positive integers joined by 'x', e.g. 4096x4096x4096");
    if (value <= 0)
      throw InvalidArgument("bad shape " + quote_input(text) + ": every dimension must be positive");
    dims.push_back(value);
    start = end + 1;
  }
  return dims;
}

int Config::at(std::string_view name) const {
  auto it = values.find(name);
  if (it == values.end())
    throw Error("config '" + text() + "' has no parameter '" + std::string(name) + "'");
  return it->second;
}

std::string Config::text() const {
  std::string out;
  for (const auto& [name, value] : values) {
    if (!out.empty()) out += ',';
    out += name + "=" + std::to_string(value);
  }
  return out;
}

Config Config::parse(const std::string& text) {
  Config config;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    if (item.empty()) continue;
    auto eq = item.find('=');
    int value = 0;
    std::from_chars_result parsed{};
    if (eq != std::string::npos)
      parsed = std::from_chars(item.data() + eq + 1, item.data() + item.size(), value);
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size() ||
        parsed.ec != std::errc() || parsed.ptr != item.data() + item.size())
      throw InvalidArgument("bad config item " + quote_input(item) + " in " + quote_input(text) +
                            ": expected name=integer");
    if (!config.values.emplace(item.substr(0, eq), value).second)
      throw InvalidArgument("config " + quote_input(text) + " sets " + quote_input(item.substr(0, eq)) +
                            " twice");
  }
  return config;
}

std::string DeviceTarget::arch() const {
  std::string arch = "sm_" + std::to_string(cc_major) + std::to_string(cc_minor);
  // wgmma and setmaxnreg exist only in the arch-specific sm_90a target.
  if (cc_major == 9 && cc_minor == 0) arch += "a";
  return arch;
}

std::string DeviceTarget::model_key() const {
  return name + " | sm_" + std::to_string(cc_major) + std::to_string(cc_minor) + " | " +
         std::to_string(sm_count) + " SMs";
}

DeviceTarget DeviceTarget::assumed_for_arch(const std::string& arch) {
  // "sm_" + major digits + one minor digit + an optional feature suffix: sm_80, sm_90a, sm_100a.
  std::string digits = arch.rfind("sm_", 0) == 0 ? arch.substr(3) : "";
  while (!digits.empty() && std::isalpha(static_cast<unsigned char>(digits.back()))) digits.pop_back();
  int major = 0, minor = 0;
  if (digits.size() < 2 ||
      std::from_chars(digits.data(), digits.data() + digits.size() - 1, major).ptr !=
          digits.data() + digits.size() - 1 ||
      std::from_chars(digits.data() + digits.size() - 1, digits.data() + digits.size(), minor).ec !=
          std::errc())
    throw InvalidArgument("bad architecture " + quote_input(arch) +
                          ": expected sm_XY or sm_XYa, e.g. sm_80 or sm_90a");
  DeviceTarget target;
  target.name = "assumed " + arch;
  target.cc_major = major;
  target.cc_minor = minor;
  // Per-block opt-in shared memory limits from the CUDA programming guide's table.
  if (major == 9) {
    target.max_smem_per_block_optin = 227 * 1024;
    target.sm_count = 132;
    target.l2_bytes = 50 << 20;
  } else if (major == 8 && minor == 0) {
    target.max_smem_per_block_optin = 163 * 1024;
    target.sm_count = 108;
    target.l2_bytes = 40 << 20;
  } else if (major == 8 || major == 12) {
    target.max_smem_per_block_optin = 99 * 1024;
    target.sm_count = 84;
    target.l2_bytes = 6 << 20;
  } else if (major == 10) {
    target.max_smem_per_block_optin = 227 * 1024;
    target.sm_count = 148;
    target.l2_bytes = 126 << 20;
  } else {
    target.max_smem_per_block_optin = 64 * 1024;
    target.sm_count = 40;
    target.l2_bytes = 4 << 20;
  }
  return target;
}

namespace embedded {
std::string_view file(std::string_view path) {
  for (std::size_t i = 0; i < kFileCount; ++i)
    if (path == kFiles[i].path) return kFiles[i].text;
  throw Error("template source '" + std::string(path) + "' was not embedded at build time");
}
}  // namespace embedded

}  // namespace tilesmith
