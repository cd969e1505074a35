#pragma once

// Internal: the cell that hosts one actor (its mailbox and strand), and the proc's tables.

#include <atomic>
#include <condition_variable>
#include <coroutine>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <typeindex>
#include <unordered_map>
#include <vector>

#include "baton/actor/proc.hpp"
#include "baton/net/link.hpp"

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

/// A stable address for an id, kept for the life of the process: local actors' and clients'
/// ids are interned once each, so messages can point at their sender.
const ActorId& intern_id(const ActorId& id);

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
  // Interned (see intern_id), so the common message carries a pointer, not two strings.
  const ActorId* sender = nullptr;
  Body body;
  std::shared_ptr<StateBase> reply;  // null for one-way messages
  std::unique_ptr<MessageExtra> extra;

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

class ProcState;

class Cell final : public Runnable,
                   public ResumeContext,
                   public std::enable_shared_from_this<Cell> {
 public:
  enum class Status : std::uint8_t { starting, running, stopped, failed };

  Cell(std::shared_ptr<ProcState> proc, const ActorId& id, Cell* parent,
       std::optional<Supervisor> supervisor = std::nullopt);
  ~Cell();

  const ActorId& id() const { return id_; }
  const ActorContext& context() const { return context_; }
  ProcState& proc() const { return *proc_; }
  Cell* parent() const { return parent_; }
  Status status() const { return status_.load(std::memory_order_acquire); }

  /// Queues a message in FIFO order and schedules the strand if it was idle.
  void enqueue(Message* m);
  void run() override;
  void post_resume(std::coroutine_handle<> h) override;
  /// Queues a continuation to run on this actor like a message (F-3); `fn(false)` runs instead
  /// if the actor has ended.
  void post_continuation(std::function<void(bool alive)> fn);

  void add_child(const CellPtr& child);
  /// Messages in the mailbox, not yet handled.
  std::size_t queued() const { return queued_.load(std::memory_order_relaxed); }
  /// Runs `f` (on some thread) once the mailbox holds at most half the proc's mailbox limit,
  /// or the actor ends; at once if it already does.
  void on_drained(std::function<void()> f);
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
  void bounce(Message& m);
  void trace(const Message& m);
  void maybe_drained(bool ended = false);

  std::shared_ptr<ProcState> proc_;
  const ActorId& id_;  // interned
  Cell* parent_;       // parents outlive children: the proc's table keeps every cell
  std::optional<Supervisor> supervisor_;  // for a top-level actor of a mesh
  ActorContext context_;
  std::unique_ptr<Actor> actor_;
  const ActorTypeInfo* type_ = nullptr;

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

  std::mutex children_mu_;
  std::vector<std::weak_ptr<Cell>> children_;

  // Backpressure on links delivering here (see ProcOptions::mailbox_limit).
  std::atomic<std::size_t> queued_{0};
  std::atomic<bool> drain_waiters_{false};
  std::mutex drain_mu_;
  std::vector<std::function<void()>> drained_;
};

class ProcState : public std::enable_shared_from_this<ProcState> {
 public:
  ProcState(Proc::Options options, Executor* executor, std::unique_ptr<ThreadPool> pool);
  ProcState(const ProcState&) = delete;
  ProcState& operator=(const ProcState&) = delete;
  ~ProcState() { stop_background(); }

  Proc::Options options;
  ProcId id;
  const ActorId& client;  // interned; the sender of messages sent from outside actors
  Executor* executor;
  std::unique_ptr<ThreadPool> pool;
  Proc* owner = nullptr;

  std::mutex mu;
  std::unordered_map<ActorId, CellPtr> actors;
  std::unordered_map<std::string, std::uint64_t> next_index;
  std::unordered_map<std::uint64_t, PortSinkPtr> ports;
  std::uint64_t next_port = 1;
  std::condition_variable idle_cv;
  std::size_t live = 0;  // cells not yet stopped or failed
  bool stopping = false;
  std::vector<std::function<void()>> stop_hooks;  // run once, before any actor is told to stop
  bool hooks_ran = false;
  std::atomic<bool> closed{false};

  // Links to procs in other processes (see remote.cpp); created on first serve() or connect().
  std::unique_ptr<net::IoThread> io;
  std::vector<std::unique_ptr<net::Listener>> listeners;  // one per serve()
  std::atomic<std::uint64_t> envelopes_sent{0};           // over links, by this proc

 private:
  std::mutex extensions_mu_;
  std::unordered_map<std::type_index, std::shared_ptr<void>> extensions_;
  std::mutex background_mu_;
  std::condition_variable background_cv_;
  std::vector<std::function<void()>> background_;
  std::thread background_thread_;
  bool background_stopping_ = false;

 public:
  /// Runs `f` on this proc's background thread (started on first use, joined when the proc
  /// goes): for work that may wait a little and must hold neither an I/O thread nor an actor's.
  void post_background(std::function<void()> f);
  /// Runs what is queued for the background thread, then joins it.
  void stop_background();

  /// State an upper layer keeps for this proc (the mesh layer's cast nodes), made on first use
  /// and gone with the proc.
  template <class T>
  std::shared_ptr<T> extension() {
    std::lock_guard lock(extensions_mu_);
    auto& slot = extensions_[std::type_index(typeid(T))];
    if (!slot) slot = std::make_shared<T>();
    return std::static_pointer_cast<T>(slot);
  }

  /// Runs the stop hooks, the first time only.
  void run_stop_hooks();
  void cell_finished();
  void report_unhandled(const SupervisionEvent& ev);
  void report_undeliverable(const Undeliverable& u);
};

