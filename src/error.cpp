// error.cpp — out-of-line throw and abort paths (kept cold and out of the templates).
#include "ascan/error.hpp"

#include <cstdio>
#include <cstdlib>

namespace ascan::detail {

void raise_message(std::string message) { throw Error(std::move(message)); }

void fail(const char* file, int line, const char* what) {
  std::fprintf(stderr, "ascan: internal error at %s:%d: %s\n", file, line, what);
  std::abort();
}

}  // namespace ascan::detail
