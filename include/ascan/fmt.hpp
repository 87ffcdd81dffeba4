// fmt.hpp — fmt::format("{}", tensor), through ascan::to_string (format.hpp). Include it only
// where the fmt you link is the one your include path finds: the rest of ascan's headers do not
// include fmt.
#pragma once

#include <fmt/format.h>

#include <string>

#include "ascan/format.hpp"

template <class T>
struct fmt::formatter<ascan::Tensor<T>> : fmt::formatter<std::string> {
  auto format(const ascan::Tensor<T>& t, fmt::format_context& ctx) const {
    return fmt::formatter<std::string>::format(ascan::to_string(t), ctx);
  }
};
