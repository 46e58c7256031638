#include <cstdint>

#include "generator/rendered_source.hpp"

namespace tilesmith {

std::string content_hash(const std::string& text) {
  // Two FNV-1a lanes with different offset bases: 128 bits, so a collision between two configs'
  // sources (which would run the wrong cubin) is not a practical concern.
  std::uint64_t low = 0xcbf29ce484222325ull, high = 0x84222325cbf29ce4ull;
  for (unsigned char byte : text) {
    low = (low ^ byte) * 0x100000001b3ull;
    high = (high ^ (byte + 0x9e)) * 0x100000001b3ull;
  }
  static const char* digits = "0123456789abcdef";
  std::string hex(32, '0');
  for (int i = 0; i < 16; ++i) {
    hex[15 - i] = digits[(high >> (4 * i)) & 0xf];
    hex[31 - i] = digits[(low >> (4 * i)) & 0xf];
  }
  return hex;
}

namespace {

std::string all_source_text(const FamilySource& source) {
  std::string text = source.main_name + "\n" + source.main_text;
  for (const auto& [name, header] : source.headers) text += "\n" + name + "\n" + header;
  return text;
}

RenderedSource render_expression(const Family& family, const Config& config,
                                 const std::string& expression, const std::string& what) {
  const FamilySource& source = family.source();
  RenderedSource rendered;
  rendered.family = family.name();
  rendered.config = config;
  rendered.main_name = family.name() + "_" + what + ".cu";
  rendered.headers = source.headers;
  rendered.kernel_expression = expression;
  // The name expression instantiates the kernel; the comment makes the translation unit
  // self-describing when it is printed or saved to reproduce a failure outside the tuner.
  rendered.text = "// tilesmith: family " + family.name() + ", " + what +
                  (config.values.empty() ? "" : ", config " + config.text()) + "\n// kernel: " +
                  expression + "\n" + source.main_text;
  rendered.hash = content_hash(all_source_text(source) + "\n" + rendered.text + "\n" + expression);
  return rendered;
}

}  // namespace

RenderedSource render(const Family& family, const Config& config, const Problem& problem) {
  return render_expression(family, config, family.kernel_expression(config, problem), "kernel");
}

RenderedSource render_reference(const Family& family, const Problem& problem) {
  return render_expression(family, Config{}, family.reference_expression(problem), "reference");
}

std::string template_hash(const Family& family) {
  return content_hash(all_source_text(family.source()));
}

}  // namespace tilesmith
