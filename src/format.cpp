// format.cpp — to_string of tensors (format.hpp), formatted with the fmt the library is built with.
#include "ascan/format.hpp"

#include <fmt/format.h>

#include <iterator>

namespace ascan {
namespace {

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

}  // namespace

template <class T>
std::string to_string(const Tensor<T>& t) {
  std::string out = fmt::format("Tensor<{}>{} ", dtype_name<T>(), format_shape(t.shape()));
  format_values(out, t, 0, 0);
  return out;
}

template std::string to_string(const Tensor<float>&);
template std::string to_string(const Tensor<double>&);
template std::string to_string(const Tensor<int32_t>&);
template std::string to_string(const Tensor<int64_t>&);

}  // namespace ascan
