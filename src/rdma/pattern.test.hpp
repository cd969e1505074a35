#pragma once

// Test support shared by the rdma tests: a byte pattern by seed, its checksum, and a bounded
// wait for a transfer.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "baton/actor/future.hpp"

namespace baton::rdma_testing {

inline std::uint8_t pattern(std::size_t i, int seed) {
  return static_cast<std::uint8_t>(((i * 2654435761U) >> 13) + static_cast<std::size_t>(seed));
}
inline void fill(std::byte* p, std::size_t n, int seed) {
  for (std::size_t i = 0; i < n; ++i) p[i] = std::byte{pattern(i, seed)};
}
inline std::uint64_t checksum(const std::byte* p, std::size_t n) {
  std::uint64_t h = 1469598103934665603ULL;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ static_cast<std::uint8_t>(p[i])) * 1099511628211ULL;
  return h;
}
inline std::uint64_t expected(std::size_t n, int seed) {
  std::vector<std::byte> v(n);
  fill(v.data(), n, seed);
  return checksum(v.data(), n);
}

/// Waits for a transfer, with a bound: a hang fails the test with TimeoutError.
inline void finish(Future<void> f) {
  f.get(std::chrono::seconds(60));
}

}  // namespace baton::rdma_testing
