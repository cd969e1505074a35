// The local backend: the owner's own process copies at once.

#include "rdma/transfer.hpp"

namespace baton::rdma_detail {

void transfer_local(const TransferPtr& op, const RdmaBuffer& b, void* dst, const void* src,
                    std::size_t size, std::size_t offset, bool local_device) {
  const bool reading = dst != nullptr;
  const auto& d = b.descriptor();
  ++op->state().settings.local;
  op->state().settings.moved(RdmaBackend::local, size, dst != nullptr);
  try {
    Registry::get().use(d.id, offset, size, [&](const Region& r) {
      const bool device = r.device || local_device;
      if (reading) {
        copy_any(dst, r.data + offset, size, device);
      } else {
        copy_any(r.data + offset, src, size, device);
      }
    });
    op->done(true);
  } catch (const std::exception& e) {
    op->done(true, e.what());
  }
}

}  // namespace baton::rdma_detail
