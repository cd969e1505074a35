#pragma once

// Internal: the cell that hosts one actor (its mailbox and strand). The proc's tables are in
// proc_state.hpp, messages in message.hpp; the actor the calling thread acts for in current.hpp.

#include <atomic>
#include <coroutine>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "actor/current.hpp"
#include "actor/message.hpp"
#include "actor/proc_state.hpp"

namespace baton::detail {

/// `name`, kept for the process's life at one address (an actor's type or endpoint as another
/// language names it; see Cell::set_type_name).
const std::string* interned_name(std::string_view name);

class Cell final : public Runnable,
                   public ResumeContext,
                   public std::enable_shared_from_this<Cell> {
 public:
  enum class Status : std::uint8_t { starting, running, stopped, failed };

  Cell(std::shared_ptr<ProcState> proc, const ActorId& id, CellPtr parent,
       std::optional<Supervisor> supervisor = std::nullopt);
  ~Cell();

  const ActorId& id() const { return id_; }
  const ActorContext& context() const { return context_; }
  ProcState& proc() const { return *proc_; }
  Cell* parent() const { return parent_.get(); }
  Status status() const { return status_.load(std::memory_order_acquire); }

  /// Queues a message in FIFO order and schedules the strand if it was idle.
  void enqueue(Message* m);
  void run() override;
  void post_resume(std::coroutine_handle<> h) override;
  /// Queues a continuation to run on this actor like a message (F-3); `fn(false)` runs instead
  /// if the actor has ended. One that the coroutine endpoint in progress registered (`task`, as
  /// task_in_progress() said then) runs like that endpoint's own resumptions instead, so that
  /// the endpoint may co_await what it chained.
  void post_continuation(std::function<void(bool alive)> fn, std::uint64_t task);
  /// Which coroutine endpoint is in progress (a serial), 0 if none.
  std::uint64_t task_in_progress() const { return task_serial_.load(std::memory_order_acquire); }

  void add_child(const CellPtr& child);
  /// Messages in the mailbox, not yet handled.
  std::size_t queued() const { return queued_.load(std::memory_order_relaxed); }
  /// Runs `f` (on some thread) once the mailbox holds at most half the proc's mailbox limit,
  /// or the actor ends; at once if it already does.
  void on_drained(std::function<void()> f);
  /// Remembers a port this actor opened, closed when it ends.
  void add_port(std::uint64_t port);

  /// What this actor does, for whoever looks inside the job (read on any thread).
  struct Activity {
    std::string_view type;      // the actor's type
    std::uint64_t handled = 0;  // calls and messages its endpoints handled
    std::string_view running;   // the endpoint running now, "" if none
    double running_s = 0;       // for how long
    double mean_ms = 0;         // an endpoint's mean time, and its longest
    double max_ms = 0;
    int thread = 0;             // the thread running it now (its id), 0 if none
    std::int64_t since_ns = 0;  // when the endpoint running began (steady clock), 0 if none
  };
  Activity activity() const;
  /// What an actor of another language (Python) calls its type, and the endpoint it runs now
  /// (until the handler ends): shown instead of the C++ ones. Names from interned_name().
  void set_type_name(const std::string* name) { type_name_.store(name, std::memory_order_release); }
  void set_running_name(const std::string* name) {
    running_name_.store(name, std::memory_order_release);
  }
  /// Queues a port delivery to run on this actor.
  void post_port(std::function<void()> thunk);

 private:
  void schedule_if_idle();
  bool has_work() const;
  void handle(Message* m);
  void handle_call(Message& m);
  void finish_task();
  void after_resume();
  void do_stop(Message& m);
  /// Fails the actor and reports it; `cause` is the unhandled failure that led here.
  void fail(const std::string& reason, const SupervisionEvent* cause = nullptr);
  /// Ends a call whose endpoint threw `e`: the caller hears of it, or, with no caller to
  /// tell or an ActorFailure thrown, the actor fails.
  void threw(std::exception_ptr e, const std::shared_ptr<StateBase>& reply,
             std::string_view endpoint);
  void bounce(Message& m);
  void trace(const Message& m);
  void maybe_drained(bool ended = false);
  /// The actor has ended (stopped or failed): its proc forgets it and closes its ports.
  void ended(bool failed, const std::string& why);

  std::shared_ptr<ProcState> proc_;
  const ActorId id_;
  CellPtr parent_;  // held: a child reports to its parent even after the parent ended
  std::optional<Supervisor> supervisor_;  // for a top-level actor of a mesh
  ActorContext context_;
  std::unique_ptr<Actor> actor_;
  // Written once, as the actor is made; read by whoever looks inside the job (activity()).
  std::atomic<const ActorTypeInfo*> type_{nullptr};

  MpscQueue mailbox_;
  MpscQueue resumes_;  // continuations of the running coroutine endpoint
  std::atomic<bool> scheduled_{false};
  CellPtr keepalive_;  // held while scheduled, so the executor's raw pointer stays valid
  std::atomic<Status> status_{Status::starting};
  std::string failure_;

  // The coroutine endpoint in progress (A-1: no other message runs until it ends).
  Task<Body> task_;
  std::shared_ptr<StateBase> task_reply_;
  std::string_view task_endpoint_;
  bool awaiting_ = false;
  std::uint64_t tasks_started_ = 0;
  std::atomic<std::uint64_t> task_serial_{0};  // the task in progress, 0: none (any thread reads)

  std::mutex children_mu_;
  std::vector<std::weak_ptr<Cell>> children_;
  std::vector<std::uint64_t> ports_;  // under children_mu_

  // What activity() reports: the endpoint running (a coroutine one until its task ends), since
  // when, and the times of those that ended.
  std::atomic<const EndpointInfo*> running_{nullptr};
  std::atomic<const std::string*> type_name_{nullptr};     // interned (see set_type_name)
  std::atomic<const std::string*> running_name_{nullptr};  // interned, while a handler runs
  std::atomic<std::int64_t> running_since_ns_{0};
  std::atomic<std::uint64_t> handled_{0};
  std::atomic<std::uint64_t> handler_ns_{0};
  std::atomic<std::uint64_t> max_handler_ns_{0};
  std::atomic<int> thread_{0};    // the thread in run(), 0 if none
  std::uint64_t trace_flow_ = 0;  // while a trace records: the flow that brought the call running
  // Within one run(), the clock at the last handler's end, which is when the next one begins:
  // one clock read per handler. 0 outside a run (only the running thread touches it).
  std::int64_t handler_clock_ns_ = 0;
  void handler_began(const EndpointInfo& ep);
  void handler_ended();

  // Backpressure on links delivering here (see ProcOptions::mailbox_limit).
  std::atomic<std::size_t> queued_{0};
  std::atomic<bool> drain_waiters_{false};
  std::mutex drain_mu_;
  std::vector<std::function<void()>> drained_;
};

}  // namespace baton::detail
