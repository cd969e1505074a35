#include "actor/node.hpp"

#include "actor/cell.hpp"
#include "actor/directory.hpp"

namespace baton::detail {
namespace {

// Where threads without a proc of their own find the node: a weak reference, so the node dies
// with its last owner. Never destroyed itself: threads may look during the process's exit.
struct Slot {
  std::mutex mu;
  std::weak_ptr<Node> node;
};
Slot& slot() {
  static auto* s = new Slot;  // NOLINT: a pointer to the owned node, not state of its own
  return *s;
}

}  // namespace

std::shared_ptr<Node> Node::acquire() {
  auto& s = slot();
  std::lock_guard lock(s.mu);
  if (auto live = s.node.lock()) return live;
  auto made = std::make_shared<Node>();
  s.node = made;
  return made;
}

std::shared_ptr<Node> Node::current() {
  auto& s = slot();
  std::lock_guard lock(s.mu);
  return s.node.lock();
}

Node::~Node() {
  // Upper layers' state first: it may still use the router while it goes.
  extensions_.clear();
  router_.store(nullptr, std::memory_order_release);
  router_owned_.reset();
}

std::shared_ptr<ProcState> Node::find_proc(const std::string& name) {
  std::lock_guard lock(mu_);
  auto it = procs_.find(name);
  return it == procs_.end() ? nullptr : it->second.lock();
}

void Node::add_proc(const std::shared_ptr<ProcState>& proc) {
  std::lock_guard lock(mu_);
  auto& slot = procs_[proc->id.name];
  if (!slot.expired()) {
    throw UsageError("a proc named '" + proc->id.name +
                     "' already exists in this process; give each Proc a unique name");
  }
  slot = proc;
}

void Node::remove_proc(const ProcState& proc) {
  std::lock_guard lock(mu_);
  auto it = procs_.find(proc.id.name);
  if (it == procs_.end()) return;
  auto live = it->second.lock();
  if (!live || live.get() == &proc) procs_.erase(it);
}

std::size_t Node::procs() {
  std::lock_guard lock(mu_);
  return procs_.size();
}

Router& Node::install_router(const std::function<std::unique_ptr<Router>(Node&)>& make) {
  std::lock_guard lock(mu_);
  if (!router_owned_) {
    router_owned_ = make(*this);
    router_.store(router_owned_.get(), std::memory_order_release);
  }
  return *router_owned_;
}

std::shared_ptr<Node> node_here() {
  if (Cell* c = current_cell()) return c->proc().node;
  return Node::current();
}

}  // namespace baton::detail
