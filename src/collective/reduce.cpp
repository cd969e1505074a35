// Element types of collectives: half-precision conversions, and the elementwise reductions
// Gloo applies (type-erased, as Gloo wants them).

#include "collective/reduce.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <stdexcept>

namespace baton::collective {

float16::float16(float f) {
  // Round to nearest even, with subnormals, infinities and NaN.
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (x >> 16) & 0x8000U;
  const std::uint32_t exp = (x >> 23) & 0xffU;
  std::uint32_t mant = x & 0x7fffffU;
  if (exp == 0xff) {
    bits = static_cast<std::uint16_t>(sign | 0x7c00U | (mant != 0 ? 0x200U : 0U));
    return;
  }
  const int e = static_cast<int>(exp) - 127 + 15;
  if (e >= 31) {
    bits = static_cast<std::uint16_t>(sign | 0x7c00U);
    return;
  }
  if (e <= 0) {
    if (e < -10) {
      bits = static_cast<std::uint16_t>(sign);
      return;
    }
    mant |= 0x800000U;
    const int shift = 14 - e;
    std::uint32_t half = mant >> shift;
    const std::uint32_t rest = mant & ((1U << shift) - 1);
    const std::uint32_t mid = 1U << (shift - 1);
    if (rest > mid || (rest == mid && (half & 1U) != 0)) ++half;
    bits = static_cast<std::uint16_t>(sign | half);
    return;
  }
  std::uint32_t half = (static_cast<std::uint32_t>(e) << 10) | (mant >> 13);
  const std::uint32_t rest = mant & 0x1fffU;
  if (rest > 0x1000U || (rest == 0x1000U && (half & 1U) != 0)) ++half;  // may carry into inf
  bits = static_cast<std::uint16_t>(sign | half);
}

float16::operator float() const {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000U) << 16;
  const std::uint32_t exp = (bits >> 10) & 0x1fU;
  const std::uint32_t mant = bits & 0x3ffU;
  if (exp == 0) {
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return sign != 0 ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000U | (mant << 13));
  return std::bit_cast<float>(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

bfloat16::bfloat16(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if (std::isnan(f)) {
    bits = static_cast<std::uint16_t>((x >> 16) | 0x40U);
    return;
  }
  const std::uint32_t rounding = 0x7fffU + ((x >> 16) & 1U);
  bits = static_cast<std::uint16_t>((x + rounding) >> 16);
}

bfloat16::operator float() const {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

namespace {

/// out[i] = f(a[i], b[i]) for n elements; plain loops, which the compiler vectorizes.
template <class T, class F>
void apply(void* out, const void* a, const void* b, std::size_t n, F f) {
  auto* o = static_cast<T*>(out);
  const auto* x = static_cast<const T*>(a);
  const auto* y = static_cast<const T*>(b);
  for (std::size_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>) {
      o[i] = T(f(static_cast<float>(x[i]), static_cast<float>(y[i])));
    } else {
      o[i] = static_cast<T>(f(x[i], y[i]));
    }
  }
}

template <class T>
ReduceFn reduce_of(ReduceOp op) {
  // The operation is chosen once, not per element.
  switch (op) {
    case ReduceOp::min:
      return [](void* o, const void* a, const void* b, std::size_t n) {
        apply<T>(o, a, b, n, [](auto x, auto y) { return std::min(x, y); });
      };
    case ReduceOp::max:
      return [](void* o, const void* a, const void* b, std::size_t n) {
        apply<T>(o, a, b, n, [](auto x, auto y) { return std::max(x, y); });
      };
    default:  // sum, and avg's sum (divided once all are in)
      return [](void* o, const void* a, const void* b, std::size_t n) {
        apply<T>(o, a, b, n, [](auto x, auto y) { return x + y; });
      };
  }
}

template <class T>
void divide_by(void* data, std::size_t n, int by) {
  auto* d = static_cast<T*>(data);
  for (std::size_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>) {
      d[i] = T(static_cast<float>(d[i]) / static_cast<float>(by));
    } else {
      d[i] = static_cast<T>(d[i] / static_cast<T>(by));
    }
  }
}

}  // namespace

std::size_t size_of(DType type) {
  std::size_t n = 0;
  with_type(type, [&]<class T>() { n = sizeof(T); });
  return n;
}

ReduceFn reduce_fn(DType type, ReduceOp op) {
  ReduceFn fn;
  with_type(type, [&]<class T>() { fn = reduce_of<T>(op); });
  return fn;
}

void divide(void* data, std::size_t count, DType type, int by) {
  with_type(type, [&]<class T>() { divide_by<T>(data, count, by); });
}

}  // namespace baton::collective
