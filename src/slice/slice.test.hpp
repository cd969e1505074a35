#pragma once

// What the slice layer's tests share: printing geometry on failure, the text of a SliceError,
// and random shapes.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "baton/slice/slice.hpp"

namespace baton {

// Failures print geometry rather than bytes.
inline void PrintTo(const Slice& s, std::ostream* os) {
  *os << s.to_string();
}
inline void PrintTo(const Shape& s, std::ostream* os) {
  *os << s.to_string() << " over " << s.slice().to_string();
}
inline void PrintTo(const Point& p, std::ostream* os) {
  *os << p.to_string() << " rank " << p.rank;
}

namespace slice_test {

using Sizes = std::vector<std::size_t>;
using Dims = std::vector<std::pair<std::string, std::size_t>>;

constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();

// The message of the SliceError that f throws; any other exception fails the test.
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const SliceError& e) {
    return e.what();
  }
  return "no error";
}

struct Rng {
  std::mt19937 gen;
  explicit Rng(unsigned seed) : gen(seed) {}
  std::size_t pick(std::size_t lo, std::size_t hi) {
    return std::uniform_int_distribution<std::size_t>(lo, hi)(gen);
  }
};

inline Shape random_shape(Rng& rng, std::size_t max_size) {
  Dims spec;
  const std::size_t dims = rng.pick(1, 3);
  for (std::size_t d = 0; d < dims; ++d)
    spec.emplace_back("d" + std::to_string(d), rng.pick(1, max_size));
  return Shape::of(spec);
}

}  // namespace slice_test
}  // namespace baton
