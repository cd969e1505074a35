#pragma once

// RdmaBuffer: the data plane. A proc registers a region of its host or device memory; the
// handle is small and serializable, so it travels in any actor message; any other proc then
// reads or writes the region directly, without the owner's actors taking part.
//
//   // in the owner (e.g. a parameter server actor)
//   auto buf = baton::RdmaBuffer::register_memory(weights.data(), weights.size());
//   // in a worker that received `buf` in a message
//   buf.read_into(local.data(), local.size()).get();
//
// Backends, best first, chosen for each pair of memories:
//   local     the owner's own process: a plain copy (or a device copy).
//   gpu_ipc   device memory of a proc on this host, opened through the vendor's IPC handle.
//   ucx       host memory, UCX RMA (shared memory on a host, verbs across).
//   messages  chunks through the owner's rdma actor; works everywhere, for any memory.
// BATON_RDMA_BACKEND=auto|ucx|gpu_ipc|messages (or set_rdma_backend) forces one; a forced
// backend that cannot serve a transfer fails it with a message saying why.
//
// Invariants:
//   R-2 A transfer's future completes only once no byte of it will be written any more: the
//       destination may be reused or freed as soon as it fails or succeeds.
//   R-3 Errors come in bounded time, as RdmaError saying what to do: a size that does not fit,
//       a dropped buffer, an owner that is gone or stopped, a transfer slower than the timeout.
//   R-4 After drop() no transfer touches the region; the owner may free it once drop's future
//       is done. A proc that begins to stop drops every region first, before its actors stop.
//       (A transfer its UCX worker serves, checked just before the drop, may still read it.)

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "baton/actor/actor_ref.hpp"
#include "baton/actor/future.hpp"
#include "baton/gpu/gpu.hpp"

namespace baton {

/// How a transfer moves: `local` (the owner's own process copies), `gpu_ipc` (device memory of a
/// proc on this host, mapped), `cma` (host memory of a proc on this host, copied by the kernel
/// between the two processes: cross-memory attach), `ucx` (one-sided, or staged through the
/// owner's worker), `messages` (in chunks through the owner's rdma actor).
enum class RdmaBackend : std::uint8_t { automatic, local, gpu_ipc, ucx, messages, cma };
std::string_view to_string(RdmaBackend b);

/// A transfer could not be done; the message says why and what to do.
class RdmaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class RdmaBuffer;
namespace detail {
class RdmaAgent;
/// The rdma actor of the proc that registered `buffer` (for the rdma layer).
const ActorRef<RdmaAgent>& owner_of(const RdmaBuffer& buffer);
}  // namespace detail

class RdmaBuffer {
 public:
  /// What a handle carries to other processes.
  struct Descriptor {
    std::uint64_t id = 0;
    std::uint64_t size = 0;
    std::string host;  // this host's identity: hostname and boot id
    std::int32_t pid = 0;
    bool device = false;
    std::uint64_t address = 0;  // in the owner's address space
    std::string ucx_worker;     // empty: the owner has no UCX
    std::string rkey;
    gpu::IpcHandle ipc;
    template <class Ar>
    void serialize(Ar& ar) {
      ar(id, size, host, pid, device, address, ucx_worker, rkey, ipc);
    }
  };

  RdmaBuffer() = default;

  /// Registers `size` bytes at `data` (host or device memory) in this process. The memory must
  /// stay valid until drop() has completed. Needs a baton::Runtime in this process.
  static RdmaBuffer register_memory(void* data, std::size_t size);
  /// Allocates `size` bytes of host memory for peers on this host to copy from or into without
  /// this process's help (UCX's shared memory); freed by drop().
  static RdmaBuffer allocate(std::size_t size);

  bool valid() const { return desc_ != nullptr; }
  std::size_t size() const;
  bool device() const;
  /// The memory, in the owning process; null elsewhere.
  void* data() const;

  /// Copies `size` bytes at `offset` of this buffer into `dst` (host or device memory).
  Future<void> read_into(void* dst, std::size_t size, std::size_t offset = 0) const;
  /// Copies `size` bytes from `src` into this buffer at `offset`.
  Future<void> write_from(const void* src, std::size_t size, std::size_t offset = 0) const;
  /// Unregisters the buffer everywhere; later transfers fail with RdmaError.
  Future<void> drop() const;

  const Descriptor& descriptor() const;

  template <class Ar>
  void save(Ar& ar) const {
    ar(descriptor(), owner_);
  }
  template <class Ar>
  void load(Ar& ar) {
    auto d = std::make_shared<Descriptor>();
    ar(*d, owner_);
    desc_ = std::move(d);
  }

 private:
  friend const ActorRef<detail::RdmaAgent>& detail::owner_of(const RdmaBuffer& buffer);
  std::shared_ptr<const Descriptor> desc_;
  ActorRef<detail::RdmaAgent> owner_;
};

inline const ActorRef<detail::RdmaAgent>& detail::owner_of(const RdmaBuffer& buffer) {
  return buffer.owner_;
}

/// The backend a transfer between `buffer` and the local memory at `local` uses from this
/// process.
RdmaBackend rdma_backend(const RdmaBuffer& buffer, const void* local);
/// Forces a backend for this runtime's transfers (automatic: choose per pair). Like every rdma
/// setting and count, it belongs to the runtime: a runtime made after this one starts afresh,
/// and without a runtime these throw UsageError.
void set_rdma_backend(RdmaBackend backend);

/// Several transfers at once: submit() starts them all, its future completes when every one has
/// failed with the first error if any failed.
class RdmaBatch {
 public:
  RdmaBatch& read(const RdmaBuffer& buffer, void* dst, std::size_t size, std::size_t offset = 0);
  RdmaBatch& write(const RdmaBuffer& buffer, const void* src, std::size_t size,
                   std::size_t offset = 0);
  Future<void> submit();

 private:
  struct Op {
    RdmaBuffer buffer;
    void* dst;
    const void* src;
    std::size_t size, offset;
  };
  std::vector<Op> ops_;
};

/// Transfers this runtime started, by the backend that did them (for tests and diagnostics).
struct RdmaStats {
  std::uint64_t local = 0, gpu_ipc = 0, ucx = 0, messages = 0;
  /// Transfers by cross-memory attach.
  std::uint64_t cma = 0;
  /// Empty while cross-memory attach works here; else why the kernel refused it (a ptrace
  /// restriction such as Yama's kernel.yama.ptrace_scope), found once: other backends serve.
  std::string cma_refused;
  /// Chunks of transfers moved in pieces: by the messages backend (4 MiB), and by UCX through
  /// staging memory (32 MiB) where the owner's worker must serve (memory UCX did not map here).
  std::uint64_t chunks = 0;
};
RdmaStats rdma_stats();

/// How long a transfer may take before it fails (default 30 s; BATON_RDMA_TIMEOUT_MS).
void set_rdma_timeout(std::chrono::milliseconds timeout);

}  // namespace baton
