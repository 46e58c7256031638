#include "templates/registry.hpp"

#include "templates/attention/attention_family.hpp"
#include "templates/matmul/matmul_family.hpp"
#include "templates/reductions/row_norm_family.hpp"

namespace tilesmith {
namespace {

std::vector<std::unique_ptr<Family>>& families() {
  static std::vector<std::unique_ptr<Family>> list = [] {
    std::vector<std::unique_ptr<Family>> builtin;
    builtin.push_back(make_matmul_family());
    for (auto& family : make_row_norm_families()) builtin.push_back(std::move(family));
    for (auto& family : make_row_norm_backward_families()) builtin.push_back(std::move(family));
    builtin.push_back(make_multi_sum_family());
    builtin.push_back(make_attention_family());
    builtin.push_back(make_attention_backward_family());
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

}  // namespace tilesmith
