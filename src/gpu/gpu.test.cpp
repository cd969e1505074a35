// The portable device API's loaders, which need no device: each vendor's runtime that is
// installed loads and reports why it has no device, and every entry point says so instead of
// crashing. The tests that need a device are gpu_device.test.cpp's.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "baton/gpu/gpu.hpp"

namespace baton::gpu {
namespace {

using ::testing::HasSubstr;

/// Sets an environment variable for a scope and puts back what it was (or unsets it) whatever
/// happens, so no test sees another's.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* was = std::getenv(name)) was_ = was;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (was_) {
      ::setenv(name_.c_str(), was_->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> was_;
};

void expect_probe_is_truthful(const Probe& p, const char* call) {
  if (!p.loaded) {
    // Not installed here: the error names what was looked for.
    EXPECT_THAT(p.error, HasSubstr("runtime found (tried"));
    EXPECT_EQ(p.device_count, 0);
    return;
  }
  EXPECT_GT(p.runtime_version, 0) << p.library;
  EXPECT_FALSE(p.library.empty());
  if (p.device_count == 0) {
    EXPECT_THAT(p.error, HasSubstr(call));
  }
}

TEST(GpuLoader, CudaRuntimeLoadsOrSaysWhatWasTried) {
  Probe p = probe(Vendor::cuda);
  std::printf("cuda: loaded=%d library=%s version=%d devices=%d error=%s\n", p.loaded,
              p.library.c_str(), p.runtime_version, p.device_count, p.error.c_str());
  expect_probe_is_truthful(p, "cudaGetDeviceCount");
}

TEST(GpuLoader, HipRuntimeLoadsOrSaysWhatWasTried) {
  Probe p = probe(Vendor::hip);
  std::printf("hip: loaded=%d library=%s version=%d devices=%d error=%s\n", p.loaded,
              p.library.c_str(), p.runtime_version, p.device_count, p.error.c_str());
  expect_probe_is_truthful(p, "hipGetDeviceCount");
#ifdef BATON_EXPECT_HIP_RUNTIME
  // make deps installs Debian's libamdhip64, so CI always exercises the HIP loader for real.
  EXPECT_TRUE(p.loaded) << p.error;
#endif
}

TEST(GpuLoader, AMissingLibraryIsReportedNotFatal) {
  ScopedEnv missing("BATON_HIPRT", "libamdhip64-does-not-exist.so");
  Probe p = probe(Vendor::hip);
  EXPECT_FALSE(p.loaded);
  EXPECT_THAT(p.error, HasSubstr("libamdhip64-does-not-exist.so"));
}

TEST(GpuLoader, NoneIsOffAndEveryEntryPointSaysSo) {
  DeviceApi g("none");
  EXPECT_EQ(g.vendor(), Vendor::none);
  EXPECT_EQ(g.device_count(), 0);
  EXPECT_FALSE(g.available());
  EXPECT_THAT(g.status(), HasSubstr("BATON_GPU=none"));
  int host = 0;
  EXPECT_FALSE(g.pointer_info(&host).device);
  try {
    (void)g.allocate(16);
    FAIL() << "allocate without a GPU returned";
  } catch (const NoGpuError& e) {
    EXPECT_THAT(e.what(), HasSubstr("no GPU"));
    EXPECT_THAT(e.what(), HasSubstr("BATON_GPU=none"));
  }
  EXPECT_THROW(g.copy(&host, &host, sizeof host), NoGpuError);
  EXPECT_THROW((void)g.create_stream(), NoGpuError);
  EXPECT_THROW((void)g.create_event(), NoGpuError);
  EXPECT_THROW((void)g.properties(0), NoGpuError);
  EXPECT_THROW(g.set_device(0), NoGpuError);
  EXPECT_THROW((void)g.export_handle(&host), NoGpuError);
  EXPECT_THROW((void)g.open_handle(IpcHandle{}), NoGpuError);
  EXPECT_THROW(g.synchronize(), NoGpuError);
}

TEST(GpuLoader, ABadChoiceIsNamed) {
  DeviceApi g("nvidia");
  EXPECT_EQ(g.vendor(), Vendor::none);
  EXPECT_THAT(g.status(), HasSubstr("'nvidia' is not one of cuda, hip, none"));
  EXPECT_THROW((void)g.allocate(1), NoGpuError);
}

TEST(GpuLoader, ForcedVendorWithoutDeviceSaysWhy) {
  for (const char* v : {"cuda", "hip"}) {
    DeviceApi g(v);
    if (g.available()) continue;  // a real device: gpu_device.test.cpp covers it
    EXPECT_EQ(g.vendor(), Vendor::none);
    EXPECT_THAT(g.status(), HasSubstr(std::string("BATON_GPU=") + v + " but"));
    try {
      (void)g.allocate(1);
      FAIL();
    } catch (const NoGpuError& e) {
      EXPECT_THAT(e.what(), HasSubstr(v));
    }
  }
}

}  // namespace
}  // namespace baton::gpu
