// torch_main.cpp — a client of the installed ascan::torch: a cumulative sum and its gradient
// through the bridge against LibTorch's own cumsum.
#include <ascan/torch.hpp>

#include <cstdio>

int main() {
  const at::Tensor x = at::randn({3, 50}, at::TensorOptions().dtype(at::kDouble)).set_requires_grad(true);
  const at::Tensor y = ascan::torch::associative_scan(ascan::add, x, -1);
  const at::Tensor w = at::randn({3, 50}, at::TensorOptions().dtype(at::kDouble));
  (y * w).sum().backward();
  const bool values = at::allclose(y, at::cumsum(x, -1), 1e-12, 1e-12);
  const bool grads = at::allclose(x.grad(), w.flip(-1).cumsum(-1).flip(-1), 1e-12, 1e-12);
  std::printf("torch_consumer: values %s, gradient %s\n", values ? "ok" : "WRONG", grads ? "ok" : "WRONG");
  return values && grads ? 0 : 1;
}
