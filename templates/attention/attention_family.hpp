// The attention family: FlashAttention-style forward (attention.cuh) over batch x heads, with
// grouped-query heads, causal masking and the BSHD or BHSD layout.
#pragma once

#include <memory>

#include "templates/family.hpp"

namespace tilesmith {
std::unique_ptr<Family> make_attention_family();
}
