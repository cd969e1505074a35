#pragma once

// Internal: large parts between procs of one host, passed as memory rather than copied through
// a ring. On a shared-memory link every part of kSlabBytes (8 MiB) or more travels as a slab
// (below that, two copies through the ring cost less than making a memfd): a memfd
// sealed against any change (size and contents), whose descriptor goes over the link's socket
// while the frame goes through the ring without that part's bytes. The receiver maps it
// read-only and reads it in place; a slab it sends on (an echo, a forward) goes as the same
// memfd, never copied again. The memory is freed once no process maps it or holds its fd.

#include <cstddef>
#include <string>

#include "baton/wire/bytes.hpp"

namespace baton::net::shm {

constexpr std::size_t kSlabBytes = std::size_t{8} << 20;

/// Whether a part of `size` bytes travels as a slab on a shared-memory link.
inline bool travels_as_slab(std::size_t size) {
  return size >= kSlabBytes;
}

/// `b`'s bytes as a slab: `b` itself if it is one, else a copy in a fresh sealed memfd. Throws
/// std::system_error naming what failed.
Bytes to_slab(const Bytes& b);

/// The memfd of the slab that `b` is (whole), or -1.
int slab_fd(const Bytes& b);

/// Maps the slab a peer sent, which must hold `size` bytes; takes `fd`. "" with `out` set, or
/// why it cannot be used (not sealed against change, another size).
std::string map_slab(int fd, std::size_t size, Bytes& out);

}  // namespace baton::net::shm
