#pragma once

// Internal: what this process knows of its procs and actor types: the node's directory of procs,
// the registered factories, the proc that dials other processes, the sender of a message sent
// now, and the sizes of the tables kept (for tests).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "actor/proc_state.hpp"
#include "baton/actor/actor_ref.hpp"

namespace baton::detail {

/// The proc `id` in this process (see Node), or null.
std::shared_ptr<ProcState> find_proc(const ProcId& id);

struct Factories {
  Factory make = nullptr;
  const ActorTypeInfo* type = nullptr;
};
const Factories* find_factory(std::uint64_t id);

/// The proc that dials other processes from this one (the last to serve), or null.
std::shared_ptr<ProcState> home_proc();
/// The same proc (the runtime's, in a program with one), for the layers that host actors or
/// ports of their own in this process: the rdma agent, a collective's store, a Python port.
/// Throws UsageError, naming `who` and what to do, where no proc serves here.
Proc& serving_proc(std::string_view who);

/// The sender of a message sent now: the running actor, else `fallback`'s client.
const ActorId& current_sender(const ProcState* fallback);

/// The sizes of the tables this process keeps (for tests that check they do not grow).
struct TableSizes {
  std::size_t procs = 0;      // in the node's directory
  std::size_t actors = 0;     // live actors of the proc asked about
  std::size_t ended = 0;      // ended actors it remembers
  std::size_t ports = 0;      // its open ports
  std::size_t routes = 0;     // links to other processes
  std::size_t addresses = 0;  // procs whose address is known
  std::size_t failures = 0;   // procs known to have died
  std::size_t closed = 0;     // procs whose link closed, with why
  bool operator==(const TableSizes&) const = default;
};
TableSizes table_sizes(ProcState& proc);

}  // namespace baton::detail