/// The registry of every proc in this process, by name.
std::shared_ptr<ProcState> find_proc(const ProcId& id);

struct Factories {
  Factory make = nullptr;
  const ActorTypeInfo* type = nullptr;
};
const Factories* find_factory(std::uint64_t id);

/// Sends a call to an actor in another process if a link to its proc exists; false if none.
bool route_remote_call(const ActorId& target, const EndpointInfo& endpoint, Body& args,
                       std::shared_ptr<StateBase>& reply, const ActorId& sender);
/// Sends a value to a port in another process if a link to its proc exists; false if none.
bool route_remote_port(const PortId& port, const Body& body, const ActorId& sender);
/// Drops this proc's links (at proc destruction), failing what waits on them.
void close_links(ProcState& proc);

/// A port that takes one value (a reply) and is closed by it; see open_reply_port().
class ReplySinkBase : public PortSink {};

/// Links to `peer` at `address` from `state`'s I/O thread (see Proc::connect).
void connect_state(const std::shared_ptr<ProcState>& state, const ProcId& peer,
                   const Address& address, std::function<void(const std::string&)> on_lost);
/// The link to `peer` and the local proc that owns it, dialling the peer first if a reference
/// said where it listens; both null if it cannot be reached.
std::pair<std::shared_ptr<net::Link>, std::shared_ptr<ProcState>> route_to(const ProcId& peer);
/// Sends an envelope to a proc in another process (see route_to); false if it cannot.
bool send_to_proc(const ProcId& peer, Envelope env);
/// Opens a port on `local` for one value expected from `peer`; if the link to `peer` closes
/// first, the sink's link_lost() runs.
PortId open_reply_port(ProcState& local, const ProcId& peer, PortSinkPtr sink);

/// Queues a call to a local actor as if it came from `sender`; a null reply makes it one-way.
/// `from`, the link it arrived on, stops reading while the actor's mailbox is over the limit.
void deliver_local_call(ProcState& local, const ActorId& target, std::uint64_t endpoint_id,
                        const ActorId& sender, Body args, std::shared_ptr<StateBase> reply,
                        const std::shared_ptr<net::Link>& from = nullptr);
/// A reply state that hands its outcome to `out` as a status-tagged body.
std::shared_ptr<StateBase> make_status_reply(std::function<void(Body)> out);
/// Sends a value to a port, local or in another process, as `from`; logs it if undeliverable.
void route_remote_port_or_local(const PortId& port, const Body& body, const ActorId& from);
/// The proc that dials other processes from this one (the last to serve), or null.
std::shared_ptr<ProcState> home_proc();
/// The sender of a message sent now: the running actor, else `fallback`'s client.
const ActorId& current_sender(const ProcState* fallback);
/// Lets the host layer say, when the link to a peer closes, whether the peer was a child process
/// that exited (waiting a little for it), and how: calls waiting on it then fail with a
/// SupervisionError carrying that report, and later calls to it fail at once.
void set_exit_probe(std::function<std::optional<std::string>(const std::string& peer)> probe);
/// The report of a proc known to have died, if it did.
std::optional<std::string> proc_failure(const ProcId& id);
/// Like proc_failure, but if nothing is known yet and `id` is a child of this process, waits a
/// little for it to be seen exiting (see set_exit_probe). May block: not for I/O threads.
std::optional<std::string> await_proc_failure(const ProcId& id);
/// True if a status-tagged reply says its member failed or could not be reached (its proc died,
/// its link was lost), as opposed to a value or an endpoint's own throw.
bool reply_is_member_lost(const Body& reply);
/// True if a status-tagged reply says its message was lost with a link.
bool reply_is_link_lost(const Body& reply);
/// A failure as a status-tagged body.
Body failure_reply(std::exception_ptr e);
/// Completes `state` from a status-tagged body: the value, or the remote failure.
/// `where` names the replying actor's place in a mesh, for an ActorError.
void complete_from_reply(StateBase& state, const Body& body, std::string_view endpoint,
                         std::string_view where = {});

/// Casts (the mesh layer's tree) arrive at this port of a proc and go to the cast handler,
/// which runs on the I/O thread that received them, in link order.
constexpr std::uint64_t kCastPort = ~std::uint64_t{0} - 1;
using CastHandler = void (*)(const std::shared_ptr<ProcState>& local,
                             const std::shared_ptr<net::Link>& link, Envelope env);
void set_cast_handler(CastHandler handler);

/// Hands `event` to `owner`: an actor here gets it in supervise(); a proc's client here means
/// that proc's unhandled-failure handler; an owner in another process gets it over the link.
/// If the owner cannot be reached, `from` (the proc reporting) handles it as unhandled.
void report_failure_to(const ActorId& owner, SupervisionEvent event, ProcState& from);
/// Sends `event` to `owner` in another process; false if it cannot be reached.
bool forward_failure(const ActorId& owner, const SupervisionEvent& event);
/// Records that the proc `name` died (`report` says how): calls to it fail at once.
void mark_proc_failed(const std::string& name, const std::string& report);

/// Returns a message for `target` to its sender as undeliverable, or fails its reply.
void return_to_sender(Message& m, const PortId& target, UndeliverableError::Reason reason,
                      const std::string& why);
/// Hands a returned message to its sender `from`: the actor's handle_undeliverable(), its
/// proc's handler when it was sent from outside actors, or the sender's process over a link.
void deliver_undeliverable(const ActorId& from, Undeliverable u);
/// Sends a returned message back to its sender's process; false if it cannot be reached.
bool return_remote(const ActorId& from, const Undeliverable& u);

}  // namespace baton::detail
