#pragma once

// The process's UCX worker for RdmaBuffer: memory registration and one-sided get/put.
//
// UCX moves user memory one-sidedly only where the transport can (CMA, verbs); elsewhere (e.g.
// shared memory with memory UCX did not allocate) the owner's worker must make progress for a
// peer's get or put to finish. So the worker has its own progress thread: it spins while there
// is work and sleeps on the worker's event fd when there is none.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace baton::rdma_detail {

/// Memory registered with UCX, and the packed key a peer needs to reach it.
struct UcxRegion {
  void* memh = nullptr;
  void* address = nullptr;
  std::size_t size = 0;
  std::string rkey;
};

class Ucx {
 public:
  /// A UCX worker of its own, with its progress thread (one per runtime: see RdmaState); null,
  /// with `why` set, if UCX cannot start.
  static std::shared_ptr<Ucx> start(std::string* why);

  /// This worker's address, for peers' endpoints.
  const std::string& address() const;

  /// Registers `size` bytes at `address`; with a null `address`, UCX allocates them (shared
  /// memory that peers on this host map and copy from without this process's help).
  UcxRegion map(void* address, std::size_t size);
  void unmap(UcxRegion& region);

  /// Whether UCX mapped the peer's memory under `rkey` into this process (memory UCX allocated,
  /// on this host): a transfer is then a copy this process makes alone. Otherwise the owner's
  /// worker serves it (or a NIC does), and it lasts as long as the owner takes.
  bool mapped(const std::string& worker, const std::string& rkey, std::uint64_t remote);

  /// `done("")` on success, else `done(reason)`; on the progress thread or the caller's.
  using Done = std::function<void(const std::string& error)>;
  /// Copies `size` bytes at `remote` of the peer `worker` (with `rkey`) into `local`. Never
  /// completes if the peer dies or stops while its worker must help (not mapped()).
  void get(const std::string& worker, const std::string& rkey, std::uint64_t remote, void* local,
           std::size_t size, Done done);
  /// Copies `local` to the peer; done once the data is in the peer's memory.
  void put(const std::string& worker, const std::string& rkey, std::uint64_t remote,
           const void* local, std::size_t size, Done done);
  /// Forgets the unpacked key (and any memory it mapped) of a buffer that was dropped.
  void forget(const std::string& worker, const std::string& rkey);

  ~Ucx();
  Ucx(const Ucx&) = delete;
  Ucx& operator=(const Ucx&) = delete;

 private:
  Ucx();
  struct Impl;
  std::shared_ptr<Impl> impl_;  // shared with the progress thread
};

}  // namespace baton::rdma_detail
