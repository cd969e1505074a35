#pragma once

// Internal: what the layers above links may ask of an I/O thread, without Asio: running the
// work a handler woke on the I/O thread itself, right after that handler (run to completion).

#include <chrono>
#include <functional>

#include "baton/net/link.hpp"

namespace baton::net {

/// The IoThread whose loop thread is the calling thread, inside one of its handlers, with
/// running woken work there enabled and none waiting to run yet; otherwise null.
IoThread* inline_io_thread();

/// Whether the calling thread is an I/O thread's loop thread inside one of its handlers, with
/// work queued to run after it (run_after_handler).
bool inline_work_waits();

/// Runs `f` on `io`'s loop thread after the handler in progress, as that loop's own work;
/// only where inline_io_thread() is `io`. Sends from `f` may wait for room, as on any thread.
void run_after_handler(IoThread& io, std::function<void()> f);

/// From any thread but `io`'s own: no more work runs on `io`'s loop thread (what is queued
/// runs first); returns once none runs there.
void stop_inline(IoThread& io);

/// Whether the calling thread runs an I/O thread's event loop (as that loop's thread, its
/// watchdog or a guest).
bool on_io_thread();

/// Runs `io`'s event loop on the calling thread until `done()` or `deadline` (null: none), while
/// the loop's own thread waits: a thread waiting for a reply reads it itself, sparing the hand-off
/// from the loop thread. `when_done(wake)` must make `wake` run once `done()` turns true on
/// another thread. Returns false where it cannot lead (another thread does, or the loop
/// stopped) with `done()` still false; the caller then waits its own way.
bool drive_until(IoThread& io, const std::function<bool()>& done,
                 const std::function<void(std::function<void()>)>& when_done,
                 const std::chrono::steady_clock::time_point* deadline);

/// Tests: threads driving `io`'s loop spin on its busy shared-memory rings (spin.hpp) for up to
/// `window`, whatever the machine's load if `force`.
void spin_for_tests(IoThread& io, std::chrono::microseconds window, bool force);
/// Tests: spins on `io`'s rings that caught a frame, that ran out, and the rings watched now.
struct SpinCounts {
  std::uint64_t caught = 0;
  std::uint64_t ran_out = 0;
  int watched = 0;
};
SpinCounts spin_counts(IoThread& io);
/// Tests: the waits in which a caller ran `io`'s loop itself (drive_until), so far.
std::uint64_t guest_turns(IoThread& io);

/// The calling thread, running work an I/O thread woke, is about to block: another thread
/// takes that I/O thread's event loop over now. Does nothing on other threads.
void blocking_here();

}  // namespace baton::net
