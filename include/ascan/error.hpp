// error.hpp — ascan::Error, the one exception type for user errors, and the raise helpers.
#pragma once

#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

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

// One argument of a message, type-erased, so that the public headers do not depend on which fmt
// a user's include path finds (LibTorch ships its own): the messages are formatted in the
// compiled library, with the fmt it was built against. Integers, floating point, bools, chars
// and strings; "{}" and fmt's format specs ("{:.3g}") apply as in fmt::format.
struct MessageArg {
  enum class Kind : unsigned char { i64, u64, f32, f64, boolean, character, string } kind;
  union {
    long long i;
    unsigned long long u;
    float f;
    double d;
    bool b;
    char c;
  };
  std::string_view s;

  template <class V>
  MessageArg(const V& v) {  // NOLINT: implicit, from the arguments of format()
    if constexpr (std::is_same_v<V, bool>) {
      kind = Kind::boolean, b = v;
    } else if constexpr (std::is_same_v<V, char>) {
      kind = Kind::character, c = v;
    } else if constexpr (std::is_integral_v<V> && std::is_signed_v<V>) {
      kind = Kind::i64, i = v;
    } else if constexpr (std::is_integral_v<V>) {
      kind = Kind::u64, u = v;
    } else if constexpr (std::is_enum_v<V>) {
      kind = Kind::i64, i = static_cast<long long>(v);
    } else if constexpr (std::is_same_v<V, float>) {
      kind = Kind::f32, f = v;
    } else if constexpr (std::is_floating_point_v<V>) {
      kind = Kind::f64, d = static_cast<double>(v);
    } else {
      static_assert(std::is_convertible_v<const V&, std::string_view>,
                    "ascan::detail::format(): an argument must be a number, a bool, a char or a string");
      kind = Kind::string, s = std::string_view(v);
    }
  }
};

// Formats with fmt's syntax in the compiled library. A format string that does not fit its
// arguments gives the string and the arguments rather than throwing.
std::string format_message(std::string_view format, const MessageArg* args, size_t count);

// The number of replacement fields ("{}", "{:.3g}"; "{{" and "}}" are literal braces).
constexpr size_t count_fields(std::string_view text) {
  size_t n = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '{') {
      if (i + 1 < text.size() && text[i + 1] == '{') ++i;
      else ++n;
    } else if (text[i] == '}' && i + 1 < text.size() && text[i + 1] == '}') {
      ++i;
    }
  }
  return n;
}

// A format string whose replacement fields are counted against its arguments at compile time.
#if defined(__CUDACC__)
// (nvcc: checked at run time only, by format_message.)
template <class... Args>
struct FormatString {
  std::string_view text;
  template <class S>
  FormatString(const S& s) : text(s) {}  // NOLINT: implicit, as a string literal
};
#else
template <class... Args>
struct FormatString {
  std::string_view text;
  template <class S>
    requires std::is_convertible_v<const S&, std::string_view>
  consteval FormatString(const S& s) : text(s) {  // NOLINT: implicit, as a string literal
    if (count_fields(text) != sizeof...(Args))
      throw "ascan: the format string's replacement fields do not match its arguments";
  }
};
#endif

template <class... Args>
std::string format(FormatString<std::type_identity_t<Args>...> format, const Args&... args) {
  if constexpr (sizeof...(Args) == 0) {
    return format_message(format.text, nullptr, 0);
  } else {
    const MessageArg list[] = {MessageArg(args)...};
    return format_message(format.text, list, sizeof...(Args));
  }
}

// raise("ascan::f(): dim {} is out of range", d) — formats as format() and throws ascan::Error.
template <class... Args>
[[noreturn]] void raise(FormatString<std::type_identity_t<Args>...> format, const Args&... args) {
  if constexpr (sizeof...(Args) == 0) {
    raise_message(format_message(format.text, nullptr, 0));
  } else {
    const MessageArg list[] = {MessageArg(args)...};
    raise_message(format_message(format.text, list, sizeof...(Args)));
  }
}

// Internal invariant violated: prints and aborts (never used for user input).
[[noreturn]] void fail(const char* file, int line, const char* what);

}  // namespace detail
}  // namespace ascan

#define ASCAN_ASSERT(cond)                                          \
  do {                                                              \
    if (!(cond)) ::ascan::detail::fail(__FILE__, __LINE__, #cond);  \
  } while (0)
