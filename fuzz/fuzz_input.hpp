// fuzz_input.hpp — the fuzz targets' byte reader: small integers from the input, zeros once it
// is exhausted (so every input, however short, decodes to a request).
#pragma once

#include <cstddef>
#include <cstdint>

namespace fuzz {

class Input {
 public:
  Input(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  // A value in [0, n), n <= 2^16, from one or two bytes.
  int below(int n) {
    if (n <= 1) return 0;
    unsigned v = next();
    if (n > 256) v = v << 8 | next();
    return static_cast<int>(v % static_cast<unsigned>(n));
  }
  bool exhausted() const { return p_ == end_; }

 private:
  unsigned next() { return p_ == end_ ? 0u : *p_++; }
  const uint8_t* p_;
  const uint8_t* end_;
};

}  // namespace fuzz
