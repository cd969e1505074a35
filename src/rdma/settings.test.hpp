#pragma once

// Test support: this runtime's rdma settings changed for a scope and restored whatever happens
// (a failed ASSERT returns early, an exception unwinds), so no test leaves a forced backend, a
// short timeout or a hook behind for the next, and tests pass in any order.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include "baton/rdma/rdma.hpp"
#include "rdma/registry.hpp"

namespace baton::rdma_testing {

/// Takes note of every setting on construction and puts each back on destruction. The setters
/// change this process's settings at once; a hook installed here runs for every chunk that
/// lands in this process until the guard ends.
class ScopedRdmaSettings {
 public:
  ScopedRdmaSettings()
      : state_(rdma_detail::rdma_state()),
        backend_(state_->settings.backend.load()),
        timeout_ms_(state_->settings.timeout_ms.load()),
        ucx_stall_ms_(state_->settings.ucx_stall_ms.load()) {}
  ~ScopedRdmaSettings() {
    auto& s = state_->settings;
    if (refused_cma_) {
      s.cma_refuse_for_test = false;
      s.forget_cma_refusal();
    }
    if (hooked_) s.exchange_chunk_hook(std::move(hook_));
    s.ucx_stall_ms = ucx_stall_ms_;
    s.timeout_ms = timeout_ms_;
    s.backend = backend_;
  }
  ScopedRdmaSettings(const ScopedRdmaSettings&) = delete;
  ScopedRdmaSettings& operator=(const ScopedRdmaSettings&) = delete;

  ScopedRdmaSettings& backend(RdmaBackend b) {
    set_rdma_backend(b);
    return *this;
  }
  ScopedRdmaSettings& timeout(std::chrono::milliseconds t) {
    set_rdma_timeout(t);
    return *this;
  }
  /// How long a UCX chunk may go unanswered before it moves through messages instead.
  ScopedRdmaSettings& ucx_stall(std::chrono::milliseconds t) {
    state_->settings.ucx_stall_ms = t.count();
    return *this;
  }
  /// Has this process's kernel refuse cross-memory attach, as one with a ptrace restriction
  /// does (process_vm_readv fails with EPERM), until the guard ends.
  ScopedRdmaSettings& refuse_cma() {
    state_->settings.cma_refuse_for_test = true;
    refused_cma_ = true;
    return *this;
  }
  /// Runs `hook` each time a chunk of a transfer lands here, before the transfer asks for its
  /// next chunk; one at a time, on an rdma thread.
  ScopedRdmaSettings& on_chunk(std::function<void()> hook) {
    auto old = state_->settings.exchange_chunk_hook(std::move(hook));
    if (!std::exchange(hooked_, true)) hook_ = std::move(old);
    return *this;
  }

 private:
  std::shared_ptr<rdma_detail::RdmaState> state_;  // the runtime's, which these settings are
  RdmaBackend backend_;
  std::int64_t timeout_ms_;
  std::int64_t ucx_stall_ms_;
  bool hooked_ = false;
  bool refused_cma_ = false;
  std::function<void()> hook_;
};

}  // namespace baton::rdma_testing
