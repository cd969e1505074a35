#pragma once

// Internal: large byte buffers as slabs, memory that other procs of this host can map. Every
// Bytes of kSlabBytes (8 MiB) or more that baton makes (Bytes::copy, Bytes::make, what a link
// receives) is a slab from the start: a memfd sealed against any change (size and contents).
// On a shared-memory link a slab travels as its descriptor over the link's socket while the
// frame goes through the ring without its bytes; the receiver maps it read-only and reads it in
// place, and a slab it sends on (an echo, a forward) goes as the same memfd. Nothing is copied
// on the way, and the memory is freed once no process maps it or holds its fd. A large Bytes
// made some other way (adopting a vector) is copied into a slab when it is first sent. Below
// kSlabBytes, two copies through a ring cost less than a memfd.

#include <cstddef>
#include <functional>
#include <span>
#include <string>

#include "baton/wire/bytes.hpp"

namespace baton::wire {

constexpr std::size_t kSlabBytes = std::size_t{8} << 20;

/// Whether a part of `size` bytes travels as a slab on a shared-memory link.
inline bool travels_as_slab(std::size_t size) {
  return size >= kSlabBytes;
}

/// A new slab holding a copy of `size` bytes at `data`. Throws std::system_error naming what
/// failed (no memfd here, no memory).
Bytes copy_to_slab(const void* data, std::size_t size);

/// A new slab of `size` bytes that `fill` writes in place, sealed once it returns.
Bytes make_slab(std::size_t size, const std::function<void(std::span<std::byte>)>& fill);

/// `b`'s bytes as a slab: `b` itself if it is one, else a copy in a fresh slab.
Bytes to_slab(const Bytes& b);

/// The memfd of the slab that `b` is (whole), or -1.
int slab_fd(const Bytes& b);

/// Before a copy reads all of `b`: if it lies in a slab's mapping, asks the kernel for its pages
/// in one call (MADV_POPULATE_READ). A slab is mapped lazily, and faulting its pages in one
/// fault at a time as a copy reaches them costs more. Nothing for other memory, under 1 MiB, or
/// where the kernel does not offer it (the copy then faults as before).
void populate_for_read(const Bytes& b);

/// Copies all of `b` to `to`, which must hold b.size() bytes. A slab of kSlabBytes or more is
/// copied in parts on up to four threads, each asking for its part's pages in one call first
/// (populate_for_read), copying it, and then dropping this process's mapping of those pages
/// (the bytes stay in the memfd): one thread faulting in and copying a fresh mapping reaches
/// about two thirds of a memcpy's speed here, two together pass it. Other memory is one memcpy.
void copy_out(const Bytes& b, std::byte* to);

/// Maps the slab a peer sent, which must hold `size` bytes; takes `fd`. "" with `out` set, or
/// why it cannot be used (not sealed against change, another size).
std::string map_slab(int fd, std::size_t size, Bytes& out);

}  // namespace baton::wire
