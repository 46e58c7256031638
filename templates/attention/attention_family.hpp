// The attention families: the FlashAttention-style forward (attention.cuh, attention_sm90.cuh)
// and its backward (attention_backward.cuh) over batch x heads, with grouped-query heads,
// causal masking and the BSHD or BHSD layout.
#pragma once

#include <memory>

#include "templates/family.hpp"

namespace tilesmith {
std::unique_ptr<Family> make_attention_family();
std::unique_ptr<Family> make_attention_backward_family();
}
