#pragma once

// Internal: the element types of collectives, type-erased for Gloo.

#include <cstddef>
#include <functional>
#include <stdexcept>

#include "baton/collective/collective.hpp"

namespace baton::collective {

/// Gloo's elementwise reduction: out[i] = a[i] op b[i], for n elements.
using ReduceFn = std::function<void(void*, const void*, const void*, std::size_t)>;

/// Calls `f.template operator()<T>()` with T the C++ type of `type`.
template <class F>
void with_type(DType type, F&& f) {
  switch (type) {
    case DType::f32:
      return f.template operator()<float>();
    case DType::f64:
      return f.template operator()<double>();
    case DType::f16:
      return f.template operator()<float16>();
    case DType::bf16:
      return f.template operator()<bfloat16>();
    case DType::i8:
      return f.template operator()<std::int8_t>();
    case DType::u8:
      return f.template operator()<std::uint8_t>();
    case DType::i32:
      return f.template operator()<std::int32_t>();
    case DType::i64:
      return f.template operator()<std::int64_t>();
  }
  throw std::invalid_argument("collective: unknown element type");
}

std::size_t size_of(DType type);
ReduceFn reduce_fn(DType type, ReduceOp op);
/// data[i] /= by (avg: the sum, divided once it is complete).
void divide(void* data, std::size_t count, DType type, int by);

}  // namespace baton::collective
