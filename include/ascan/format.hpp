// format.hpp — printing tensors: to_string(t) and `std::cout << t` give
// "Tensor<float>[2, 3] [[1, 2, 3], [4, 5.5, 6]]".
//
// Dims longer than 6 are summarised as "first 3, ..., last 3", so large tensors print briefly.
// The formatting is compiled into the library (src/format.cpp), so this header does not include
// fmt; for fmt::format("{}", t) include "ascan/fmt.hpp".
#pragma once

#include <ostream>
#include <string>

#include "ascan/tensor.hpp"

namespace ascan {

// Defined in the library for float, double, int32_t and int64_t.
template <class T>
std::string to_string(const Tensor<T>& t);

extern template std::string to_string(const Tensor<float>&);
extern template std::string to_string(const Tensor<double>&);
extern template std::string to_string(const Tensor<int32_t>&);
extern template std::string to_string(const Tensor<int64_t>&);

template <class T>
std::ostream& operator<<(std::ostream& os, const Tensor<T>& t) {
  return os << to_string(t);
}

}  // namespace ascan
