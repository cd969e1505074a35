#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <unordered_set>

#include "actor/cell.hpp"
#include "actor/directory.hpp"
#include "actor/failures.hpp"
#include "actor/node.hpp"
#include "actor/replies.hpp"
#include "log/log.hpp"
#include "net/io_thread.hpp"

namespace baton {
namespace detail {
namespace {

// The program's actor types, by factory id: filled by static initialisers (one per type and
// argument list, see FactoryRegistration) before main, and read-only after. Like a vtable it
// describes the program, not a runtime, so it is not the node's.
struct FactoryRegistry {
  std::mutex mu;
  std::unordered_map<std::uint64_t, std::pair<std::string, Factories>> by_id;
};
FactoryRegistry& factories() {
  static FactoryRegistry r;
  return r;
}

const ActorId& current_sender_id(const ProcState* fallback) {
  if (Cell* c = current_cell()) return c->id();
  static const ActorId outside{ProcId{"client"}, "client", 0};
  return fallback != nullptr ? fallback->client : outside;
}

}  // namespace

const ActorId& current_sender(const ProcState* fallback) {
  return current_sender_id(fallback);
}

ActorId current_owner() {
  std::shared_ptr<ProcState> home;
  if (auto node = node_here()) {
    if (Router* r = node->router()) home = r->home();
  }
  return current_sender_id(home.get());
}

std::uint64_t register_factory(std::string_view key, Factory factory, const ActorTypeInfo* type) {
  const std::uint64_t id = fnv1a(key);
  auto& r = factories();
  std::lock_guard lock(r.mu);
  auto [it, inserted] = r.by_id.try_emplace(id, std::string(key), Factories{factory, type});
  if (!inserted && it->second.first != key) {
    log_error("factory id collision between {} and {}", it->second.first, key);
    std::abort();
  }
  // One key, two types: two actor classes of one name (in anonymous namespaces of different
  // files, say), whose actors would be built as whichever registered first.
  if (!inserted && it->second.second.type != type) {
    log_error(
        "two different actor types are both named {}: a worker could not tell which to build; "
        "rename one",
        type->name);
    std::abort();
  }
  // Two endpoints of one type hashing alike would misroute calls: a bug to stop at once.
  for (std::size_t i = 0; i < type->endpoint_count; ++i) {
    for (std::size_t j = i + 1; j < type->endpoint_count; ++j) {
      if (type->endpoints[i].id == type->endpoints[j].id) {
        log_error("endpoint id collision in {}", type->name);
        std::abort();
      }
    }
  }
  return id;
}

const Factories* find_factory(std::uint64_t id) {
  auto& r = factories();
  std::lock_guard lock(r.mu);
  auto it = r.by_id.find(id);
  return it == r.by_id.end() ? nullptr : &it->second.second;
}

std::shared_ptr<ProcState> find_proc(const ProcId& id) {
  if (Cell* c = current_cell()) {
    ProcState& here = c->proc();
    if (here.id == id) return here.shared_from_this();
    return here.node->find_proc(id.name);
  }
  auto node = Node::current();
  return node ? node->find_proc(id.name) : nullptr;
}

CellPtr resolve_actor(const ActorId& id) {
  auto proc = find_proc(id.proc);
  return proc ? proc->find_actor(id) : nullptr;
}

namespace {
Router* router_here() {
  auto node = node_here();
  return node ? node->router() : nullptr;
}
}  // namespace

void return_missing(Message& m, const ActorId& target, ProcState* proc, const std::string& where) {
  std::optional<ProcState::Ended> ended;
  if (proc != nullptr) ended = proc->ended(target);
  if (ended && ended->failed) {
    return_to_sender(m, PortId{target, 0}, UndeliverableError::Reason::actor_failed,
                     target.to_string() + " has failed (" + ended->why + ")");
    return;
  }
  if (ended) {
    return_to_sender(m, PortId{target, 0}, UndeliverableError::Reason::actor_stopped,
                     target.to_string() + " has stopped");
    return;
  }
  std::string what = "no actor " + target.to_string();
  if (m.kind == Message::Kind::call && m.endpoint != nullptr) {
    what += " (" + std::string(m.endpoint->name) + ")";
  }
  return_to_sender(m, PortId{target, 0}, UndeliverableError::Reason::unknown_actor,
                   what + (where.empty() ? "" : " " + where) +
                       ": it was stopped or never spawned, or its proc is gone");
}

PortSinkPtr resolve_port(const PortId& id) {
  auto proc = find_proc(id.actor.proc);
  if (!proc) return nullptr;
  std::lock_guard lock(proc->mu);
  auto it = proc->ports.find(id.port);
  return it == proc->ports.end() ? nullptr : it->second;
}

void return_to_sender(Message& m, const PortId& target, UndeliverableError::Reason reason,
                      const std::string& why) {
  if (m.reply) {
    if (reason == UndeliverableError::Reason::actor_failed) {
      m.reply->set_exception(std::make_exception_ptr(SupervisionError(why)));
    } else {
      m.reply->set_exception(std::make_exception_ptr(UndeliverableError(reason, why)));
    }
    return;
  }
  deliver_undeliverable(*m.sender, Undeliverable{target, reason, why});
}

void deliver_undeliverable(const ActorId& from, Undeliverable u) {
  if (CellPtr sender = resolve_actor(from)) {
    auto* back = new Message;
    back->kind = Message::Kind::undeliverable;
    back->sent_by(from);
    back->x().undeliverable = std::make_unique<Undeliverable>(std::move(u));
    sender->enqueue(back);
    return;
  }
  if (auto proc = find_proc(from.proc)) {
    proc->report_undeliverable(u);
    return;
  }
  // The sender lives in another process: send the message back there.
  Router* router = router_here();
  if (router != nullptr && router->return_undeliverable(from, u)) return;
  log_warn("undeliverable message from {} to {}: {}", from.to_string(), u.dest.to_string(),
           u.message);
}

void send_call(const ActorId& target, const CellPtr& cached, const EndpointInfo& endpoint,
               Body args, std::shared_ptr<StateBase> reply) {
  // Without a cached cell, the target's proc is looked up once: its actor, else the router.
  CellPtr resolved;
  std::shared_ptr<ProcState> proc;
  Cell* cell = cached.get();
  if (cell == nullptr) {
    proc = find_proc(target.proc);
    if (proc) resolved = proc->find_actor(target);
    cell = resolved.get();
  }
  // Owned until handed to a mailbox: a send that throws (a message too large) frees it.
  std::unique_ptr<Message> m(new Message);
  m->kind = Message::Kind::call;
  m->endpoint = &endpoint;
  m->body = std::move(args);
  m->reply = std::move(reply);
  Cell* current = current_cell();
  if (current != nullptr) {
    m->sent_by(current->id());
  } else {
    m->sender = &current_sender_id(nullptr);
  }
  if (cell == nullptr) {
    if (!proc) {
      Router* router = router_here();
      if (router != nullptr &&
          router->route_call(target, endpoint, m->body, m->reply, *m->sender)) {
        return;
      }
    }
    return_missing(*m, target, proc.get(), "");
    return;
  }
  if (current == nullptr) m->sender = &cell->proc().client;
  cell->enqueue(m.release());
}

Future<void> stop_actor(const ActorId& target, const CellPtr& cached) {
  CellPtr cell = cached ? cached : resolve_actor(target);
  auto state = std::make_shared<State<void>>();
  if (!cell) {
    state->set_exception(std::make_exception_ptr(UndeliverableError(
        UndeliverableError::Reason::unknown_actor, "no actor " + target.to_string() + " to stop")));
    return Future<void>(state);
  }
  auto* m = new Message;
  m->kind = Message::Kind::stop;
  if (Cell* current = current_cell()) {
    m->sent_by(current->id());
  } else {
    m->sender = &cell->proc().client;
  }
  m->x().stopped = state;
  cell->enqueue(m);
  return Future<void>(state);
}

void send_port(const PortId& id, const PortSinkPtr& cached, const Body& body) {
  PortSinkPtr sink = cached ? cached : resolve_port(id);
  if (!sink) {
    const ActorId& from =
        current_cell() != nullptr ? current_cell()->id() : current_sender_id(nullptr);
    Router* router = router_here();
    if (router != nullptr && router->route_port(id, body, from)) return;
  }
  bool delivered = false;
  std::string why =
      "no port " + id.to_string() + " (closed, or a once-port that already has its value)";
  if (sink) {
    try {
      delivered = sink->deliver(body);
      if (!delivered) why = "port " + id.to_string() + " is a once-port that already has its value";
    } catch (const std::exception& e) {
      why = "port " + id.to_string() + " rejected the value: " + e.what();
    }
  }
  if (delivered) {
    if (dynamic_cast<OnceSink*>(sink.get()) != nullptr) {
      // A once-port is done after its value: forget it so the table does not grow.
      if (auto proc = find_proc(id.actor.proc)) {
        std::lock_guard lock(proc->mu);
        proc->ports.erase(id.port);
      }
    }
    return;
  }
  Message m;
  m.sender = &current_sender_id(nullptr);
  if (Cell* c = current_cell()) m.sender = &c->id();
  return_to_sender(m, id, UndeliverableError::Reason::unknown_actor, why);
}

namespace {
class ActorPortSink final : public PortSink {
 public:
  ActorPortSink(std::weak_ptr<Cell> cell, std::function<void(const Body&)> handler)
      : cell_(std::move(cell)),
        handler_(std::make_shared<std::function<void(const Body&)>>(std::move(handler))) {}
  bool deliver(const Body& body) override {
    CellPtr cell = cell_.lock();
    if (!cell) return false;
    const Cell::Status st = cell->status();
    if (st == Cell::Status::stopped || st == Cell::Status::failed) return false;
    cell->post_port([h = handler_, body] { (*h)(body); });
    return true;
  }

