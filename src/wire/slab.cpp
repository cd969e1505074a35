#include "wire/slab.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <system_error>
#include <thread>
#include <vector>

#include "wire/cpus.hpp"

namespace baton::wire {

namespace {

// Nobody can change a slab once sealed: not its size (a mapping past the end would fault), not
// its bytes (a reader reads them in place, after its checks).
constexpr int kSlabSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL;

// Slabs whose memfd is kept open so they can be sent on without a copy. Beyond this many a
// received slab keeps only its mapping (a process has about a thousand descriptors), and sending
// it on copies it.
constexpr int kHeldFds = 256;
std::atomic<int> held_fds{0};

/// Unmaps a slab and closes its memfd (if held) when the last Bytes of it goes; also how a
/// slab is told from other memory (std::get_deleter).
struct SlabRelease {
  int fd = -1;
  std::size_t size = 0;
  void operator()(const void* p) const {
    ::munmap(const_cast<void*>(p), size);
    if (fd >= 0) {
      ::close(fd);
      held_fds.fetch_sub(1);
    }
  }
};

/// Maps `fd` read-only as a Bytes that owns the mapping (and the fd, when it may be held).
Bytes wrap(int fd, std::size_t size) {
  void* at = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  if (at == MAP_FAILED) {
    const int e = errno;
    ::close(fd);
    throw std::system_error(e, std::generic_category(), "mmap of a slab");
  }
  SlabRelease release{fd, size};
  if (held_fds.fetch_add(1) >= kHeldFds) {
    held_fds.fetch_sub(1);
    ::close(fd);
    release.fd = -1;
  }
  std::shared_ptr<const void> owner(at, release);
  return Bytes::view(std::move(owner), static_cast<const std::byte*>(at), size);
}

int new_memfd() {
  const int fd = ::memfd_create("baton-bytes", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "memfd_create of a slab");
  return fd;
}

std::system_error fail_closing(int fd, const char* what) {
  const int e = errno;
  ::close(fd);
  return std::system_error(e, std::generic_category(), what);
}

Bytes seal(int fd, std::size_t size) {
  if (::fcntl(fd, F_ADD_SEALS, kSlabSeals) != 0) throw fail_closing(fd, "sealing a slab");
  return wrap(fd, size);
}

}  // namespace

int slab_fd(const Bytes& b) {
  const auto* release = std::get_deleter<SlabRelease>(b.owner());
  if (release == nullptr || release->fd < 0) return -1;
  if (b.data() != b.owner().get() || b.size() != release->size) return -1;  // a slice of one
  return release->fd;
}

namespace {

/// Asks for the pages of [at, at + size) in one call, where the kernel offers it.
void populate(const std::byte* data, std::size_t size) {
#ifdef MADV_POPULATE_READ
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto at = reinterpret_cast<std::uintptr_t>(data);
  const std::uintptr_t first = at & ~(page - 1);  // madvise takes whole pages
  (void)::madvise(reinterpret_cast<void*>(first), at + size - first, MADV_POPULATE_READ);
#else
  (void)data;
  (void)size;
#endif
}

/// Drops this process's page table entries for the whole pages of [at, at + size) of a slab's
/// mapping (the bytes stay in the memfd, and a later read maps them again): each copying thread
/// tears down its own part, rather than the one thread that unmaps the slab at the end.
void drop_pages(const std::byte* data, std::size_t size) {
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto at = reinterpret_cast<std::uintptr_t>(data);
  const std::uintptr_t first = (at + page - 1) & ~(page - 1);
  const std::uintptr_t last = (at + size) & ~(page - 1);
  if (last > first) (void)::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

bool in_slab(const Bytes& b) {
  return std::get_deleter<SlabRelease>(b.owner()) != nullptr;
}

}  // namespace

void populate_for_read(const Bytes& b) {
  constexpr std::size_t kLeast = std::size_t{1} << 20;
  if (b.size() >= kLeast && in_slab(b)) populate(b.data(), b.size());
}

void copy_out(const Bytes& b, std::byte* to) {
  constexpr std::size_t kMostParts = 4;
  const std::size_t parts =
      std::min<std::size_t>({usable_cpus(), kMostParts, b.size() / (kSlabBytes / 2)});
  if (parts <= 1 || !in_slab(b)) {
    populate_for_read(b);
    if (b.size() != 0) std::memcpy(to, b.data(), b.size());
    return;
  }
  auto part = [&](std::size_t i) {
    const std::size_t begin = i * b.size() / parts;
    const std::size_t n = (i + 1) * b.size() / parts - begin;
    populate(b.data() + begin, n);
    std::memcpy(to + begin, b.data() + begin, n);
    drop_pages(b.data() + begin, n);
  };
  std::vector<std::thread> helpers;
  helpers.reserve(parts - 1);
  for (std::size_t i = 1; i < parts; ++i) helpers.emplace_back(part, i);
  part(0);
  for (auto& t : helpers) t.join();
}

Bytes copy_to_slab(const void* data, std::size_t size) {
  const int fd = new_memfd();
  // Written, not mapped: the kernel fills whole pages without zeroing them first, and no page
  // table is made and torn down (a writable mapping would also stop the write seal).
  const auto* from = static_cast<const std::byte*>(data);
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pwrite(fd, from + done, size - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw fail_closing(fd, "writing a slab");
    done += static_cast<std::size_t>(n);
  }
  return seal(fd, size);
}

Bytes make_slab(std::size_t size, const std::function<void(std::span<std::byte>)>& fill) {
  const int fd = new_memfd();
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0) throw fail_closing(fd, "sizing a slab");
  void* at = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (at == MAP_FAILED) throw fail_closing(fd, "mmap of a slab to fill");
#ifdef MADV_POPULATE_WRITE
  // Every page is written: asked for in one call, rather than one fault at a time as `fill`
  // reaches them (about a third less time for fresh memory here).
  (void)::madvise(at, size, MADV_POPULATE_WRITE);
#endif
  try {
    fill({static_cast<std::byte*>(at), size});
  } catch (...) {
    ::munmap(at, size);
    ::close(fd);
    throw;
  }
  ::munmap(at, size);  // the write seal needs the writable mapping gone
  return seal(fd, size);
}

Bytes to_slab(const Bytes& b) {
  if (slab_fd(b) >= 0) return b;
  return copy_to_slab(b.data(), b.size());
}

std::string map_slab(int fd, std::size_t size, Bytes& out) {
  const int seals = ::fcntl(fd, F_GET_SEALS);
  struct stat st {};
  std::string error;
  if (seals < 0 || (seals & kSlabSeals) != kSlabSeals) {
    error = "a slab not sealed against change (F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_WRITE)";
  } else if (::fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) != size) {
    error =
        "a slab of " + std::to_string(st.st_size) + " bytes for a part of " + std::to_string(size);
  }
  if (!error.empty()) {
    ::close(fd);
    return error;
  }
  try {
    out = wrap(fd, size);
  } catch (const std::system_error& e) {
    return e.what();
  }
  return {};
}

}  // namespace baton::wire
