// bridge.cpp — the LibTorch bridge's non-template parts (include/ascan/torch.hpp), compiled
// with torch's include directories first.
#include "ascan/torch.hpp"

#include <string>

namespace ascan::torch::detail {

void fail(const std::string& message) { TORCH_CHECK(false, message); }

void fail_from(const ascan::Error& e) {
  std::string message = e.what();
  for (const std::string host : {"ascan::associative_scan_vjp()", "ascan::associative_scan()"}) {
    if (message.rfind(host, 0) == 0) {
      message = kName + message.substr(host.size());
      break;
    }
  }
  fail(message);
}

namespace {
std::string leaf(size_t l) { return std::string(kName) + ": xs leaf " + std::to_string(l); }
}  // namespace

void check_leaves(const std::vector<at::Tensor>& xs) {
  if (xs.empty()) fail(std::string(kName) + ": xs is empty, expected at least one tensor");
  for (size_t l = 0; l < xs.size(); ++l)
    if (!xs[l].defined()) fail(leaf(l) + " is an undefined tensor, expected a tensor");
  const at::Tensor& x0 = xs[0];
  const at::ScalarType st = x0.scalar_type();
  if (st != at::kFloat && st != at::kDouble && st != at::kInt && st != at::kLong)
    fail(leaf(0) + " has dtype " + c10::toString(st) + ", expected Float, Double, Int or Long (float32, float64, "
         "int32, int64)");
  for (size_t l = 1; l < xs.size(); ++l) {
    if (xs[l].device() != x0.device())
      fail(leaf(l) + " is on " + xs[l].device().str() + ", expected " + x0.device().str() + " (the device of leaf 0)");
    if (xs[l].scalar_type() != st)
      fail(leaf(l) + " has dtype " + c10::toString(xs[l].scalar_type()) + ", expected " + c10::toString(st) +
           " (the dtype of leaf 0)");
  }
  if (!x0.device().is_cpu())
    fail(std::string(kName) + ": xs are on " + x0.device().str() +
         ", expected CPU tensors (this build of the bridge scans CPU tensors only)");
}

void follow_torch_threads() {
  const int n = at::get_num_threads();
  if (n >= 1 && ascan::num_threads() != n) ascan::set_num_threads(n);
}

}  // namespace ascan::torch::detail
