// ascan_torch_ext.cpp — the LibTorch bridge as a Python op, for torch.utils.cpp_extension
// (scripts/torch_python_check.py builds and checks it): ascan_torch_ext.associative_scan(
// combine, xs, dim, reverse) with combine one of the builtins' names or "complex_diagonal" (an
// S5-style 4-leaf recurrence, a user combine).
#include <torch/extension.h>

#include <ascan/torch.hpp>

#include <string>
#include <vector>

ASCAN_COMBINE(ComplexDiagonal, l, r, {
  const auto& [ar1, ai1, br1, bi1] = l;
  const auto& [ar2, ai2, br2, bi2] = r;
  return std::tuple{ar1 * ar2 - ai1 * ai2, ar1 * ai2 + ai1 * ar2, ar2 * br1 - ai2 * bi1 + br2,
                    ar2 * bi1 + ai2 * br1 + bi2};
});

std::vector<at::Tensor> associative_scan(const std::string& combine, const std::vector<at::Tensor>& xs, int64_t dim,
                                         bool reverse) {
  const ascan::torch::Options o{.reverse = reverse};
  if (combine == "add") return ascan::torch::associative_scan<1>(ascan::add, xs, dim, o);
  if (combine == "mul") return ascan::torch::associative_scan<1>(ascan::mul, xs, dim, o);
  if (combine == "max") return ascan::torch::associative_scan<1>(ascan::max, xs, dim, o);
  if (combine == "min") return ascan::torch::associative_scan<1>(ascan::min, xs, dim, o);
  if (combine == "logaddexp") return ascan::torch::associative_scan<1>(ascan::logaddexp, xs, dim, o);
  if (combine == "linear_recurrence") return ascan::torch::associative_scan<2>(ascan::linear_recurrence, xs, dim, o);
  if (combine == "complex_diagonal") return ascan::torch::associative_scan<4>(ComplexDiagonal{}, xs, dim, o);
  TORCH_CHECK(false, "ascan_torch_ext.associative_scan(): combine is '", combine,
              "', expected add, mul, max, min, logaddexp, linear_recurrence or complex_diagonal");
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("associative_scan", &associative_scan, "ascan's associative scan with its exact gradient",
        pybind11::arg("combine"), pybind11::arg("xs"), pybind11::arg("dim"), pybind11::arg("reverse") = false);
}
