// Spinning on shared-memory rings where that is free (see spin.hpp).

#include "net/spin.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <immintrin.h>
#include <algorithm>
#include <cstdlib>

#include "log/log.hpp"
#include "wire/cpus.hpp"

namespace baton::net {

namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kDefaultWindow = std::chrono::microseconds(200);
// How often a spinner looks at the event loop's other events and lets a thread waiting for its
// core run (sched_yield), and how often at the machine's load.
constexpr int kPollEvery = 32;  // pauses: a microsecond or two
constexpr auto kLoadEvery = std::chrono::microseconds(10);
std::int64_t steady_ns(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

std::chrono::microseconds window_from_env() {
  const char* v = std::getenv("BATON_SPIN_US");
  if (v == nullptr || *v == '\0') return kDefaultWindow;
  char* end = nullptr;
  const long us = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || us < 0 || us > 10'000) {
    static std::once_flag said;  // once a process, not once an event loop
    std::call_once(said, [&] {
      detail::log_warn(
          "BATON_SPIN_US={} is not a number of microseconds from 0 (never spin) to 10000; "
          "spinning for up to {} us",
          v, kDefaultWindow.count());
    });
    return kDefaultWindow;
  }
  return std::chrono::microseconds(us);
}

/// The reader of `t` is awake: the peer writes without ringing. True if a frame came already.
bool wake(SpinTarget& t) {
  t.control->reader_sleeps.store(0, std::memory_order_seq_cst);
  return t.control->head.load(std::memory_order_seq_cst) != t.seen.load(std::memory_order_relaxed);
}

/// The reader of `t` sleeps again (the peer rings for what it writes next). True if a frame came
/// before it did: the read must be resumed, and it stays awake.
bool sleep(SpinTarget& t) {
  t.control->reader_sleeps.store(shm::asleep_here(), std::memory_order_seq_cst);
  if (t.control->head.load(std::memory_order_seq_cst) == t.seen.load(std::memory_order_relaxed)) {
    return false;
  }
  t.control->reader_sleeps.store(0, std::memory_order_seq_cst);
  return true;
}

bool moved(const SpinTarget& t) {
  return t.control->head.load(std::memory_order_acquire) != t.seen.load(std::memory_order_relaxed);
}

}  // namespace

Spinners::Spinners(asio::execution_context& ctx)
    : asio::execution_context::service(ctx),
      window_us_(window_from_env().count()),
      cpus_(get_nprocs()) {
  if (wire::usable_cpus() < 2) window_us_ = 0;  // the peer a spin waits for needs a core
  loadavg_fd_ = ::open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
}

void Spinners::add(std::shared_ptr<SpinTarget> t) {
  std::lock_guard lock(mu_);
  // Forget the targets of links that are gone, now and then, so the list stays the live ones.
  std::erase_if(targets_, [&](const std::shared_ptr<SpinTarget>& old) {
    if (!old->owner.expired()) return false;
    if (old->hot.exchange(false)) hot_.fetch_sub(1, std::memory_order_relaxed);
    return true;
  });
  targets_.push_back(std::move(t));
}

void Spinners::set_hot(SpinTarget& t, bool hot) {
  if (t.hot.exchange(hot, std::memory_order_relaxed) == hot) return;
  hot_.fetch_add(hot ? 1 : -1, std::memory_order_relaxed);
}

void Spinners::set_for_tests(std::chrono::microseconds window, bool force) {
  window_us_ = window.count();
  force_ = force;
}

void Spinners::load_from_for_tests(const std::string& path, std::chrono::nanoseconds busy_held) {
  if (loadavg_fd_ >= 0) ::close(loadavg_fd_);
  loadavg_fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  busy_held_ns_ = busy_held.count();
  busy_until_ns_ = 0;
}

bool Spinners::may_have_room() const {
  return force_ || steady_ns(Clock::now()) >= busy_until_ns_.load(std::memory_order_relaxed);
}

