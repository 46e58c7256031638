#include "templates/registry.hpp"

#include "templates/matmul/matmul_family.hpp"

namespace tilesmith {
namespace {

std::vector<std::unique_ptr<Family>>& families() {
  static std::vector<std::unique_ptr<Family>> list = [] {
    std::vector<std::unique_ptr<Family>> builtin;
    builtin.push_back(make_matmul_family());
    return builtin;
  }();
  return list;
}

}  // namespace

const Family& find_family(const std::string& name) {
  std::string known;
  for (const auto& family : families()) {
    if (family->name() == name) return *family;
    known += (known.empty() ? "" : ", ") + family->name();
  }
  throw InvalidArgument("unknown op " + quote_input(name) + " (known: " + known + ")");
}

std::vector<const Family*> all_families() {
  std::vector<const Family*> list;
  for (const auto& family : families()) list.push_back(family.get());
  return list;
}

void register_family(std::unique_ptr<Family> family) {
  for (const auto& existing : families())
    if (existing->name() == family->name())
      throw Error("a family named '" + family->name() + "' is already registered");
  families().push_back(std::move(family));
}

double Family::tolerance(const Problem& problem) const {
  // Norm-wise relative error with fp32 accumulation: the output's rounding dominates
  // (bf16 keeps 8 bits, fp16 11), so the bound follows the output type.
  switch (problem.out_dtype) {
    case DType::bf16: return 1e-2;
    case DType::f16: return 2e-3;
    case DType::f32: return 5e-4;  // summation order only; tensor-core adds truncate
  }
  return 0;
}

}  // namespace tilesmith
