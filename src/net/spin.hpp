#pragma once

// Internal: spinning on shared-memory rings instead of sleeping, where that is free.
//
// A same-host link's reader that finds its ring empty says it sleeps, and its peer then rings a
// doorbell (its eventfd) to wake it: a system call for the writer, a wake-up across
// cores for the reader, tens of microseconds on a small machine. Where a reply or the next
// request is due within a few microseconds, a thread that would otherwise block (an I/O thread's
// loop, or a caller leading the loop while it waits for its reply) watches the rings instead,
// with the reader awake: the peer writes without ringing, and the frame is read at once.
//
// It spins only when that costs nobody a core and is likely to pay:
//   - on the rings of links whose last frame came within the window of the one before it (a
//     link quiet for longer, or on which a spin just ran out, is not watched until it is busy
//     again), so an idle proc never spins;
//   - for at most the window (BATON_SPIN_US, 200 microseconds by default; 0 never spins);
//   - only while the machine has no more runnable threads than cores (/proc/loadavg, looked at
//     when a spin starts and every 10 microseconds during it), and never where the thread that
//     makes the event loop's spinner may run on one core only (a machine of one core, or a
//     process bound to one, as taskset or a scheduler's CPU binding does): there the peer it
//     waits for could only run once the spin ended;
//   - only while its spins pay (SpinBudget): an event loop whose spins mostly end with no frame
//     (many procs sharing few cores take turns, and a spin that the load cuts short spent a
//     core for nothing) stops spinning, and tries again now and then.
// Between spins every reader is asleep as before, so a thread that stops driving the loop
// leaves nothing unwatched.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "net/asio.hpp"

#include "net/shm_ring.hpp"

namespace baton::net {

/// One link's reading end, as a spinner sees it. Made by the link, registered with the
/// Spinners of its event loop, and forgotten once the link is gone.
struct SpinTarget {
  std::weak_ptr<void> owner;            // the link: alive while its rings are mapped
  shm::RingControl* control = nullptr;  // the ring the link reads (shared memory)
  std::atomic<std::uint64_t> seen{0};   // the reader's position when it last parked
  std::atomic<bool> hot{false};         // frames come closer together than the window
  std::function<void()> resume;         // posts the link's read to its strand
};

/// Whether spinning pays on one event loop, learnt from how its spins ended. A spin that catches
/// a frame saves its peer a wake-up and this thread a sleep; one that ends with none spent a core
/// for nothing. Spins are allowed while at least two in three of them catch (each catch earns
/// one credit, each miss costs two); with no credit left, one chance in kProbeEvery spins, so a
/// loop whose traffic changes learns it.
class SpinBudget {
 public:
  static constexpr int kMaxCredit = 8;
  static constexpr int kProbeEvery = 16;
  /// Whether the next chance to spin is taken.
  bool allow() { return credit_ > 0 || ++without_credit_ % kProbeEvery == 0; }
  void caught() { credit_ = std::min(credit_ + 1, kMaxCredit); }
  void missed() { credit_ = std::max(credit_ - 2, 0); }

 private:
  int credit_ = kMaxCredit;
  unsigned without_credit_ = 0;  // chances met with no credit left
};

/// The spin targets of one event loop (an Asio service of its io_context).
class Spinners : public asio::execution_context::service {
 public:
  /// How long a look that found every core busy is believed. On a small machine under load (the
  /// case it saves) the waits it spares come every few tens of microseconds, and each would
  /// otherwise poll its event loop and read /proc/loadavg before sleeping: two system calls of
  /// a microsecond or more each, in a virtual machine.
  static constexpr std::chrono::milliseconds kBusyHeld{1};

  using key_type = Spinners;
  static inline asio::execution_context::id id;
  explicit Spinners(asio::execution_context& ctx);

  void add(std::shared_ptr<SpinTarget> t);
  /// Whether a spin could pay: some target is hot, and spinning is allowed in this process.
  bool worth_spinning() const {
    return hot_.load(std::memory_order_relaxed) > 0 &&
           window_us_.load(std::memory_order_relaxed) > 0;
  }
  /// Marks `t` hot or not (its link's strand, as frames come).
  void set_hot(SpinTarget& t, bool hot);
  /// The spin window (0: never).
  std::chrono::microseconds window() const {
    return std::chrono::microseconds(window_us_.load(std::memory_order_relaxed));
  }

  /// The calling thread drives `ctx` and has nothing to run: watches the hot targets' rings
  /// until a frame comes (its link's read is posted), another event is ready (it runs it), the
  /// window or `deadline` passes, or the machine has no core to spare. Returns how many
  /// handlers it ran (0: the caller may block).
  std::size_t spin(asio::io_context& ctx, const std::chrono::steady_clock::time_point* deadline);

  /// Tests: spins whatever the machine's load (`force`), with this window.
  void set_for_tests(std::chrono::microseconds window, bool force);
  /// Tests: the machine's load is read from `path` (as /proc/loadavg reads), and a look that
  /// finds it busy is believed for `busy_held`.
  void load_from_for_tests(const std::string& path, std::chrono::nanoseconds busy_held);
  /// Spins that caught a frame, spins that ran out, and targets watched now.
  struct Stats {
    std::uint64_t caught = 0;
    std::uint64_t ran_out = 0;
    int hot = 0;
    std::uint64_t load_looks = 0;  // reads of the machine's load
  };
  Stats stats() const {
    return {caught_.load(), ran_out_.load(), hot_.load(std::memory_order_relaxed),
            load_looks_.load(std::memory_order_relaxed)};
  }

 private:
  void shutdown() override {}
  bool machine_has_room();
  /// False while a look at the machine's load found no core to spare less than kBusyHeld ago
  /// (busy_held_ns_): a spin is not tried then, at the cost of no system call.
  bool may_have_room() const;
  bool machine_has_room_now();  // reads /proc/loadavg

  mutable std::mutex mu_;
  std::vector<std::shared_ptr<SpinTarget>> targets_;
  std::atomic<int> hot_{0};
  std::atomic<std::uint64_t> caught_{0};
  std::atomic<std::uint64_t> ran_out_{0};
  SpinBudget budget_;  // the spinner's (spinning_ held)
  std::atomic<std::int64_t> window_us_;
  std::atomic<bool> force_{false};
  int cpus_;
  int loadavg_fd_ = -1;
  std::atomic<std::int64_t> busy_until_ns_{0};  // steady clock: the last look found no room
  std::atomic<std::int64_t> busy_held_ns_{
      std::chrono::duration_cast<std::chrono::nanoseconds>(kBusyHeld).count()};
  std::atomic<std::uint64_t> load_looks_{0};
  std::atomic<bool> spinning_{false};                 // one spinner at a time
  std::vector<std::shared_ptr<SpinTarget>> watched_;  // the spinner's
  std::vector<std::shared_ptr<void>> held_;           // their links, held while watched
};

/// Runs one handler of `ctx` (blocking until one is ready, or until `deadline`), spinning on its
/// hot rings (`spinners`, its service) first where that is worth it. Returns how many ran (0: the
/// loop stopped, or the deadline passed).
std::size_t run_one_spinning(asio::io_context& ctx, Spinners& spinners,
                             const std::chrono::steady_clock::time_point* deadline);

}  // namespace baton::net
