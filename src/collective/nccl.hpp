#pragma once

// Collectives on device memory through NCCL (NVIDIA) or RCCL (AMD), loaded with dlopen like the
// gpu layer's runtime: the library of the gpu layer's vendor, so one binary serves both and a
// machine with neither builds and runs the rest. Communicators are non-blocking: every wait polls
// the library's error state, the group's timeout and the other ranks' liveness, and a stuck
// communicator is aborted, so a rank that dies never leaves the others hanging inside NCCL.

#include <array>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "baton/collective/collective.hpp"

namespace baton::collective::nccl {

/// NCCL's unique id: made by one rank, sent to the others through baton.
using DeviceCommId = std::array<char, 128>;

/// Why NCCL/RCCL cannot be used in this process (no GPU, no library, too old a library), with
/// what to do; empty when it can.
std::string device_collectives_unavailable();

/// Makes the id rank 0 hands to every rank (device_collectives_unavailable() must be empty).
DeviceCommId make_device_comm_id();

/// One rank's NCCL/RCCL communicator on `device`. Each collective returns once its result is in
/// device memory; it first waits for the device's queued work (so buffers written by any stream
/// are ready). While waiting it calls `alive` about once a second, which throws naming the ranks
/// that are gone; a failure or a wait longer than `timeout` aborts the communicator and throws.
class DeviceComm {
 public:
  DeviceComm(const DeviceCommId& id, int rank, int size, int device,
             std::chrono::milliseconds timeout, std::function<void()> alive);
  ~DeviceComm();
  DeviceComm(const DeviceComm&) = delete;
  DeviceComm& operator=(const DeviceComm&) = delete;

  void allreduce(void* data, std::size_t count, DType type, ReduceOp op);
  void broadcast(void* data, std::size_t bytes, int root);
  void allgather(const void* in, std::size_t in_bytes, void* out);
  void reduce_scatter(const void* in, void* out, std::size_t out_count, DType type, ReduceOp op);
  /// Abandons the communicator's work at once (the group broke elsewhere); later calls throw.
  void abort();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace baton::collective::nccl
