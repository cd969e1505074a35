#pragma once

// Internal: a message to an actor, and the mailbox queue that holds it.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "baton/actor/actor_ref.hpp"

namespace baton::detail {

/// What only rare messages carry, kept out of line so the common call stays small.
struct MessageExtra {
  std::function<void()> thunk;  // port deliveries
  std::unique_ptr<SupervisionEvent> event;
  std::unique_ptr<Undeliverable> undeliverable;
  std::shared_ptr<State<void>> stopped;   // completed when a stop finishes
  std::function<void(bool alive)> later;  // a continuation registered by then() (F-3)
  std::uint64_t task = 0;  // for a continuation queued with its endpoint's resumptions: that task
  std::uint64_t endpoint_id = 0;  // a call from another process, not yet resolved
  std::uint64_t flow = 0;         // while a trace records: the flow its delivery started
};

struct alignas(64) Message {
  enum class Kind : std::uint8_t {
    construct,
    call,
    port,
    stop,
    child_failed,
    undeliverable,
    resume,
    continuation
  };

  std::atomic<Message*> next{nullptr};
  Kind kind = Kind::call;
  union {
    const EndpointInfo* endpoint = nullptr;  // for calls
    std::uint64_t factory;                   // for construct
    void* resume;                            // for resume: a coroutine handle's address
  };
  // The sender's id, valid while the message lives: the receiving proc's client's, the
  // receiver's own or its parent's (each outlives the messages in the receiver's mailbox), or
  // the copy in `from` (a sender that may end first: another actor, another process). A copy
  // of short names costs less than a count shared across threads (see bench inproc).
  const ActorId* sender = nullptr;
  ActorId from;
  Body body;
  std::shared_ptr<StateBase> reply;  // null for one-way messages
  std::unique_ptr<MessageExtra> extra;

  Message() = default;
  Message(const Message&) = delete;
  Message& operator=(const Message&) = delete;
  ~Message() = default;

  /// Sends as `id`, a copy of which the message keeps.
  void sent_by(const ActorId& id) {
    from = id;
    sender = &from;
  }

  MessageExtra& x() {
    if (!extra) extra = std::make_unique<MessageExtra>();
    return *extra;
  }

  // Messages are allocated on the sender's thread and freed on the receiver's; a pool of
  // per-thread free lists that trade full batches keeps that off malloc's slow paths.
  static void* operator new(std::size_t size);
  static void operator delete(void* p) noexcept;
};

/// Vyukov's intrusive multi-producer single-consumer queue: one atomic exchange per push.
class MpscQueue {
 public:
  MpscQueue() : head_(&stub_), tail_(&stub_) {}
  ~MpscQueue();
  MpscQueue(const MpscQueue&) = delete;
  MpscQueue& operator=(const MpscQueue&) = delete;

  void push(Message* m) {
    m->next.store(nullptr, std::memory_order_relaxed);
    Message* prev = head_.exchange(m);  // seq_cst: pairs with the strand's idle check
    prev->next.store(m, std::memory_order_release);
  }
  /// Consumer only. May return null while a push is half done; maybe_nonempty() then says so.
  Message* pop();
  /// Any thread: true if something was pushed since the consumer last found the queue empty
  /// (an empty queue's head is the stub).
  bool pushed_since_empty() const { return head_.load(std::memory_order_seq_cst) != &stub_; }
  /// Consumer only: true if a pop may yield a message now or once a push in flight lands.
  bool maybe_nonempty() const {
    // Unless tail_ is the stub, it is itself a message not yet popped.
    return tail_ != &stub_ || tail_->next.load(std::memory_order_seq_cst) != nullptr ||
           head_.load(std::memory_order_seq_cst) != tail_;
  }

 private:
  std::atomic<Message*> head_;
  Message* tail_;
  Message stub_;
};

}  // namespace baton::detail
