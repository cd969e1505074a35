#pragma once

// Internal: the actor the calling thread acts for (see current_cell() in
// baton/actor/actor_ref.hpp), for the layers above that need its proc or act for it, without the
// cell's definition.

#include <memory>

#include "baton/actor/actor_ref.hpp"

namespace baton::detail {

class ProcState;

/// Makes the calling thread act for `cell` (null: for no actor) until the returned previous
/// value is put back: what it sends is from that actor, what it spawns is owned by it, and
/// blocking is refused as on the actor's own thread. For an actor's work that another thread
/// runs while the actor waits for it (a Python actor's async endpoint on its event loop).
Cell* exchange_current_cell(Cell* cell);

/// While one lives, the calling thread acts for `cell` (null: for no actor), as
/// exchange_current_cell(); the actor it acted for before is put back when it goes.
class ActingFor {
 public:
  explicit ActingFor(Cell* cell) : was_(exchange_current_cell(cell)) {}
  ~ActingFor() { (void)exchange_current_cell(was_); }
  ActingFor(const ActingFor&) = delete;
  ActingFor& operator=(const ActingFor&) = delete;

 private:
  Cell* was_;
};

/// The proc of the actor the calling thread runs, or null outside actors.
std::shared_ptr<ProcState> current_proc();

}  // namespace baton::detail