bool Spinners::machine_has_room() {
  if (force_) return true;
  if (loadavg_fd_ < 0) return false;
  const bool room = machine_has_room_now();
  if (!room) {
    busy_until_ns_.store(steady_ns(Clock::now()) + busy_held_ns_.load(std::memory_order_relaxed),
                         std::memory_order_relaxed);
  }
  return room;
}

bool Spinners::machine_has_room_now() {
  load_looks_.fetch_add(1, std::memory_order_relaxed);
  // "0.10 0.20 0.30 R/T LAST": R threads runnable now, this one among them.
  char buf[128];
  const ssize_t n = ::pread(loadavg_fd_, buf, sizeof(buf) - 1, 0);
  if (n <= 0) return false;
  buf[n] = '\0';
  int fields = 0;
  const char* p = buf;
  while (*p != '\0' && fields < 3) {
    if (*p++ == ' ') ++fields;
  }
  char* end = nullptr;
  const long runnable = std::strtol(p, &end, 10);
  if (end == p || *end != '/') return false;
  return runnable <= cpus_;
}

std::size_t Spinners::spin(asio::io_context& ctx, const Clock::time_point* deadline) {
  if (spinning_.exchange(true)) return 0;
  struct Done {
    std::atomic<bool>& flag;
    ~Done() { flag.store(false); }
  } done{spinning_};
  if (!may_have_room()) return 0;
  if (std::size_t ran = ctx.poll_one(); ran > 0) return ran;
  watched_.clear();
  held_.clear();
  {
    std::lock_guard lock(mu_);
    for (const auto& t : targets_) {
      if (!t->hot.load(std::memory_order_relaxed)) continue;
      auto owner = t->owner.lock();
      if (!owner) continue;
      watched_.push_back(t);
      held_.push_back(std::move(owner));
    }
  }
  auto release = [&] {
    watched_.clear();
    held_.clear();  // may end a link: after the lists are consistent
  };
  if (watched_.empty()) return 0;
  if (!budget_.allow()) {
    release();
    return 0;
  }
  const Clock::time_point start = Clock::now();
  if (!machine_has_room()) {
    release();
    return 0;
  }
  Clock::time_point until = start + window();
  if (deadline != nullptr) until = std::min(until, *deadline);
  Clock::time_point load_checked = start;
  bool came = false;
  for (const auto& t : watched_) came = wake(*t) || came;
  std::size_t ran = 0;
  for (int i = 1; !came; ++i) {
    for (const auto& t : watched_) came = moved(*t) || came;
    if (came) break;
    _mm_pause();
    if (i % kPollEvery != 0) continue;
    if ((ran = ctx.poll_one()) > 0 || ctx.stopped()) break;  // another event came first
    ::sched_yield();  // a thread woken on this core runs now, not when the spin ends
    const Clock::time_point now = Clock::now();
    if (now >= until) {
      ran_out_.fetch_add(1, std::memory_order_relaxed);
      for (const auto& t : watched_) set_hot(*t, false);  // quiet: not watched till busy again
      break;
    }
    if (now - load_checked >= kLoadEvery) {
      load_checked = now;
      if (!machine_has_room()) break;
    }
  }
  if (came) {
    caught_.fetch_add(1, std::memory_order_relaxed);
    budget_.caught();
  } else if (ran == 0) {
    budget_.missed();  // the window ran out or the machine got busy: a core spent for nothing
  }
  for (const auto& t : watched_) {
    if (sleep(*t)) t->resume();
  }
  release();
  return ran;
}

std::size_t run_one_spinning(asio::io_context& ctx, Spinners& spinners,
                             const Clock::time_point* deadline) {
  if (spinners.worth_spinning()) {
    if (const std::size_t ran = spinners.spin(ctx, deadline); ran > 0) return ran;
  }
  return deadline != nullptr ? ctx.run_one_until(*deadline) : ctx.run_one();
}

}  // namespace baton::net
