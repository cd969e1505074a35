// RdmaBuffer's transfers: which backend moves each (see transfer.hpp for the files that do).

#include "baton/rdma/rdma.hpp"

#include <unistd.h>

#include "rdma/transfer.hpp"
#include "rdma/ucx.hpp"

namespace baton {

std::string_view to_string(RdmaBackend b) {
  switch (b) {
    case RdmaBackend::automatic:
      return "auto";
    case RdmaBackend::local:
      return "local";
    case RdmaBackend::gpu_ipc:
      return "gpu_ipc";
    case RdmaBackend::ucx:
      return "ucx";
    case RdmaBackend::cma:
      return "cma";
    case RdmaBackend::messages:
      break;
  }
  return "messages";
}

}  // namespace baton

namespace baton::rdma_detail {
namespace {

RdmaBackend choose(RdmaState& state, const RdmaBuffer& b, const void* local, bool* local_device) {
  const auto& d = b.descriptor();
  *local_device = gpu::api().is_device(local);
  bool same_host = d.host == host_identity();
  bool same_process = same_host && d.pid == ::getpid();
  RdmaBackend forced = state.settings.backend.load();
  bool ipc_ok =
      d.device && same_host && gpu::api().available() && gpu::api().vendor() == d.ipc.vendor;
  bool ucx_ok = !d.device && !*local_device && !d.ucx_worker.empty() && state.ucx() != nullptr;
  bool cma_ok = !d.device && !*local_device && same_host && !same_process && d.address != 0 &&
                !state.settings.cma_refused.load();
  switch (forced) {
    case RdmaBackend::automatic:
    case RdmaBackend::local:
      break;
    case RdmaBackend::messages:
      return RdmaBackend::messages;
    case RdmaBackend::gpu_ipc:
      if (!ipc_ok) {
        throw RdmaError(
            "the gpu_ipc backend is forced (BATON_RDMA_BACKEND) but cannot serve "
            "this transfer: it needs device memory of a proc on this host and a GPU "
            "of the same vendor here; use auto");
      }
      return RdmaBackend::gpu_ipc;
    case RdmaBackend::ucx:
      if (!ucx_ok) {
        std::string why;
        state.ucx(&why);
        throw RdmaError(
            "the ucx backend is forced (BATON_RDMA_BACKEND) but cannot serve this "
            "transfer: it moves host memory only, between procs that both have "
            "UCX" +
            (why.empty() ? std::string() : " (here: " + why + ")") + "; use auto");
      }
      return RdmaBackend::ucx;
    case RdmaBackend::cma:
      if (!cma_ok) {
        const std::string refused = state.settings.cma_refused_why();
        throw RdmaError(
            "the cma backend is forced (BATON_RDMA_BACKEND) but cannot serve this transfer: "
            "it moves host memory between two procs of one host" +
            (refused.empty() ? std::string() : ", and this kernel refuses it (" + refused + ")") +
            "; use auto");
      }
      return RdmaBackend::cma;
  }
  if (same_process) return RdmaBackend::local;
  if (ipc_ok) return RdmaBackend::gpu_ipc;
  if (cma_ok) return RdmaBackend::cma;
  if (ucx_ok) return RdmaBackend::ucx;
  return RdmaBackend::messages;
}

std::string describe(const char* verb, const RdmaBuffer& b, std::size_t size, std::size_t offset) {
  return std::string(verb) + " of " + std::to_string(size) + " bytes at offset " +
         std::to_string(offset) + " of RdmaBuffer #" + std::to_string(b.descriptor().id) +
         " (owner " + detail::owner_of(b).id().to_string() + ")";
}

}  // namespace

Future<void> transfer(const RdmaBuffer& b, void* dst, const void* src, std::size_t size,
                      std::size_t offset) {
  const bool reading = dst != nullptr;
  const auto& d = b.descriptor();
  auto op = std::make_shared<Transfer>(describe(reading ? "read" : "write", b, size, offset));
  if (offset > d.size || size > d.size - offset) {
    op->fail(Registry::fit_message(d.id, d.size, offset, size));
    return op->future();
  }
  bool local_device = false;
  RdmaBackend backend = RdmaBackend::messages;
  try {
    backend = choose(op->state(), b, reading ? dst : src, &local_device);
  } catch (const RdmaError& e) {
    op->fail(e.what());
    return op->future();
  }
  op->add(true);  // held while the parts are set up, so none completes the transfer early
  // A local copy is done before this returns; everything else waits on another process.
  op->arm_timeout();
  switch (backend) {
    case RdmaBackend::automatic:
    case RdmaBackend::local:
      transfer_local(op, b, dst, src, size, offset, local_device);
      break;
    case RdmaBackend::gpu_ipc:
      transfer_gpu_ipc(op, b, dst, src, size, offset, local_device);
      break;
    case RdmaBackend::ucx:
      transfer_ucx(op, b, dst, src, size, offset, local_device);
      break;
    case RdmaBackend::cma:
      transfer_cma(op, b, dst, src, size, offset, local_device);
      break;
    case RdmaBackend::messages:
      transfer_messages(op, b, dst, src, size, offset, local_device);
      break;
  }
  return op->future();
}

}  // namespace baton::rdma_detail

