// format.hpp — fmt formatting (and iostream printing) of tensors: "Tensor<float>[2, 3] [[...]]".
//
// Dims longer than 6 are summarised as "first 3, ..., last 3", so large tensors print briefly.
#pragma once

#include <fmt/format.h>

#include <ostream>
#include <string>

#include "ascan/tensor.hpp"

namespace ascan {

namespace detail {
template <class T> constexpr const char* dtype_name();
template <> constexpr const char* dtype_name<float>() { return "float"; }
template <> constexpr const char* dtype_name<double>() { return "double"; }
template <> constexpr const char* dtype_name<int32_t>() { return "int32"; }
template <> constexpr const char* dtype_name<int64_t>() { return "int64"; }

template <class T>
void format_values(std::string& out, const Tensor<T>& t, size_t d, int64_t offset) {
  const Shape& s = t.shape();
  if (d == s.size()) {
    fmt::format_to(std::back_inserter(out), "{}", t.data()[offset]);
    return;
  }
  int64_t stride = 1;
  for (size_t i = d + 1; i < s.size(); ++i) stride *= s[i];
  out += '[';
  const int64_t n = s[d];
  for (int64_t i = 0; i < n; ++i) {
    if (n > 6 && i == 3) {
      out += "..., ";
      i = n - 3;
    }
    format_values(out, t, d + 1, offset + i * stride);
    if (i + 1 < n) out += ", ";
  }
  out += ']';
}
}  // namespace detail

template <class T>
std::string to_string(const Tensor<T>& t) {
  std::string out = fmt::format("Tensor<{}>{} ", detail::dtype_name<T>(), format_shape(t.shape()));
  detail::format_values(out, t, 0, 0);
  return out;
}

template <class T>
std::ostream& operator<<(std::ostream& os, const Tensor<T>& t) {
  return os << to_string(t);
}

}  // namespace ascan

template <class T>
struct fmt::formatter<ascan::Tensor<T>> : fmt::formatter<std::string> {
  auto format(const ascan::Tensor<T>& t, fmt::format_context& ctx) const {
    return fmt::formatter<std::string>::format(ascan::to_string(t), ctx);
  }
};
