// Every public host header, compiled with an include path whose <fmt/...> headers are #errors:
// a user whose build finds another fmt first (LibTorch's) compiles and links ascan's headers
// against the fmt the library was built with, in the library, never against theirs.
#include <ascan/ad/gradcheck.hpp>
#include <ascan/ad/optim.hpp>
#include <ascan/ascan.hpp>
#include <ascan/autodiff.hpp>
#include <ascan/vjp.hpp>

int main() {
  auto x = ascan::Tensor<double>::from({1, 2, 3}, {3});
  try {
    ascan::associative_scan(ascan::add, x, 5);
  } catch (const ascan::Error& e) {
    return std::string(e.what()).find("dim 5") == std::string::npos;
  }
  return 1;
}
