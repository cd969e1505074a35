// The gpu_ipc backend: device memory of a proc on this host, mapped here through GPU IPC.

#include "rdma/transfer.hpp"

namespace baton::rdma_detail {

std::byte* IpcCache::open(const RdmaBuffer::Descriptor& d) {
  std::string key = std::to_string(d.pid) + "/" + std::to_string(d.id);
  std::lock_guard lock(mu_);
  auto it = open_.find(key);
  if (it != open_.end()) return it->second;
  auto* p = static_cast<std::byte*>(gpu::api().open_handle(d.ipc));
  open_[key] = p;
  return p;
}

void IpcCache::forget(const RdmaBuffer::Descriptor& d) {
  std::string key = std::to_string(d.pid) + "/" + std::to_string(d.id);
  std::lock_guard lock(mu_);
  auto it = open_.find(key);
  if (it == open_.end()) return;
  try {
    gpu::api().close_handle(it->second);
  } catch (const gpu::GpuError&) {
    // The owner's allocation may be gone already; the mapping is released either way.
  }
  open_.erase(it);
}

void transfer_gpu_ipc(const TransferPtr& op, const RdmaBuffer& b, void* dst, const void* src,
                      std::size_t size, std::size_t offset, bool /*local_device*/) {
  const bool reading = dst != nullptr;
  const auto& d = b.descriptor();
  ++op->state().settings.gpu_ipc;
  op->state().settings.moved(RdmaBackend::gpu_ipc, size, dst != nullptr);
  // The check comes first: the copy must not touch memory its owner has dropped.
  check_then(op, b, offset, size, [op, d, dst, src, size, offset, reading] {
    if (!op->start_unguarded()) return;
    try {
      std::byte* remote = IpcCache::get().open(d) + offset;
      if (reading) {
        gpu::api().copy(dst, remote, size);
      } else {
        gpu::api().copy(remote, src, size);
      }
      op->done(false);
    } catch (const std::exception& e) {
      op->done(false, e.what());
    }
  });
  op->done(true);
}

}  // namespace baton::rdma_detail
