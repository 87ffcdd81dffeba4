// error.cpp — out-of-line throw and abort paths (kept cold and out of the templates).
#include "ascan/error.hpp"

#include <fmt/args.h>
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>

namespace ascan::detail {

void raise_message(std::string message) { throw Error(std::move(message)); }

std::string format_message(std::string_view format, const MessageArg* args, size_t count) {
  fmt::dynamic_format_arg_store<fmt::format_context> store;
  std::string listed;  // the arguments, for a format string that does not fit them
  for (size_t k = 0; k < count; ++k) {
    const MessageArg& a = args[k];
    std::string text;
    switch (a.kind) {
      case MessageArg::Kind::i64: store.push_back(a.i); text = fmt::format("{}", a.i); break;
      case MessageArg::Kind::u64: store.push_back(a.u); text = fmt::format("{}", a.u); break;
      case MessageArg::Kind::f32: store.push_back(a.f); text = fmt::format("{}", a.f); break;
      case MessageArg::Kind::f64: store.push_back(a.d); text = fmt::format("{}", a.d); break;
      case MessageArg::Kind::boolean: store.push_back(a.b); text = fmt::format("{}", a.b); break;
      case MessageArg::Kind::character: store.push_back(a.c); text = fmt::format("{}", a.c); break;
      case MessageArg::Kind::string: store.push_back(a.s); text = std::string(a.s); break;
    }
    listed += (k ? ", " : "") + text;
  }
  try {
    return fmt::vformat(format, store);
  } catch (const fmt::format_error&) {
    return fmt::format("{} [arguments: {}]", format, listed);
  }
}

void fail(const char* file, int line, const char* what) {
  std::fprintf(stderr, "ascan: internal error at %s:%d: %s\n", file, line, what);
  std::abort();
}

}  // namespace ascan::detail