 private:
  std::weak_ptr<Cell> cell_;
  std::shared_ptr<std::function<void(const Body&)>> handler_;
};
}  // namespace

std::pair<PortId, PortSinkPtr> open_actor_port(Cell& cell,
                                               std::function<void(const Body&)> handler) {
  auto sink = std::make_shared<ActorPortSink>(cell.shared_from_this(), std::move(handler));
  ProcState& proc = cell.proc();
  std::uint64_t n = 0;
  {
    std::lock_guard lock(proc.mu);
    n = proc.next_port++;
    proc.ports.emplace(n, sink);
  }
  cell.add_port(n);  // closed when the actor ends
  return {PortId{cell.id(), n}, sink};
}

// --- ProcState ------------------------------------------------------------------------------

ProcState::ProcState(Proc::Options opts, Executor* exec, std::unique_ptr<ThreadPool> own)
    : options(std::move(opts)),
      id(ProcId::parse(options.name)),
      client(ActorId{id, "client", 0}),
      node(Node::acquire()),
      executor(exec),
      pool(std::move(own)) {}

std::vector<CellPtr> ProcState::live_cells() {
  std::lock_guard lock(mu);
  std::vector<CellPtr> out;
  out.reserve(actors.size());
  for (const auto& [actor, cell] : actors) out.push_back(cell);
  return out;
}

CellPtr ProcState::find_actor(const ActorId& actor) {
  std::lock_guard lock(mu);
  auto it = actors.find(actor);
  return it == actors.end() ? nullptr : it->second;
}

void ProcState::actor_ended(const ActorId& actor, bool failed, std::string why) {
  std::lock_guard lock(mu);
  actors.erase(actor);
  if (!ended_.try_emplace(actor, Ended{failed, std::move(why)}).second) return;
  ended_order_.push_back(actor);
  if (ended_order_.size() > kEndedKept) {
    ended_.erase(ended_order_.front());
    ended_order_.pop_front();
  }
}

std::optional<ProcState::Ended> ProcState::ended(const ActorId& actor) {
  std::lock_guard lock(mu);
  auto it = ended_.find(actor);
  if (it != ended_.end()) return it->second;
  if (std::find(stopped_forgotten_.rbegin(), stopped_forgotten_.rend(), actor) !=
      stopped_forgotten_.rend()) {
    return Ended{false, "stopped with its mesh"};
  }
  return std::nullopt;
}

void ProcState::forget_ended(const ActorId& actor) {
  std::lock_guard lock(mu);
  auto it = ended_.find(actor);
  if (it == ended_.end()) return;
  if (!it->second.failed) {
    stopped_forgotten_.push_back(actor);
    if (stopped_forgotten_.size() > kEndedKept) stopped_forgotten_.pop_front();
  }
  ended_.erase(it);
  std::erase(ended_order_, actor);
}

std::size_t ProcState::ended_count() {
  std::lock_guard lock(mu);
  return ended_.size();
}

void report_failure_to(const ActorId& owner, SupervisionEvent event, ProcState& from) {
  if (CellPtr cell = resolve_actor(owner)) {
    auto* m = new Message;
    m->kind = Message::Kind::child_failed;
    m->sent_by(event.actor);
    m->x().event = std::make_unique<SupervisionEvent>(std::move(event));
    cell->enqueue(m);  // a failed or stopped owner passes it to its proc (see Cell::bounce)
    return;
  }
  if (auto proc = find_proc(owner.proc)) {
    proc->report_unhandled(event);
    return;
  }
  Router* router = from.node->router();
  if (router != nullptr && router->forward_failure(owner, event)) return;
  event.message += " (its owner " + owner.to_string() + " could not be reached)";
  from.report_unhandled(event);
}

void ProcState::post_background(std::function<void()> f) {
  // Held once, whichever thread runs it: what `f` holds (a gathered result) is never copied.
  auto job = std::make_shared<std::function<void()>>(std::move(f));
  // A proc that is going runs it here: nobody else will.
  if (!background_.post([job] { (*job)(); })) (*job)();
}

void ProcState::stop_background() {
  background_.stop();
}

void ProcState::cell_finished() {
  std::lock_guard lock(mu);
  --live;
  if (live == 0) idle_cv.notify_all();
}

void ProcState::report_unhandled(const SupervisionEvent& ev) {
  if (options.on_unhandled_failure) {
    options.on_unhandled_failure(ev);
    return;
  }
  log_error(
      "unhandled actor failure in proc {}\n  {}\n"
      "  (no parent handled it; install Proc::Options::on_unhandled_failure or override "
      "Actor::supervise to handle failures)",
      id.name, ev.to_string());
  std::_Exit(1);
}

void ProcState::report_undeliverable(const Undeliverable& u) {
  if (options.on_undeliverable) {
    options.on_undeliverable(u);
    return;
  }
  log_warn("undeliverable message to {}: {}", u.dest.to_string(), u.message);
}

}  // namespace detail

// --- Proc -----------------------------------------------------------------------------------

namespace {
std::shared_ptr<detail::ProcState> register_proc(std::shared_ptr<detail::ProcState> s) {
  s->node->add_proc(s);
  return s;
}
}  // namespace

Proc::Proc(Options options) {
  auto pool = std::make_unique<ThreadPool>(options.threads);
  Executor* exec = pool.get();
  state_ =
      register_proc(std::make_shared<detail::ProcState>(std::move(options), exec, std::move(pool)));
  state_->owner = this;
}

Proc::Proc(Options options, Executor& executor) {
  state_ =
      register_proc(std::make_shared<detail::ProcState>(std::move(options), &executor, nullptr));
  state_->owner = this;
}

Proc::~Proc() {
  stop();
  if (detail::Router* router = state_->node->router()) router->close_links(*state_);
  state_->stop_background();
  // Actors run on the I/O thread too (run to completion): none may run once the pool is gone.
  if (state_->io) net::stop_inline(*state_->io);
  state_->pool.reset();  // joins the workers
  state_->closed.store(true, std::memory_order_release);
  {
    // Cells point at the proc state; dropping the table breaks that cycle.
    std::lock_guard lock(state_->mu);
    state_->actors.clear();
    state_->ports.clear();
  }
  state_->node->remove_proc(*state_);
}

detail::ProcState& detail::state_of(Proc& proc) {
  return *proc.state_;
}

const ProcId& Proc::id() const {
  return state_->id;
}

void detail::ProcState::run_stop_hooks() {
  std::vector<std::function<void()>> hooks;
  {
    std::lock_guard lock(mu);
    if (hooks_ran) return;
    hooks_ran = true;
    hooks.swap(stop_hooks);
  }
  for (auto& h : hooks) h();
}

void detail::add_stop_hook(Proc& proc, std::function<void()> hook) {
  auto& st = detail::state_of(proc);
  std::lock_guard lock(st.mu);
  if (!st.hooks_ran) st.stop_hooks.push_back(std::move(hook));
}

void Proc::stop() {
  state_->run_stop_hooks();
  std::vector<detail::CellPtr> roots;
  {
    std::lock_guard lock(state_->mu);
    if (state_->stopping && state_->live == 0) return;
    state_->stopping = true;
    for (auto& [id, cell] : state_->actors) {
      if (cell->parent() == nullptr) roots.push_back(cell);
    }
  }
  for (auto& c : roots) {
    auto* m = new detail::Message;
    m->kind = detail::Message::Kind::stop;
    m->sender = &state_->client;
    c->enqueue(m);
  }
  if (state_->executor->run_here_until_idle()) return;
  std::unique_lock lock(state_->mu);
  state_->idle_cv.wait(lock, [&] { return state_->live == 0; });
}

Future<void> detail::stop_all_but(Proc& proc, const ActorId& keep) {
  detail::state_of(proc).run_stop_hooks();
  std::vector<CellPtr> roots;
  {
    auto& st = detail::state_of(proc);
    std::lock_guard lock(st.mu);
    for (auto& [id, cell] : st.actors) {
      if (cell->parent() == nullptr && id != keep) roots.push_back(cell);
    }
  }
  struct Join {
    std::mutex mu;
    std::size_t left = 0;
    Promise<void> done;
  };
  auto join = std::make_shared<Join>();
  join->left = roots.size() + 1;
  auto result = join->done.get_future();
  auto arrive = [join] {
    std::unique_lock lock(join->mu);
    if (--join->left == 0) {
      lock.unlock();
      join->done.set_value();
    }
  };
  for (auto& c : roots) {
    auto stopped = stop_actor(c->id(), c);
    stopped.state()->on_ready(arrive);
  }
  arrive();
  return result;
}

std::pair<ActorId, detail::CellPtr> Proc::spawn_erased(
    detail::Cell* parent, const std::string& name, std::uint64_t factory, Body args,
    std::optional<detail::Supervisor> supervisor) {
  if (!is_valid_name(name)) {
    throw UsageError("invalid actor name '" + name + "': use 1-128 characters of [A-Za-z0-9_.-]");
  }
  ActorId id;
  detail::CellPtr cell;
  {
    std::lock_guard lock(state_->mu);
    if (state_->stopping) {
      throw UsageError("proc " + state_->id.name + " is stopping; it cannot spawn '" + name + "'");
    }
    id = ActorId{state_->id, name, state_->next_index[name]++};
    cell = std::make_shared<detail::Cell>(
        state_, id, parent != nullptr ? detail::cell_ptr(*parent) : nullptr, std::move(supervisor));
    auto* m = new detail::Message;
    m->kind = detail::Message::Kind::construct;
    m->factory = factory;
    m->body = std::move(args);
    m->sender = parent != nullptr ? &parent->id() : &state_->client;  // each outlives it
    cell->enqueue(m);
    state_->actors.emplace(id, cell);
    ++state_->live;
  }
  if (parent != nullptr) parent->add_child(cell);
  return {std::move(id), std::move(cell)};
}

PortId Proc::register_port(detail::PortSinkPtr sink) {
  std::lock_guard lock(state_->mu);
  const std::uint64_t n = state_->next_port++;
  state_->ports.emplace(n, std::move(sink));
  detail::Cell* c = detail::current_cell();
  return PortId{c != nullptr ? c->id() : state_->client, n};
}

}  // namespace baton
