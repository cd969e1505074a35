// The portable device API on a real device: properties, copies, streams and events, errors, IPC
// handles across processes. Without a GPU every test skips saying why, and the binary exits with
// the code CTest reports as skipped (not passed).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <string_view>
#include <vector>

#include "baton/gpu/gpu.hpp"

extern char** environ;

namespace baton::gpu {
namespace {

using ::testing::HasSubstr;

class GpuDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!api().available()) GTEST_SKIP() << "no GPU here: " << api().status();
  }
  DeviceApi& g = api();
};

TEST_F(GpuDevice, PropertiesAreRead) {
  DeviceProperties p = g.properties(0);
  std::printf("device 0: %s, %zu MiB, %d.%d, %d multiprocessors, bus %s\n", p.name.c_str(),
              p.total_memory >> 20, p.major, p.minor, p.multiprocessors, p.pci_bus_id.c_str());
  EXPECT_FALSE(p.name.empty());
  EXPECT_GT(p.total_memory, std::size_t{1} << 30);
  EXPECT_GT(p.multiprocessors, 0);
  EXPECT_FALSE(p.pci_bus_id.empty());
  EXPECT_THROW((void)g.properties(g.device_count()), GpuError);
}

TEST_F(GpuDevice, CopiesRoundTripAndPointersAreKnown) {
  constexpr std::size_t n = 1 << 22;
  std::vector<unsigned char> in(n), out(n);
  std::iota(in.begin(), in.end(), 0);
  void* a = g.allocate(n);
  void* b = g.allocate(n);
  g.copy(a, in.data(), n);
  g.copy(b, a, n);
  g.copy(out.data(), b, n);
  EXPECT_EQ(in, out);
  // A device-to-device copy is complete when copy() returns: the host sees the bytes through a
  // mapping another stream reads at once.
  void* c = g.allocate(n);
  g.fill(c, 0, n);
  g.copy(c, a, n);
  Stream other = g.create_stream();
  std::fill(out.begin(), out.end(), 0);
  g.copy_async(out.data(), c, n, other);
  g.synchronize(other);
  EXPECT_EQ(in, out);
  g.free(c);
  EXPECT_TRUE(g.pointer_info(a).device);
  EXPECT_EQ(g.pointer_info(a).device_index, g.current_device());
  EXPECT_TRUE(g.pointer_info(static_cast<char*>(a) + 100).device);
  EXPECT_FALSE(g.pointer_info(in.data()).device);
  g.fill(b, 7, n);
  g.copy(out.data(), b, n);
  EXPECT_EQ(out, std::vector<unsigned char>(n, 7));
  g.free(a);
  g.free(b);
}

TEST_F(GpuDevice, StreamsAndEventsOrderWork) {
  constexpr std::size_t n = 1 << 24;
  std::vector<unsigned char> in(n, 3), out(n, 0);
  void* d = g.allocate(n);
  Stream s1 = g.create_stream();
  Stream s2 = g.create_stream();
  Event e = g.create_event();
  g.copy_async(d, in.data(), n, s1);
  g.record(e, s1);
  g.wait(s2, e);  // s2's copy back starts after s1's copy in
  g.copy_async(out.data(), d, n, s2);
  g.synchronize(s2);
  EXPECT_TRUE(g.ready(e));
  g.synchronize(e);
  EXPECT_EQ(out, in);
  g.free(d);
}

TEST_F(GpuDevice, AFailedCallNamesItselfAndLeavesNoErrorBehind) {
  try {
    (void)g.allocate(std::size_t{1} << 50);  // a petabyte
    FAIL() << "a petabyte was allocated";
  } catch (const GpuError& e) {
    EXPECT_THAT(e.what(), HasSubstr("Malloc("));
    EXPECT_NE(e.code(), 0);
  }
  EXPECT_EQ(g.pending_error(), 0);  // G-1: cleared
  void* p = g.allocate(1024);       // and the next call works
  g.free(p);
  EXPECT_EQ(g.pending_error(), 0);
}

}  // namespace

/// Child half of the IPC test (argv: --ipc-child HANDLE_HEX OFFSET SIZE): opens the handle and
/// adds 1 to every byte.
int ipc_child(char** args) {
  const char* hex = args[0];
  IpcHandle h;
  h.vendor = api().vendor();
  for (std::size_t i = 0; i < h.bytes.size(); ++i) {
    h.bytes[i] = static_cast<std::uint8_t>(std::stoi(std::string(hex + 2 * i, 2), nullptr, 16));
  }
  h.offset = std::strtoull(args[1], nullptr, 10);
  const std::size_t n = std::strtoull(args[2], nullptr, 10);
  void* p = api().open_handle(h);
  std::vector<unsigned char> buf(n);
  api().copy(buf.data(), p, n);
  for (auto& c : buf) ++c;
  api().copy(p, buf.data(), n);
  api().close_handle(p);
  return 0;
}

namespace {

TEST_F(GpuDevice, IpcHandleOpensInAnotherProcess) {
  constexpr std::size_t n = 1 << 20;
  char* d = static_cast<char*>(g.allocate(2 * n));
  std::vector<unsigned char> in(n, 41), out(n);
  g.copy(d + n, in.data(), n);
  IpcHandle h = g.export_handle(d + n);  // an interior pointer: the offset travels
  EXPECT_EQ(h.offset, n);
  std::string hex;
  for (auto b : h.bytes) {
    char two[3];
    std::snprintf(two, sizeof two, "%02x", b);
    hex += two;
  }
  std::string self = "/proc/self/exe";
  std::string flag = "--ipc-child";
  std::string offset = std::to_string(h.offset);
  std::string size = std::to_string(n);
  char* argv[] = {self.data(), flag.data(), hex.data(), offset.data(), size.data(), nullptr};
  pid_t pid = 0;
  ASSERT_EQ(::posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv, environ), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  g.copy(out.data(), d + n, n);
  EXPECT_EQ(out, std::vector<unsigned char>(n, 42));
  g.free(d);
}

}  // namespace
}  // namespace baton::gpu

int main(int argc, char** argv) {
  if (argc == 5 && std::string_view(argv[1]) == "--ipc-child") {
    return baton::gpu::ipc_child(argv + 2);
  }
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  // CTest's SKIP_RETURN_CODE: a run that skipped (no GPU) is reported as skipped, not passed.
  return rc == 0 && ::testing::UnitTest::GetInstance()->skipped_test_count() > 0 ? 77 : rc;
}
