// The message pool, and the mailbox queue.

#include "actor/message.hpp"

#include <mutex>
#include <new>
#include <vector>

namespace baton::detail {

namespace {

struct FreeNode {
  FreeNode* next;
};

constexpr std::size_t kBatch = 256;

// Full batches of free messages, shared by all threads.
struct Depot {
  std::mutex mu;
  std::vector<FreeNode*> batches;
};
Depot& depot() {
  static Depot* d = new Depot;  // never destroyed: threads may free messages during exit
  return *d;
}

struct ThreadCache {
  FreeNode* head = nullptr;
  std::size_t count = 0;
  ~ThreadCache() {
    while (head != nullptr) {
      FreeNode* n = head;
      head = head->next;
      ::operator delete (n, std::align_val_t{alignof(Message)});
    }
  }
};
thread_local ThreadCache t_cache;

}  // namespace

void* Message::operator new(std::size_t size) {
  ThreadCache& c = t_cache;
  if (c.head == nullptr) {
    Depot& d = depot();
    std::lock_guard lock(d.mu);
    if (!d.batches.empty()) {
      c.head = d.batches.back();
      d.batches.pop_back();
      c.count = kBatch;
    }
  }
  if (c.head != nullptr) {
    FreeNode* n = c.head;
    c.head = n->next;
    --c.count;
    return n;
  }
  return ::operator new (size, std::align_val_t{alignof(Message)});
}

void Message::operator delete(void* p) noexcept {
  ThreadCache& c = t_cache;
  auto* n = static_cast<FreeNode*>(p);
  if (c.count >= kBatch) {
    // Hand a full batch to the depot (bounded, so an idle pool does not hoard memory).
    Depot& d = depot();
    std::unique_lock lock(d.mu);
    if (d.batches.size() < 64) {
      d.batches.push_back(c.head);
      c.head = nullptr;
      c.count = 0;
    } else {
      lock.unlock();
      ::operator delete (p, std::align_val_t{alignof(Message)});
      return;
    }
  }
  n->next = c.head;
  c.head = n;
  ++c.count;
}

// --- MpscQueue ------------------------------------------------------------------------------

MpscQueue::~MpscQueue() {
  while (Message* m = pop()) delete m;
}

Message* MpscQueue::pop() {
  Message* tail = tail_;
  Message* next = tail->next.load(std::memory_order_acquire);
  if (tail == &stub_) {
    if (next == nullptr) return nullptr;
    tail_ = next;
    tail = next;
    next = next->next.load(std::memory_order_acquire);
  }
  if (next != nullptr) {
    tail_ = next;
    return tail;
  }
  if (tail != head_.load(std::memory_order_acquire)) return nullptr;  // a push is in flight
  push(&stub_);
  next = tail->next.load(std::memory_order_acquire);
  if (next != nullptr) {
    tail_ = next;
    return tail;
  }
  return nullptr;
}

}  // namespace baton::detail
