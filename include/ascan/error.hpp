// error.hpp — ascan::Error, the one exception type for user errors, and the raise helpers.
#pragma once

#include <fmt/format.h>

#include <new>
#include <stdexcept>
#include <string>
#include <string_view>

namespace ascan {

// Thrown for every user error (bad argument, shape mismatch, misuse detected at run time).
// The message starts with the public function that detected the problem, names the argument,
// what was found and what was expected.
class Error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Thrown when memory for a tensor cannot be had: a std::bad_alloc (catch it as one), whose
// what() says how many bytes were asked for and how many the library's tensors held.
class OutOfMemory : public std::bad_alloc {
 public:
  explicit OutOfMemory(const std::string& message) : message_(message) {}
  const char* what() const noexcept override { return message_.what(); }

 private:
  std::runtime_error message_;  // (a string whose copy does not throw)
};

namespace detail {

[[noreturn]] void raise_message(std::string message);

// raise("ascan::f(): dim {} is out of range", d) — formats with fmt and throws ascan::Error.
#if defined(__CUDACC__)
// nvcc cannot evaluate fmt's consteval format-string check: format at run time instead.
template <class... Args>
[[noreturn]] void raise(std::string_view format, const Args&... args) {
  raise_message(fmt::vformat(format, fmt::make_format_args(args...)));
}
#else
template <class... Args>
[[noreturn]] void raise(fmt::format_string<Args...> format, Args&&... args) {
  raise_message(fmt::format(format, std::forward<Args>(args)...));
}
#endif

// Internal invariant violated: prints and aborts (never used for user input).
[[noreturn]] void fail(const char* file, int line, const char* what);

}  // namespace detail
}  // namespace ascan

#define ASCAN_ASSERT(cond)                                          \
  do {                                                              \
    if (!(cond)) ::ascan::detail::fail(__FILE__, __LINE__, #cond);  \
  } while (0)
