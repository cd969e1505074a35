#include "actor/cell.hpp"
#include "actor/current.hpp"
#include "actor/directory.hpp"
#include "actor/failures.hpp"
#include "actor/metrics.hpp"
#include "actor/replies.hpp"
#include "actor/stacks.hpp"
#include "actor/trace.hpp"
#include "log/log.hpp"
#include "net/io_thread.hpp"

#include <cstdio>
#include <optional>

namespace baton::detail {
namespace {

thread_local Cell* t_constructing = nullptr;

std::string describe(std::exception_ptr e) {
  try {
    std::rethrow_exception(std::move(e));
  } catch (const std::exception& ex) {
    return ex.what();
  } catch (...) {
    return "unknown exception";
  }
}

}  // namespace

const ActorId& cell_id(const Cell& c) {
  return c.id();
}
const ActorContext& cell_context(const Cell& c) {
  return c.context();
}
CellPtr cell_ptr(Cell& c) {
  return c.shared_from_this();
}

// --- Cell -----------------------------------------------------------------------------------

Cell::Cell(std::shared_ptr<ProcState> proc, const ActorId& id, CellPtr parent,
           std::optional<Supervisor> supervisor)
    : proc_(std::move(proc)),
      id_(id),
      parent_(std::move(parent)),
      supervisor_(std::move(supervisor)) {
  context_.id = id;
  if (supervisor_ && supervisor_->rank >= 0) {
    context_.mesh = supervisor_->mesh;
    context_.rank = static_cast<std::size_t>(supervisor_->rank);
    context_.shape = supervisor_->shape;
    if (context_.rank < context_.shape.len()) context_.point = context_.shape.point(context_.rank);
    context_.proc_point = supervisor_->proc_point;
    context_.proc_rank = context_.proc_point.rank;
  } else if (parent_ != nullptr) {
    // A child runs in its parent's proc: it inherits where that proc sits.
    context_.proc_point = parent_->context_.proc_point;
    context_.proc_rank = parent_->context_.proc_rank;
  }
  const auto& labels = context_.proc_point.labels;
  for (std::size_t d = 0; d < labels.size(); ++d) {
    if (labels[d] == "gpus") context_.gpu = context_.proc_point.coords[d];
  }
}

Cell::~Cell() = default;

void Cell::add_port(std::uint64_t port) {
  std::lock_guard lock(children_mu_);
  ports_.push_back(port);
}

void Cell::ended(bool failed, const std::string& why) {
  std::vector<std::uint64_t> ports;
  {
    std::lock_guard lock(children_mu_);
    ports.swap(ports_);
  }
  {
    std::lock_guard lock(proc_->mu);
    for (std::uint64_t p : ports) proc_->ports.erase(p);
  }
  proc_->actor_ended(id(), failed, why);
}

void Cell::add_child(const CellPtr& child) {
  std::lock_guard lock(children_mu_);
  children_.push_back(child);
}

void Cell::enqueue(Message* m) {
  if (proc_->closed.load(std::memory_order_acquire)) {
    // The proc's executor is gone; nothing will run this strand again.
    std::unique_ptr<Message> owned(m);
    bounce(*owned);
    return;
  }
  queued_.fetch_add(1, std::memory_order_relaxed);
  mailbox_.push(m);
  schedule_if_idle();
}

void Cell::on_drained(std::function<void()> f) {
  {
    std::lock_guard lock(drain_mu_);
    drained_.push_back(std::move(f));
    drain_waiters_.store(true);
  }
  const Status st = status();
  maybe_drained(st == Status::stopped || st == Status::failed);
}

void Cell::maybe_drained(bool ended) {
  if (!drain_waiters_.load()) return;
  if (!ended && queued_.load() > proc_->options.mailbox_limit / 2) return;
  std::vector<std::function<void()>> fs;
  {
    std::lock_guard lock(drain_mu_);
    fs.swap(drained_);
    drain_waiters_.store(false);
  }
  for (auto& f : fs) f();
}

void Cell::post_port(std::function<void()> thunk) {
  auto* m = new Message;
  m->kind = Message::Kind::port;
  m->sender = &proc_->client;
  if (Cell* c = current_cell()) m->sent_by(c->id());
  m->x().thunk = std::move(thunk);
  enqueue(m);
}

void Cell::post_resume(std::coroutine_handle<> h) {
  auto* m = new Message;
  m->kind = Message::Kind::resume;
  m->resume = h.address();
  m->sender = &id();  // its own mailbox: the cell outlives it
  resumes_.push(m);
  schedule_if_idle();
}

void Cell::post_continuation(std::function<void(bool)> fn, std::uint64_t task) {
  auto* m = new Message;
  m->kind = Message::Kind::continuation;
  m->sender = &id();
  m->x().later = std::move(fn);
  if (task != 0 && task_in_progress() == task) {
    // Part of the endpoint in progress, which may be awaiting it: queued behind that endpoint
    // in the mailbox, it would never run. That endpoint may still end before this is popped;
    // run() then moves it to the mailbox, so it never runs inside the next endpoint.
    m->x().task = task;
    resumes_.push(m);
    schedule_if_idle();
    return;
  }
  enqueue(m);
}

void Cell::schedule_if_idle() {
  // The plain load spares a contended read-modify-write per message while the strand is busy.
  // It is safe: the push above and run()'s "clear flag, then look for work" are both seq_cst,
  // so either we see the flag cleared or run() sees our message.
  if (!scheduled_.load() && !scheduled_.exchange(true)) {
    keepalive_ = shared_from_this();
    // On the proc's I/O thread, in the handler that brought the message: run the actor there
    // once the handler returns (run to completion: no hand-off to a worker, no wake-up).
    net::IoThread* io = net::inline_io_thread();
    if (io != nullptr && proc_->pool && io == proc_->io.get()) {
      net::run_after_handler(*io, [this] { run(); });
      return;
    }
    proc_->executor->schedule(this);
  }
}

bool Cell::has_work() const {
  return resumes_.maybe_nonempty() || (!awaiting_ && mailbox_.maybe_nonempty());
}

void Cell::run() {
  CellPtr self = std::move(keepalive_);
  Cell* prev_cell = exchange_current_cell(this);
  const bool observed = observing();
  if (observed) thread_.store(this_thread_id(), std::memory_order_relaxed);
  const LogActorScope log_scope(&id());  // lines logged here name this actor
  ResumeContext* prev_ctx = std::exchange(current_resume_context(), this);
  const std::size_t batch = proc_->options.max_batch;
  handler_clock_ns_ = 0;
  for (std::size_t i = 0; i < batch; ++i) {
    Message* m = resumes_.pop();
    if (m != nullptr && m->kind == Message::Kind::continuation &&
        m->x().task != task_in_progress()) {
      enqueue(m);  // its endpoint ended before it ran: an ordinary message now
      continue;
    }
    if (m == nullptr && !awaiting_) {
      m = mailbox_.pop();
      if (m != nullptr) {
        queued_.fetch_sub(1, std::memory_order_relaxed);
        maybe_drained();
      }
    }
    if (m == nullptr) break;
    handle(m);
  }
  if (observed) thread_.store(0, std::memory_order_relaxed);
  handler_clock_ns_ = 0;
  exchange_current_cell(prev_cell);
  current_resume_context() = prev_ctx;
  if (has_work()) {
    // Still ours: go round again without letting go of the flag.
    keepalive_ = std::move(self);
    proc_->executor->schedule(this);
    return;
  }
  const bool awaiting = awaiting_;
  scheduled_.store(false);
  // From here another thread may own the strand, so look only at the producers' side. A
  // producer that pushed before the store saw the flag set and did not schedule us; the
  // seq_cst store and loads guarantee we see its push.
  if ((resumes_.pushed_since_empty() || (!awaiting && mailbox_.pushed_since_empty())) &&
      !scheduled_.exchange(true)) {
    keepalive_ = std::move(self);
    proc_->executor->schedule(this);
  }
}

void Cell::trace(const Message& m) {
  if (!proc_->options.trace) return;
  TraceEvent ev{TraceEvent::Kind::call, *m.sender, id(), {}};
  switch (m.kind) {
    case Message::Kind::construct:
      ev.kind = TraceEvent::Kind::construct;
      break;
    case Message::Kind::call:
      ev.kind = TraceEvent::Kind::call;
      ev.endpoint = m.endpoint != nullptr ? m.endpoint->name : std::string_view{};
      break;
    case Message::Kind::port:
      ev.kind = TraceEvent::Kind::port;
      break;
    case Message::Kind::stop:
      ev.kind = TraceEvent::Kind::stop;
      break;
    case Message::Kind::child_failed:
      ev.kind = TraceEvent::Kind::supervision;
      break;
    case Message::Kind::undeliverable:
      ev.kind = TraceEvent::Kind::undeliverable;
      break;
    case Message::Kind::resume:
    case Message::Kind::continuation:
      ev.kind = TraceEvent::Kind::resume;
      break;
  }
  proc_->options.trace(ev);
}

void Cell::handle(Message* raw) {
  std::unique_ptr<Message> m(raw);
  const Status st = status();
  if (st == Status::stopped || st == Status::failed) {
    bounce(*m);
    return;
  }
  trace(*m);
  switch (m->kind) {
    case Message::Kind::construct: {
      const Factories* f = find_factory(m->factory);
      if (f == nullptr) {
        fail(
            "no constructor registered for this actor type and argument list "
            "(all procs must run the same binary)");
        return;
      }
      type_.store(f->type, std::memory_order_release);
      try {
        t_constructing = this;
        actor_ = f->make(m->body);
        t_constructing = nullptr;
      } catch (...) {
        t_constructing = nullptr;
        // As another language names the type, where its constructor said so before throwing.
        const std::string* shown = type_name_.load(std::memory_order_acquire);
        fail((shown != nullptr ? *shown : std::string(f->type->name)) +
             " constructor threw: " + describe(std::current_exception()));
        return;
      }
      status_.store(Status::running, std::memory_order_release);
      return;
    }
    case Message::Kind::call:
      handle_call(*m);
      return;
    case Message::Kind::port:
      try {
        m->x().thunk();
      } catch (...) {
        fail("port handler threw: " + describe(std::current_exception()));
      }
      return;
    case Message::Kind::resume:
      std::coroutine_handle<>::from_address(m->resume).resume();
      after_resume();
      return;
    case Message::Kind::continuation:
      m->x().later(true);  // the continuation catches for itself: it fails its own future
      return;
    case Message::Kind::stop:
      do_stop(*m);
      return;
    case Message::Kind::child_failed: {
      bool handled = false;
      try {
        handled = actor_->supervise(*m->x().event);
      } catch (...) {
        fail("supervise() threw while handling " + m->x().event->to_string() + ": " +
             describe(std::current_exception()));
        return;
      }
      if (!handled) {
        fail("did not handle the failure of " + m->x().event->actor.to_string(),
             m->x().event.get());
      }
      return;
    }
    case Message::Kind::undeliverable: {
      bool handled = false;
      try {
        handled = actor_->handle_undeliverable(*m->x().undeliverable);
      } catch (...) {
        handled = false;
      }
      const Undeliverable& u = *m->x().undeliverable;
      if (!handled && u.reason == UndeliverableError::Reason::actor_stopped) {
        // Its receiver was stopped on purpose (a mesh stopped, a job ending in order): what
        // still comes its way is dropped, and that is no failure of the sender.
        log_debug("a message from {} to {} was dropped: {}", id().to_string(), u.dest.to_string(),
                  u.message);
        return;
      }
      if (!handled) {
        fail("a message to " + u.dest.to_string() + " was undeliverable: " + u.message);
      }
      return;
    }
  }
}

void Cell::handle_call(Message& m) {
  if (m.endpoint == nullptr) {
    // From another process: the endpoint travels as its id.
    // Set by the construct message, which this actor handled before any call.
    const ActorTypeInfo* type = type_.load(std::memory_order_relaxed);
    m.endpoint = type->find(m.x().endpoint_id);
    if (m.endpoint == nullptr) {
      const std::string why = std::string(type->name) + " has no endpoint with id " +
                              std::to_string(m.x().endpoint_id) +
                              " (do all procs run the same binary?)";
      if (m.reply) {
        m.reply->set_exception(std::make_exception_ptr(ActorError(id().to_string(), "?", why)));
      } else {
        fail(why);
      }
      return;
    }
  }
  const EndpointInfo& ep = *m.endpoint;
  HandlerResult result;
  std::optional<InSpan> in_span;
  if (tracing()) {
    trace_flow_ = m.extra ? m.extra->flow : 0;
    in_span.emplace();
  }
  handler_began(ep);
  try {
    result = ep.fn(*actor_, m.body);
  } catch (...) {
    // Named as its actor names it where it runs others by name (a Python actor's method).
    const std::string* named = running_name_.load(std::memory_order_acquire);
    handler_ended();
    threw(std::current_exception(), m.reply, named != nullptr ? std::string_view(*named) : ep.name);
    return;
  }
  if (result.task.valid()) {
    task_ = std::move(result.task);
    task_reply_ = std::move(m.reply);
    task_endpoint_ = ep.name;
    awaiting_ = true;
    task_serial_.store(++tasks_started_, std::memory_order_release);
    task_.start(nullptr, nullptr);
    after_resume();
    return;
  }
  handler_ended();
  if (m.reply) m.reply->set_body(result.body);
}

void Cell::after_resume() {
  if (awaiting_ && task_.done()) finish_task();
}

void Cell::finish_task() {
  const std::string* named = running_name_.load(std::memory_order_acquire);
  handler_ended();
  awaiting_ = false;
  task_serial_.store(0, std::memory_order_release);
  auto reply = std::move(task_reply_);
  const std::string_view endpoint = named != nullptr ? std::string_view(*named) : task_endpoint_;
  Task<Body> task = std::move(task_);
  try {
    Body body = task.take();
    if (reply) reply->set_body(body);
  } catch (...) {
    threw(std::current_exception(), reply, endpoint);
  }
}

void Cell::threw(std::exception_ptr e, const std::shared_ptr<StateBase>& reply,
                 std::string_view endpoint) {
  const std::string what = describe(e);
  bool fatal = false;
  std::string name(endpoint);
  try {
    std::rethrow_exception(std::move(e));
  } catch (const ActorFailure& f) {
    fatal = true;
    if (!f.endpoint().empty()) name = f.endpoint();
  } catch (...) {
  }
  if (fatal) {
    const std::string reason = name + " failed its actor: " + what;
    if (reply) {
      reply->set_exception(std::make_exception_ptr(
          SupervisionError(id().to_string() + " failed while handling this call: " + reason)));
    }
    fail(reason);
  } else if (reply) {
    // the caller sees the failure; the actor keeps running.
    reply->set_exception(
        std::make_exception_ptr(ActorError(id().to_string(), std::string(endpoint), what)));
  } else {
    fail(std::string(endpoint) + " threw with no caller to tell: " + what);
  }
}

void Cell::do_stop(Message& m) {
  std::vector<CellPtr> children;
  {
    std::lock_guard lock(children_mu_);
    for (auto& w : children_) {
      if (auto c = w.lock()) children.push_back(std::move(c));
    }
    children_.clear();
  }
  for (auto& c : children) {
    auto* s = new Message;
    s->kind = Message::Kind::stop;
    s->sender = &id();  // children hold their parent
    c->enqueue(s);
  }
  if (actor_) {
    try {
      actor_->on_stop();
    } catch (...) {
      log_warn("{} on_stop() threw: {}", id().to_string(), describe(std::current_exception()));
    }
  }
  status_.store(Status::stopped, std::memory_order_release);
  actor_.reset();
  maybe_drained(true);
  ended(false, {});  // before anyone hears it stopped: they may forget its mesh at once
  if (m.x().stopped) m.x().stopped->set_value();
  proc_->cell_finished();
}

void Cell::fail(const std::string& reason, const SupervisionEvent* cause) {
  failure_ = reason;
  status_.store(Status::failed, std::memory_order_release);
  // a call in progress fails with SupervisionError.
  if (awaiting_) {
    awaiting_ = false;
    task_serial_.store(0, std::memory_order_release);
    task_ = {};
    if (task_reply_) {
      task_reply_->set_exception(std::make_exception_ptr(
          SupervisionError(id().to_string() + " failed while handling this call: " + reason)));
      task_reply_.reset();
    }
  }
  {
    // Children of a failed actor are stopped: they belong to it.
    std::lock_guard lock(children_mu_);
    for (auto& w : children_) {
      if (auto c = w.lock()) {
        auto* s = new Message;
        s->kind = Message::Kind::stop;
        s->sender = &id();  // children hold their parent
        c->enqueue(s);
      }
    }
    children_.clear();
  }
  if (actor_) {
    try {
      actor_->on_failure(reason);
    } catch (...) {
      log_warn("{} on_failure() threw: {}", id().to_string(), describe(std::current_exception()));
    }
  }
  actor_.reset();
  maybe_drained(true);
  SupervisionEvent ev{id(), reason, {}, -1, {}};
  if (cause != nullptr) {
    ev.causes.push_back(cause->summary());
    ev.causes.insert(ev.causes.end(), cause->causes.begin(), cause->causes.end());
  }
  if (supervisor_) {
    ev.mesh = supervisor_->mesh;
    ev.rank = supervisor_->rank;
  }
  ended(true, reason);  // before anyone hears of it
  if (parent_ != nullptr) {
    auto* m = new Message;
    m->kind = Message::Kind::child_failed;
    m->sent_by(id_);
    m->x().event = std::make_unique<SupervisionEvent>(std::move(ev));
    parent_->enqueue(m);
  } else if (supervisor_) {
    report_failure_to(supervisor_->owner, std::move(ev), *proc_);
  } else {
    proc_->report_unhandled(ev);
  }
  proc_->cell_finished();
}

void Cell::bounce(Message& m) {
  const bool failed = status() == Status::failed;
  const std::string why =
      id().to_string() + (failed ? " has failed (" + failure_ + ")" : " has stopped");
  switch (m.kind) {
    case Message::Kind::call:
    case Message::Kind::port:
      if (failed && m.reply) {
        m.reply->set_exception(std::make_exception_ptr(SupervisionError(why)));
      } else {
        return_to_sender(m, PortId{id(), 0},
                         failed ? UndeliverableError::Reason::actor_failed
                                : UndeliverableError::Reason::actor_stopped,
                         why);
      }
      return;
    case Message::Kind::stop:
      if (m.x().stopped) m.x().stopped->set_value();
      return;
    case Message::Kind::child_failed:
      // The parent is gone too; the proc hears of it so nothing is silent.
      proc_->report_unhandled(*m.x().event);
      return;
    case Message::Kind::continuation:
      m.x().later(false);
      return;
    case Message::Kind::construct:
    case Message::Kind::undeliverable:
    case Message::Kind::resume:
      return;  // the frame of a failed actor's task is already destroyed
  }
}

}  // namespace baton::detail

namespace baton {

Actor::Actor() : cell_(detail::t_constructing) {
  if (cell_ == nullptr) {
    throw UsageError(
        "actors are constructed by the runtime: use proc.spawn<A>(name, args...) "
        "instead of constructing an actor directly");
  }
}

Proc& detail::cell_proc(Cell& c) {
  return *c.proc().owner;
}

}  // namespace baton
