// Large byte buffers are slabs from birth: memory sealed against change that other procs of
// this host can map, released when the last Bytes of it goes.

#include "wire/slab.hpp"

#include "wire/slab.test.hpp"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace baton::wire {
namespace {

using ::testing::HasSubstr;

TEST(Slabs, ALargeCopyIsASealedSlabAndASmallOneIsNot) {
  const std::string big(kSlabBytes, 'b');
  {
    const Bytes b = Bytes::copy(big);
    const int fd = slab_fd(b);
    ASSERT_GE(fd, 0) << "a copy of 8 MiB is ordinary memory: sending it would copy it again";
    EXPECT_EQ(b.str(), big);
    const int seals = ::fcntl(fd, F_GET_SEALS);
    EXPECT_EQ(seals & F_SEAL_WRITE, F_SEAL_WRITE) << "the slab's bytes could still change";
    EXPECT_EQ(seals & F_SEAL_SHRINK, F_SEAL_SHRINK);
    // Copies and a whole view share the slab; a slice is not the slab (it goes as bytes).
    const Bytes again = b;  // NOLINT(performance-unnecessary-copy-initialization)
    EXPECT_EQ(slab_fd(again), fd);
    EXPECT_EQ(slab_fd(b.slice(1, 100)), -1);
    EXPECT_EQ(slab_fd(to_slab(b)), fd) << "a slab made a slab again is copied";
    EXPECT_EQ(slabs_here(), 2u);  // one mapping, one descriptor
  }
  EXPECT_EQ(slabs_here(), 0u) << "the slab outlived its last Bytes";
  EXPECT_EQ(slab_fd(Bytes::copy(std::string(kSlabBytes - 1, 's'))), -1);
}

/// The resident size, in bytes, of the mapping of this process that holds `at` (from smaps).
std::size_t resident_bytes_of(const void* at) {
  std::ifstream smaps("/proc/self/smaps");
  const auto addr = reinterpret_cast<std::uintptr_t>(at);
  bool in = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long lo = 0;
    unsigned long hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find(' ')) {
      in = addr >= lo && addr < hi;
    } else if (in && line.rfind("Rss:", 0) == 0) {
      return std::stoul(line.substr(4)) * 1024;
    }
  }
  throw std::runtime_error("no mapping holds that address");
}

TEST(Slabs, APopulatedSlabIsMappedInBeforeACopyReadsIt) {
  const Bytes b = Bytes::copy(std::string(kSlabBytes, 'p'));
  ASSERT_GE(slab_fd(b), 0);
  EXPECT_EQ(resident_bytes_of(b.data()), 0U) << "a slab is mapped lazily";
  populate_for_read(b.slice(0, 1000));  // under 1 MiB: not worth a call
  EXPECT_EQ(resident_bytes_of(b.data()), 0U);
  populate_for_read(b);
  EXPECT_EQ(resident_bytes_of(b.data()), kSlabBytes);
}

TEST(Slabs, ACopyOutOfASlabInPartsCopiesEveryByteAndLeavesTheSlabWhole) {
  // 3 slabs' worth, filled so that each byte says where it is: a part copied to the wrong place,
  // or a byte left out at a part's edge, shows.
  const std::size_t n = 3 * kSlabBytes + 12345;
  const Bytes b = Bytes::make(n, [](std::span<std::byte> to) {
    for (std::size_t i = 0; i < to.size(); ++i) to[i] = static_cast<std::byte>(i * 7 + i / 4093);
  });
  ASSERT_GE(slab_fd(b), 0);
  const auto expect_copied = [](const Bytes& from) {
    std::vector<std::byte> into(from.size() + 2, std::byte{0xee});
    copy_out(from, into.data() + 1);
    EXPECT_EQ(std::memcmp(into.data() + 1, from.data(), from.size()), 0);
    EXPECT_EQ(into.front(), std::byte{0xee}) << "written before the destination";
    EXPECT_EQ(into.back(), std::byte{0xee}) << "written past the destination";
  };
  {
    // Each part's pages are let go once copied (all but those a part's edge cuts), not its bytes.
    std::vector<std::byte> into(n);
    copy_out(b, into.data());
    EXPECT_LT(resident_bytes_of(b.data()), std::size_t{64} << 10) << "the slab stayed mapped in";
  }
  expect_copied(b);
  // A slice starting and ending inside pages, and ordinary memory.
  expect_copied(b.slice(4097, n - 9000));
  expect_copied(Bytes::copy(std::string(5000, 'o')));
  // The slab still reads as it was made.
  for (std::size_t i = 0; i < n; i += 4093) {
    ASSERT_EQ(b.data()[i], static_cast<std::byte>(i * 7 + i / 4093)) << "byte " << i;
  }
}

TEST(Slabs, MakeFillsInPlaceAndWhatItLeavesIsZero) {
  const Bytes b = Bytes::make(kSlabBytes + 4096, [](std::span<std::byte> to) {
    for (std::size_t i = 0; i < to.size(); i += 2) to[i] = static_cast<std::byte>(i % 251 + 1);
  });
  ASSERT_GE(slab_fd(b), 0);
  ASSERT_EQ(b.size(), kSlabBytes + 4096);
  for (std::size_t i = 0; i < b.size(); ++i) {
    const auto want = i % 2 == 0 ? static_cast<std::byte>(i % 251 + 1) : std::byte{0};
    ASSERT_EQ(b.data()[i], want) << "at byte " << i;
  }
  const Bytes small = Bytes::make(3, [](std::span<std::byte> to) { to[1] = std::byte{7}; });
  EXPECT_EQ(small.str(), std::string("\0\7\0", 3));
  EXPECT_EQ(slab_fd(small), -1);
}

TEST(Slabs, AFillThatThrowsLeavesNothingBehindAndIsNotCalledTwice) {
  int calls = 0;
  EXPECT_THROW(Bytes::make(kSlabBytes,
                           [&](std::span<std::byte>) {
                             ++calls;
                             throw std::system_error(ENOSPC, std::generic_category(), "full");
                           }),
               std::system_error);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(slabs_here(), 0u);
}

TEST(Slabs, ASlabThatCouldChangeOrHasAnotherSizeIsRefused) {
  const int fd = ::memfd_create("baton-bytes", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 1 << 20), 0);
  ASSERT_EQ(::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);  // writes still allowed
  Bytes out;
  EXPECT_THAT(map_slab(fd, 1 << 20, out), HasSubstr("not sealed against change"));
  const Bytes copy = copy_to_slab(std::string(1 << 20, 'z').data(), 1 << 20);
  const int dup = ::dup(slab_fd(copy));
  EXPECT_THAT(map_slab(dup, 2 << 20, out), HasSubstr("a slab of 1048576 bytes"));
  const int again = ::dup(slab_fd(copy));
  ASSERT_EQ(map_slab(again, 1 << 20, out), "");
  EXPECT_EQ(out.str(), std::string(1 << 20, 'z'));
}

}  // namespace
}  // namespace baton::wire
