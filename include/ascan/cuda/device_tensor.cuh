// device_tensor.cuh — ascan::cuda::DeviceTensor<T>: RAII device memory with an ascan::Shape.
#pragma once

#include <cstdint>
#include <utility>

#include "ascan/cuda/check.cuh"
#include "ascan/error.hpp"
#include "ascan/shape.hpp"
#include "ascan/tensor.hpp"

namespace ascan::cuda {

// A dense, row-major, contiguous tensor in device memory (float, double, int32_t, int64_t).
// Move-only: it owns its allocation, so a copy would either alias or silently cost a device
// copy; clone() makes the deep copy explicit. Memory comes from the device's stream-ordered pool
// (freed blocks are kept for reuse); a tensor with no elements holds no memory and never touches
// the device, so shape errors can be raised (and tested) without a GPU.
template <class T>
class DeviceTensor {
  static_assert(is_tensor_element_v<T>,
                "ascan::cuda::DeviceTensor<T>: T must be float, double, int32_t or int64_t");

 public:
  using value_type = T;

  DeviceTensor() : DeviceTensor(Shape{0}) {}

  // Uninitialised elements. Throws ascan::Error on a negative extent or a failed allocation.
  explicit DeviceTensor(Shape shape)
      : shape_(std::move(shape)),
        numel_(checked_numel(shape_)),
        data_(static_cast<T*>(detail::device_allocate(bytes(), "ascan::cuda::DeviceTensor()"))) {}

  static DeviceTensor empty(Shape shape) { return DeviceTensor(std::move(shape)); }

 private:
  // The element count, its bytes representable (as host storage's, allocator.hpp).
  static int64_t checked_numel(const Shape& shape) {
    const int64_t n = shape_numel(shape, "ascan::cuda::DeviceTensor()");
    if (n > ascan::detail::kMaxStorageBytes / static_cast<int64_t>(sizeof(T)))
      ascan::detail::raise("ascan::cuda::DeviceTensor(): shape {} needs {} elements of {} bytes, more than the {} "
                           "bytes a storage may hold",
                           format_shape(shape), n, sizeof(T), ascan::detail::kMaxStorageBytes);
    return n;
  }

 public:

  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
  DeviceTensor(DeviceTensor&& other) noexcept
      : shape_(std::exchange(other.shape_, Shape{0})),
        numel_(std::exchange(other.numel_, 0)),
        data_(std::exchange(other.data_, nullptr)) {}
  DeviceTensor& operator=(DeviceTensor&& other) noexcept {
    if (this != &other) {
      detail::device_free(data_);
      shape_ = std::exchange(other.shape_, Shape{0});
      numel_ = std::exchange(other.numel_, 0);
      data_ = std::exchange(other.data_, nullptr);
    }
    return *this;
  }
  ~DeviceTensor() { detail::device_free(data_); }

  // A deep copy (device to device, asynchronous on the default stream).
  DeviceTensor clone() const {
    DeviceTensor out(shape_);
    detail::copy_on_device(out.data_, data_, bytes());
    return out;
  }

  const Shape& shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t size(int64_t dim) const {
    return shape_[resolve_dim(dim, rank(), "ascan::cuda::DeviceTensor::size()", "dim")];
  }
  int64_t numel() const { return numel_; }
  size_t bytes() const { return static_cast<size_t>(numel_) * sizeof(T); }
  // Device pointer to the row-major elements (nullptr when numel() == 0).
  T* data() { return data_; }
  const T* data() const { return data_; }

 private:
  Shape shape_;
  int64_t numel_ = 0;
  T* data_ = nullptr;
};

// Host -> device (synchronous).
template <class T>
DeviceTensor<T> to_device(const Tensor<T>& host) {
  DeviceTensor<T> d(host.shape());
  detail::copy_to_device(d.data(), host.data(), d.bytes());
  return d;
}

// Device -> host (synchronous: waits for the work queued before it on the default stream).
template <class T>
Tensor<T> to_host(const DeviceTensor<T>& device) {
  Tensor<T> h = Tensor<T>::empty(device.shape());
  detail::copy_to_host(h.data(), device.data(), device.bytes());
  return h;
}

}  // namespace ascan::cuda
