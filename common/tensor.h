// Non-owning views of tensors. Shapes are outermost-first (PyTorch order):
// a linear layer's weight is [out_features, in_features], rows contiguous.
#ifndef TANDEM_COMMON_TENSOR_H_
#define TANDEM_COMMON_TENSOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype.h"

namespace tandem {

struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // points into a mapping or an owned buffer
  int64_t nbytes = 0;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  int64_t dim(int i) const { return shape[static_cast<size_t>(i)]; }
  int rank() const { return static_cast<int>(shape.size()); }
  template <typename T>
  const T* as() const {
    return static_cast<const T*>(data);
  }
};

// "[2, 3, 4]" for error messages.
std::string ShapeString(const std::vector<int64_t>& shape);

}  // namespace tandem

#endif  // TANDEM_COMMON_TENSOR_H_
