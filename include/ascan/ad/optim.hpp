// optim.hpp — first-order optimizers over a list of parameter Vars: SGD (momentum) and Adam.
//
// step() updates each parameter's value in place from its accumulated grad(); zero_grad()
// clears the gradients (call it once per step, since gradients accumulate across backward calls).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "ascan/ad/var.hpp"
#include "ascan/error.hpp"

namespace ascan::ad {

namespace detail {
template <class T>
Tensor<T>& mutable_value(const Var<T>& v, std::string_view where) {
  auto& s = v.state(where);
  if (!s.is_leaf[v.id()] || !s.requires_grad[v.id()])
    ascan::detail::raise("{}: a Var that is not a parameter was passed, expected leaves made by "
                         "ascan::ad::param", where);
  return s.values[v.id()];
}
}  // namespace detail

template <class T>
class SGD {
 public:
  // v <- momentum * v + grad;  p <- p - lr * v.
  SGD(std::vector<Var<T>> params, T lr, T momentum = T(0)) : params_(std::move(params)), lr_(lr), momentum_(momentum) {
    if (!(lr > 0) || momentum < 0)
      ascan::detail::raise("ascan::ad::SGD(): lr = {}, momentum = {}, expected lr > 0 and momentum >= 0", lr, momentum);
    for (const auto& p : params_) {
      detail::mutable_value(p, "ascan::ad::SGD()");
      velocity_.push_back(Tensor<T>::zeros(p.shape()));
    }
  }
  void step() {
    for (size_t k = 0; k < params_.size(); ++k) {
      Tensor<T>& p = detail::mutable_value(params_[k], "ascan::ad::SGD::step()");
      const Tensor<T> g = params_[k].grad();
      T* v = velocity_[k].data();
      for (int64_t i = 0; i < p.numel(); ++i) {
        v[i] = momentum_ * v[i] + g.data()[i];
        p.data()[i] -= lr_ * v[i];
      }
    }
  }
  void zero_grad() { ad::zero_grad(params_); }
  void set_lr(T lr) { lr_ = lr; }

 private:
  std::vector<Var<T>> params_;
  T lr_, momentum_;
  std::vector<Tensor<T>> velocity_;
};

template <class T>
class Adam {
 public:
  Adam(std::vector<Var<T>> params, T lr = T(1e-3), T beta1 = T(0.9), T beta2 = T(0.999), T eps = T(1e-8))
      : params_(std::move(params)), lr_(lr), beta1_(beta1), beta2_(beta2), eps_(eps) {
    if (!(lr > 0) || !(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1) || !(eps > 0))
      ascan::detail::raise("ascan::ad::Adam(): lr = {}, beta1 = {}, beta2 = {}, eps = {}, expected lr > 0, "
                           "0 <= beta < 1, eps > 0", lr, beta1, beta2, eps);
    for (const auto& p : params_) {
      detail::mutable_value(p, "ascan::ad::Adam()");
      m_.push_back(Tensor<T>::zeros(p.shape()));
      v_.push_back(Tensor<T>::zeros(p.shape()));
    }
  }
  void step() {
    ++t_;
    const T c1 = T(1) - std::pow(beta1_, static_cast<T>(t_)), c2 = T(1) - std::pow(beta2_, static_cast<T>(t_));
    for (size_t k = 0; k < params_.size(); ++k) {
      Tensor<T>& p = detail::mutable_value(params_[k], "ascan::ad::Adam::step()");
      const Tensor<T> g = params_[k].grad();
      T* m = m_[k].data();
      T* v = v_[k].data();
      for (int64_t i = 0; i < p.numel(); ++i) {
        const T gi = g.data()[i];
        m[i] = beta1_ * m[i] + (T(1) - beta1_) * gi;
        v[i] = beta2_ * v[i] + (T(1) - beta2_) * gi * gi;
        p.data()[i] -= lr_ * (m[i] / c1) / (std::sqrt(v[i] / c2) + eps_);
      }
    }
  }
  void zero_grad() { ad::zero_grad(params_); }
  void set_lr(T lr) { lr_ = lr; }

 private:
  std::vector<Var<T>> params_;
  T lr_, beta1_, beta2_, eps_;
  int64_t t_ = 0;
  std::vector<Tensor<T>> m_, v_;
};

}  // namespace ascan::ad
