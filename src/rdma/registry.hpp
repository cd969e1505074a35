#pragma once

// Internal: the owner's side of RdmaBuffer. The regions this process registered, the rdma actor
// that answers for them, and what every file of the rdma layer shares (this host's identity,
// copies between any two memories of this process).

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>

#include "baton/actor/actor_ref.hpp"
#include "baton/actor/proc.hpp"
#include "baton/gpu/gpu.hpp"
#include "baton/rdma/rdma.hpp"
#include "baton/wire/bytes.hpp"
#include "rdma/state.hpp"
#include "rdma/ucx.hpp"

namespace baton::rdma_detail {

const std::string& host_identity();
/// Copies between any two memories of this process.
void copy_any(void* dst, const void* src, std::size_t n, bool device);

// --- The owner's side: registered regions. ---

struct Region {
  std::uint64_t id = 0;
  std::byte* data = nullptr;
  std::size_t size = 0;
  bool device = false;
  bool owned = false;  // allocate(): freed with the region
  rdma_detail::UcxRegion ucx;
  std::shared_ptr<Ucx> ucx_worker;  // that mapped `ucx`: kept until it unmaps it
  Region() = default;
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
  ~Region() {
    if (ucx.memh != nullptr) {
      ucx_worker->unmap(ucx);  // frees UCX-allocated memory too
    } else if (owned) {
      std::free(data);  // NOLINT: allocated with aligned_alloc
    }
  }
};
using RegionPtr = std::shared_ptr<Region>;

/// The regions this process registered. A copy that touches one holds `use_` shared; removing
/// one takes it alone, so drop() and a stopping proc wait for copies under way (R-4).
class Registry {
 public:
  /// The registry of this process's node (see actor/node.hpp): a new runtime starts empty.
  static Registry& get();
  void add(RegionPtr r) {
    std::lock_guard lock(mu_);
    regions_[r->id] = std::move(r);
  }
  RegionPtr find(std::uint64_t id) const {
    std::lock_guard lock(mu_);
    auto it = regions_.find(id);
    return it == regions_.end() ? nullptr : it->second;
  }
  /// Checks that the region holds [offset, offset + size); throws what a peer should be told.
  void expect(std::uint64_t id, std::uint64_t offset, std::uint64_t size) const {
    std::shared_lock in_use(use_);
    checked(id, offset, size);
  }
  /// Runs `touch(region)` on the checked region, which stays registered meanwhile.
  template <class F>
  void use(std::uint64_t id, std::uint64_t offset, std::uint64_t size, F touch) const {
    std::shared_lock in_use(use_);
    touch(*checked(id, offset, size));
  }
  /// Unregisters `id` once no copy touches it; false if it was not registered. After the proc
  /// began to stop, every region is gone already and that is no error.
  bool remove(std::uint64_t id) {
    RegionPtr r;
    std::unique_lock alone(use_);
    std::lock_guard lock(mu_);
    auto it = regions_.find(id);
    if (it == regions_.end()) return stopping_;
    r = std::move(it->second);
    regions_.erase(it);
    return true;
  }
  /// The proc is stopping: its actors, which may own the memory, are about to go. Every region
  /// is unregistered once no copy touches it; later transfers fail as dropped.
  void close() {
    std::unordered_map<std::uint64_t, RegionPtr> gone;
    std::unique_lock alone(use_);
    std::lock_guard lock(mu_);
    stopping_ = true;
    gone.swap(regions_);
  }
  std::uint64_t next_id() { return ++last_id_; }

  static std::string fit_message(std::uint64_t id, std::uint64_t buffer, std::uint64_t offset,
                                 std::uint64_t size) {
    return "a transfer of " + std::to_string(size) + " bytes at offset " + std::to_string(offset) +
           " does not fit RdmaBuffer #" + std::to_string(id) + " of " + std::to_string(buffer) +
           " bytes: transfer at most size() - offset bytes";
  }

 private:
  RegionPtr checked(std::uint64_t id, std::uint64_t offset, std::uint64_t size) const {
    RegionPtr r = find(id);
    if (r == nullptr) {
      throw RdmaError(
          "RdmaBuffer #" + std::to_string(id) +
          (stopping_
               ? " was dropped: its owner's proc is stopping; register the memory in a live proc"
               : " was dropped (or never registered in this process): register "
                 "the memory again and send the new handle"));
    }
    if (offset > r->size || size > r->size - offset) {
      throw RdmaError(fit_message(id, r->size, offset, size));
    }
    return r;
  }

  mutable std::shared_mutex use_;
  mutable std::mutex mu_;
  std::unordered_map<std::uint64_t, RegionPtr> regions_;
  std::atomic<bool> stopping_{false};
  std::atomic<std::uint64_t> last_id_{0};
};

}  // namespace baton::rdma_detail

namespace baton {
namespace detail {

/// Each process's rdma actor: answers the checks that come with one-sided transfers, and moves
/// the bytes itself for the messages backend.
class RdmaAgent : public Actor {
 public:
  void check(std::uint64_t id, std::uint64_t offset, std::uint64_t size) {
    rdma_detail::Registry::get().expect(id, offset, size);
  }
  Bytes read(std::uint64_t id, std::uint64_t offset, std::uint64_t size) {
    Bytes out;
    rdma_detail::Registry::get().use(id, offset, size, [&](const rdma_detail::Region& r) {
      if (!r.device) {
        out = Bytes::copy(r.data + offset, size);
        return;
      }
      std::vector<std::byte> staged(size);
      gpu::api().copy(staged.data(), r.data + offset, size);
      out = Bytes::adopt(std::move(staged));
    });
    return out;
  }
  void write(std::uint64_t id, std::uint64_t offset, const Bytes& data) {
    rdma_detail::Registry::get().use(id, offset, data.size(), [&](const rdma_detail::Region& r) {
      rdma_detail::copy_any(r.data + offset, data.data(), data.size(), r.device);
    });
  }
  void drop(std::uint64_t id) {
    if (!rdma_detail::Registry::get().remove(id)) {
      throw RdmaError("RdmaBuffer #" + std::to_string(id) + " was already dropped");
    }
  }
  static constexpr auto endpoints =
      baton::endpoints<&RdmaAgent::check, &RdmaAgent::read, &RdmaAgent::write, &RdmaAgent::drop>();
};

}  // namespace detail

namespace rdma_detail {

using detail::RdmaAgent;

/// This process's rdma actor, spawned on first use.
ActorRef<RdmaAgent> agent();

}  // namespace rdma_detail
}  // namespace baton
