#pragma once

#include <cstddef>
#include <cstdint>

namespace baton {

/// Bounds every decoder checks before it allocates; a peer can never make us allocate more.
struct DecodeLimits {
  std::size_t max_frame_bytes = std::size_t{1} << 30;    // one envelope with all its parts
  std::size_t max_header_bytes = std::size_t{16} << 20;  // envelope header incl. inline args
  std::size_t max_parts = 4096;                          // out-of-band buffers per envelope
  std::uint64_t max_count = std::uint64_t{1} << 28;      // elements in one container
  std::size_t max_headers = 256;                         // envelope key/value headers
};

/// Buffers at least this large travel as separate parts instead of inside the header.
inline constexpr std::size_t kOutOfBandThreshold = 4096;

}  // namespace baton
