// The actor the calling thread acts for, and what follows from it: its proc, where a
// continuation it registers runs, whether it may block (see actor/current.hpp).

#include "actor/current.hpp"

#include <string>
#include <utility>

#include "actor/cell.hpp"
#include "baton/actor/errors.hpp"

namespace baton::detail {
namespace {

thread_local Cell* t_current_cell = nullptr;

}  // namespace

ResumeContext*& current_resume_context() {
  thread_local ResumeContext* ctx = nullptr;
  return ctx;
}

Cell* current_cell() {
  return t_current_cell;
}

Cell* exchange_current_cell(Cell* cell) {
  return std::exchange(t_current_cell, cell);
}

std::shared_ptr<ProcState> current_proc() {
  Cell* c = t_current_cell;
  return c != nullptr ? c->proc().shared_from_this() : nullptr;
}

StrandPoster current_strand_poster() {
  Cell* c = t_current_cell;
  if (c == nullptr) return nullptr;
  return [weak = c->weak_from_this(), task = c->task_in_progress()](std::function<void(bool)> fn) {
    if (auto cell = weak.lock()) {
      cell->post_continuation(std::move(fn), task);
    } else {
      fn(false);
    }
  };
}

bool& may_block_in_actor() {
  thread_local bool allowed = false;
  return allowed;
}

void check_may_block(const char* what) {
  if (t_current_cell == nullptr || may_block_in_actor()) return;
  throw UsageError(std::string(what) + " inside actor " + t_current_cell->id().to_string() +
                   " would block a thread of its proc (and can deadlock it): co_await the future "
                   "in an endpoint that returns baton::Task<T>, or use then()");
}

}  // namespace baton::detail
