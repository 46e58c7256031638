/* bf16 <-> float on the host for the examples (C and C++): round to nearest even one way,
 * exact the other. */
#ifndef TILESMITH_EXAMPLES_BF16_H
#define TILESMITH_EXAMPLES_BF16_H

#include <stdint.h>
#include <string.h>

static inline uint16_t to_bf16(float value) {
  uint32_t bits;
  memcpy(&bits, &value, 4);
  return (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}
static inline double from_bf16(uint16_t half) {
  uint32_t bits = (uint32_t)half << 16;
  float value;
  memcpy(&value, &bits, 4);
  return value;
}

#endif
