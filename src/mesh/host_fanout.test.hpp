#pragma once

// For tests: meshes spawned while a HostFanOut lives get a cast tree with at most `n` members of
// this host per node, so that a test reaches members through forwarding procs with a few procs
// (by default a node sends to up to kCastHostFanOut members of its host directly).

#include <cstdlib>
#include <string>

namespace baton::test_support {

class HostFanOut {
 public:
  explicit HostFanOut(int n) { ::setenv(kVar, std::to_string(n).c_str(), 1); }
  ~HostFanOut() { ::unsetenv(kVar); }
  HostFanOut(const HostFanOut&) = delete;
  HostFanOut& operator=(const HostFanOut&) = delete;

 private:
  static constexpr const char* kVar = "BATON_CAST_HOST_FANOUT";
};

}  // namespace baton::test_support
