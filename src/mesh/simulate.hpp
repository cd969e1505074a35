#pragma once

// Internal to the mesh layer and its benchmark (`baton-bench scale`): many procs simulated in one
// process, reached by the cast tree as procs of other processes are. Every hop to a proc of this
// process is framed, queued and decoded as a link carries it, then run by the same handler that
// serves the cast port of a link; every result goes back framed to its reply port. Only the
// transport is in-process: the tree, the routing and the codec are those of real procs.

#include <cstdint>

#include "baton/actor/proc.hpp"

namespace baton::detail {

/// What the root's proc sent and received through simulated links since the last call.
struct SimulatedTraffic {
  std::uint64_t frames_sent = 0;
  std::uint64_t bytes_sent = 0;
  std::uint64_t frames_received = 0;
  std::uint64_t bytes_received = 0;
};

/// Starts simulating links between the procs of this process; the casts of `root` (the proc
/// that starts them) are counted. Throws UsageError if a simulation runs already.
void simulate_links(Proc& root);
/// Stops it, once what is queued has run.
void stop_simulating_links();
/// The root's traffic since the last call (or the start), and counting starts afresh.
SimulatedTraffic take_simulated_traffic();

}  // namespace baton::detail