namespace baton {

using rdma_detail::choose;
using rdma_detail::transfer;
using rdma_detail::Transfer;

Future<void> RdmaBuffer::read_into(void* dst, std::size_t size, std::size_t offset) const {
  if (dst == nullptr && size > 0) throw UsageError("read_into: null destination");
  return transfer(*this, dst, nullptr, size, offset);
}

Future<void> RdmaBuffer::write_from(const void* src, std::size_t size, std::size_t offset) const {
  if (src == nullptr && size > 0) throw UsageError("write_from: null source");
  return transfer(*this, nullptr, src, size, offset);
}

RdmaBackend rdma_backend(const RdmaBuffer& buffer, const void* local) {
  bool local_device = false;
  return choose(*rdma_detail::rdma_state(), buffer, local, &local_device);
}

void set_rdma_backend(RdmaBackend backend) {
  rdma_detail::rdma_state()->settings.backend = backend;
}

void set_rdma_timeout(std::chrono::milliseconds timeout) {
  rdma_detail::rdma_state()->settings.timeout_ms = timeout.count();
}

RdmaStats rdma_stats() {
  const auto state = rdma_detail::rdma_state();
  auto& s = state->settings;
  RdmaStats out;
  out.local = s.local.load();
  out.gpu_ipc = s.gpu_ipc.load();
  out.ucx = s.ucx.load();
  out.messages = s.messages.load();
  out.chunks = s.chunks.load();
  out.cma = s.cma.load();
  out.cma_refused = s.cma_refused_why();
  return out;
}

RdmaBatch& RdmaBatch::read(const RdmaBuffer& buffer, void* dst, std::size_t size,
                           std::size_t offset) {
  ops_.push_back({buffer, dst, nullptr, size, offset});
  return *this;
}

RdmaBatch& RdmaBatch::write(const RdmaBuffer& buffer, const void* src, std::size_t size,
                            std::size_t offset) {
  ops_.push_back({buffer, nullptr, src, size, offset});
  return *this;
}

Future<void> RdmaBatch::submit() {
  auto all = std::make_shared<Transfer>("a batch of " + std::to_string(ops_.size()) + " transfers");
  all->add(true);
  for (const Op& o : ops_) {
    Future<void> f = o.dst != nullptr ? o.buffer.read_into(o.dst, o.size, o.offset)
                                      : o.buffer.write_from(o.src, o.size, o.offset);
    all->add(false);  // each transfer writes on its own until its future completes
    const auto& state = f.state();
    state->on_ready([all, state] {
      std::string error;
      try {
        state->value();
      } catch (const std::exception& e) {
        error = e.what();
      }
      all->done(false, error);
    });
  }
  ops_.clear();
  all->done(true);
  return all->future();
}

}  // namespace baton
