// The ucx backend's transfers: one-sided straight between the two memories where UCX mapped the
// owner's memory here; else in chunks through staging memory, served by the owner's worker.

#include <chrono>
#include <cstring>
#include <set>

#include "rdma/transfer.hpp"
#include "rdma/ucx.hpp"

namespace baton::rdma_detail {

Staging::Slot Staging::take() {
  std::byte* p = nullptr;
  {
    std::lock_guard lock(mu_);
    if (!free_.empty()) {
      p = free_.back();
      free_.pop_back();
    }
  }
  if (p == nullptr) p = new std::byte[kUcxChunk];  // NOLINT: owned by the slot's deleter
  return {p, [pool = shared_from_this()](std::byte* q) { pool->give_back(q); }};
}

void Staging::give_back(std::byte* p) {
  std::unique_lock lock(mu_);
  if (free_.size() < kUcxWindow) {
    free_.push_back(p);
    return;
  }
  lock.unlock();
  delete[] p;  // NOLINT: see take()
}

Staging::~Staging() {
  for (std::byte* p : free_) delete[] p;  // NOLINT: see take()
}

namespace {

/// While a UCX transfer that needs the owner's help runs, asks every 250 ms whether the owner
/// still answers: a dead owner will never finish it, so the transfer fails at once rather than
/// at its timeout.
void watch_owner(Workers& workers, const std::weak_ptr<Transfer>& weak, const RdmaBuffer& b) {
  workers.at(std::chrono::steady_clock::now() + std::chrono::milliseconds(250), [weak, b] {
    auto op = weak.lock();
    if (op == nullptr || op->completed()) return;
    when_done(detail::owner_of(b).call(&RdmaAgent::check, b.descriptor().id, 0, 0), b,
              [weak, b](const std::string& error) {
                auto running = weak.lock();
                if (running == nullptr) return;
                if (!error.empty() && !dropped(error)) {
                  running->fail(error);
                } else {
                  watch_owner(running->state().workers, weak, b);
                }
              });
  });
}

}  // namespace

void Pump::move_by_ucx(std::size_t at, std::size_t len) {
  auto self = shared_from_this();
  const auto& d = buffer.descriptor();
  RdmaState& state_of_op = op->state();
  auto* u = state_of_op.ucx();
  Staging::Slot slot = state_of_op.staging->take();
  // 0: under way, 1: UCX answered, 2: given up on (a read moved by messages instead).
  auto state = std::make_shared<std::atomic<int>>(0);
  // UCX ends on its progress thread; the rest runs on a worker thread. A chunk abandoned
  // with its transfer keeps its slot until UCX is done with it.
  auto then = [self, slot, at, len, state](const std::string& error) mutable {
    if (state->exchange(1) == 2) return;  // the slot goes back now
    // The pump moves to the worker: the UCX thread that ran this never holds the last of it.
    RdmaState& rdma = self->op->state();
    rdma.workers.post([self = std::move(self), slot, at, len, error] {
      if (!error.empty()) return part_done(self->op, self->buffer, true, error);
      if (self->dst != nullptr) {
        self->op->guarded([&] { std::memcpy(self->dst + at, slot.get(), len); });
      }
      self->finished({});
    });
  };
  if (dst != nullptr) {
    u->get(d.ucx_worker, d.rkey, d.address + offset + at, slot.get(), len, then);
    // Seen rarely with UCX 1.13 on a loaded host: a get its owner never answers, though the
    // owner lives and answers messages. The chunk then moves through messages, and so does
    // the owner's memory from then on. (Writes wait: a put that lands late would overwrite.)
    const std::chrono::milliseconds stall(state_of_op.settings.ucx_stall_ms.load());
    state_of_op.workers.at(std::chrono::steady_clock::now() + stall,
                           [self, state, at, len, worker = d.ucx_worker] {
                             int running = 0;
                             if (!state->compare_exchange_strong(running, 2)) return;
                             self->op->state().stalled.add(worker);
                             self->move_by_message(at, len);
                           });
  } else if (op->guarded([&] { std::memcpy(slot.get(), src + at, len); })) {
    u->put(d.ucx_worker, d.rkey, d.address + offset + at, slot.get(), len, then);
  } else {
    op->done(true);  // failed already: nothing to send
  }
}

void transfer_ucx(const TransferPtr& op, const RdmaBuffer& b, void* dst, const void* src,
                  std::size_t size, std::size_t offset, bool /*local_device*/) {
  const bool reading = dst != nullptr;
  const auto& d = b.descriptor();
  ++op->state().settings.ucx;
  op->state().settings.moved(RdmaBackend::ucx, size, dst != nullptr);
  // The check comes first, as for gpu_ipc.
  check_then(op, b, offset, size, [op, b, d, dst, src, size, offset, reading] {
    auto* u = op->state().ucx();
    if (!u->mapped(d.ucx_worker, d.rkey, d.address + offset)) {
      // The owner's worker must serve this one: in chunks through staging memory, so that
      // an owner that stops answering ends the transfer at its timeout.
      watch_owner(op->state().workers, op, b);
      auto pump = make_pump(op, b, dst, src, size, offset);
      pump->ucx = !op->state().stalled.contains(d.ucx_worker);
      pump->start();
      return;
    }
    // A copy this process makes alone, straight between the two memories.
    if (!op->start_unguarded()) return;
    auto finished = [op, b](const std::string& error) { part_done(op, b, false, error); };
    try {
      if (reading) {
        u->get(d.ucx_worker, d.rkey, d.address + offset, dst, size, finished);
      } else {
        u->put(d.ucx_worker, d.rkey, d.address + offset, src, size, finished);
      }
    } catch (const std::exception& e) {
      finished(e.what());
    }
  });
  op->done(true);
}

}  // namespace baton::rdma_detail
