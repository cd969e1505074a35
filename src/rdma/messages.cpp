// The messages backend: chunks through the owner's rdma actor, kWindow in flight; and the pump
// that moves any transfer in chunks (see Pump).

#include <algorithm>

#include "rdma/transfer.hpp"

namespace baton::rdma_detail {

void Pump::start() {
  for (std::size_t i = 0; i < (ucx ? kUcxWindow : kWindow); ++i) issue();
}

void Pump::issue() {
  std::size_t at = 0;
  std::size_t len = 0;
  {
    std::lock_guard lock(mu);
    if (next >= size || op->failed()) return;
    at = next;
    len = std::min(ucx ? kUcxChunk : kChunk, size - next);
    next += len;
  }
  op->add(true);
  try {
    if (ucx) {
      move_by_ucx(at, len);
    } else {
      move_by_message(at, len);
    }
  } catch (const std::exception& e) {
    finished(e.what());
  }
}

/// A chunk's end: the next one starts, or the transfer fails.
void Pump::finished(const std::string& error) {
  if (!error.empty()) return op->done(true, error);
  op->state().settings.chunk_landed();
  op->done(true);
  issue();
}

void Pump::move_by_message(std::size_t at, std::size_t len) {
  auto self = shared_from_this();
  const auto id = buffer.descriptor().id;
  if (dst != nullptr) {
    auto reply = detail::owner_of(buffer).call(&RdmaAgent::read, id, offset + at, len);
    const auto& state = reply.state();
    state->on_ready([self, state, at, len] {
      std::string error;
      try {
        Bytes b = state->value();
        if (b.size() != len) throw RdmaError("short chunk");
        self->op->guarded([&] { copy_any(self->dst + at, b.data(), len, self->device); });
      } catch (...) {
        error = reason(std::current_exception(), self->buffer);
      }
      self->finished(error);
    });
    return;
  }
  std::vector<std::byte> staged(len);
  if (!op->guarded([&] { copy_any(staged.data(), src + at, len, device); })) {
    return op->done(true);  // failed already: nothing to send
  }
  auto reply = detail::owner_of(buffer).call(&RdmaAgent::write, id, offset + at,
                                             Bytes::adopt(std::move(staged)));
  when_done(std::move(reply), buffer, [self](const std::string& error) { self->finished(error); });
}

std::shared_ptr<Pump> make_pump(const TransferPtr& op, const RdmaBuffer& b, void* dst,
                                const void* src, std::size_t size, std::size_t offset) {
  auto pump = std::make_shared<Pump>();
  pump->op = op;
  pump->buffer = b;
  pump->dst = static_cast<std::byte*>(dst);
  pump->src = static_cast<const std::byte*>(src);
  pump->size = size;
  pump->offset = offset;
  return pump;
}

void transfer_messages(const TransferPtr& op, const RdmaBuffer& b, void* dst, const void* src,
                       std::size_t size, std::size_t offset, bool local_device) {
  ++op->state().settings.messages;
  op->state().settings.moved(RdmaBackend::messages, size, dst != nullptr);
  auto pump = make_pump(op, b, dst, src, size, offset);
  pump->device = local_device;
  pump->start();
  op->done(true);
}

}  // namespace baton::rdma_detail
