#pragma once

// Internal: a message to an actor, and the mailbox queue that holds it.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "baton/actor/actor.hpp"

namespace baton::detail {

/// What only rare messages carry, kept out of line so the common call stays small.
struct MessageExtra {
  std::function<void()> thunk;  // port deliveries
  std::unique_ptr<SupervisionEvent> event;
  std::unique_ptr<Undeliverable> undeliverable;
  std::shared_ptr<State<void>> stopped;   // completed when a stop finishes
  std::function<void(bool alive)> later;  // a continuation registered by then() (F-3)
  std::uint64_t endpoint_id = 0;          // a call from another process, not yet resolved
  ActorId remote_sender;                  // the sender of a message from another process
};

/// An actor's id, shared by its cell and the messages it sent: a message may outlive its
/// sender, and a pointer to a counted id keeps the common message free of strings.
class SharedId {
 public:
  explicit SharedId(ActorId id) : id_(std::move(id)) {}
  SharedId(const SharedId&) = delete;
  SharedId& operator=(const SharedId&) = delete;

  const ActorId& id() const { return id_; }
  void retain() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void release() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

 private:
  ~SharedId() = default;
  ActorId id_;
  std::atomic<std::uint32_t> refs_{1};
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
  // The sender's id, valid while the message lives: the id of a cell this message holds
  // (`sender_hold`), of the receiving proc's client, of the receiver itself or of its parent
  // (each outlives the messages in the receiver's mailbox), or `extra->remote_sender`.
  const ActorId* sender = nullptr;
  SharedId* sender_hold = nullptr;
  Body body;
  std::shared_ptr<StateBase> reply;  // null for one-way messages
  std::unique_ptr<MessageExtra> extra;

  Message() = default;
  Message(const Message&) = delete;
  Message& operator=(const Message&) = delete;
  ~Message() {
    if (sender_hold != nullptr) sender_hold->release();
  }

  /// Sends as `from`, holding its id for as long as the message lives.
  void sent_by(SharedId& from) {
    from.retain();
    if (sender_hold != nullptr) sender_hold->release();
    sender_hold = &from;
    sender = &from.id();
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
