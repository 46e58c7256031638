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
  std::string text;
  for (const auto& [name, file] : source.files) text += name + "\n" + file + "\n";
  return text;
}

RenderedSource render_file(const Family& family, const Config& config, const std::string& file,
                           std::vector<std::string> expressions, const std::string& what) {
  const FamilySource& source = family.source();
  if (!source.files.count(file))
    throw Error(family.name() + ": kernel file '" + file + "' is not among the family's sources");
  RenderedSource rendered;
  rendered.family = family.name();
  rendered.config = config;
  rendered.main_name = family.name() + "_" + what + ".cu";
  rendered.headers = source.files;
  rendered.kernel_expressions = std::move(expressions);
  // The name expressions instantiate the kernels; the comment makes the translation unit
  // self-describing when it is printed or saved to reproduce a failure outside the tuner.
  const std::string comment = "// tilesmith: family " + family.name() + ", " + what +
                              (config.values.empty() ? "" : ", config " + config.text()) + "\n";
  std::string code;
  for (const std::string& expression : rendered.kernel_expressions)
    code += "// kernel: " + expression + "\n";
  code += "#include \"" + file + "\"\n";
  rendered.text = comment + code;
  // The comment changes no byte of the cubin: configs whose kernels are the same (they differ
  // only in kernel arguments or launch geometry) share one hash, so one compile serves them.
  const std::string sources = all_source_text(source) + "\n";
  rendered.hash = content_hash(sources + code);
  rendered.hash_with_config = content_hash(sources + rendered.text);
  return rendered;
}

}  // namespace

std::string RenderedSource::describe() const {
  std::string names;
  for (const std::string& expression : kernel_expressions)
    names += (names.empty() ? "" : ", ") + expression;
  return family + (kernel_expressions.size() == 1 ? " kernel " : " kernels ") + names;
}

RenderedSource render(const Family& family, const Config& config, const Problem& problem) {
  return render_file(family, config, family.kernel_file(config),
                     family.kernel_expressions(config, problem), "kernel");
}

RenderedSource render_reference(const Family& family, const Problem& problem) {
  return render_file(family, Config{}, family.reference_file(),
                     {family.reference_expression(problem)}, "reference");
}

std::string template_hash(const Family& family) {
  return content_hash(all_source_text(family.source()));
}

}  // namespace tilesmith
