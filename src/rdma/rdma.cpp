#include "baton/rdma/rdma.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <thread>
#include <unordered_map>

#include "baton/actor/errors.hpp"
#include "baton/actor/proc.hpp"
#include "baton/host/runtime.hpp"
#include "baton/wire/bytes.hpp"
#include "rdma/ucx.hpp"

namespace baton {

std::string_view to_string(RdmaBackend b) {
  switch (b) {
    case RdmaBackend::automatic:
      return "auto";
    case RdmaBackend::local:
      return "local";
    case RdmaBackend::gpu_ipc:
      return "gpu_ipc";
    case RdmaBackend::ucx:
      return "ucx";
    case RdmaBackend::messages:
      break;
  }
  return "messages";
}

namespace {

constexpr std::size_t kChunk = std::size_t{4} << 20;  // messages backend: bytes per message
constexpr std::size_t kWindow = 8;                    // and messages in flight per transfer
// UCX through staging memory: bytes per operation, and operations in flight per transfer.
constexpr std::size_t kUcxChunk = std::size_t{32} << 20;
constexpr std::size_t kUcxWindow = 2;

RdmaBackend backend_from_env() {
  const char* v = std::getenv("BATON_RDMA_BACKEND");
  if (v == nullptr || *v == 0 || std::string_view(v) == "auto") return RdmaBackend::automatic;
  for (RdmaBackend b : {RdmaBackend::gpu_ipc, RdmaBackend::ucx, RdmaBackend::messages}) {
    if (to_string(b) == v) return b;
  }
  throw RdmaError(std::string("BATON_RDMA_BACKEND='") + v +
                  "' is not one of auto, ucx, gpu_ipc, messages");
}

std::chrono::milliseconds timeout_from_env() {
  const char* v = std::getenv("BATON_RDMA_TIMEOUT_MS");
  return std::chrono::milliseconds(v != nullptr ? std::strtoll(v, nullptr, 10) : 30000);
}

struct Settings {
  std::atomic<RdmaBackend> backend{backend_from_env()};
  std::atomic<std::int64_t> timeout_ms{timeout_from_env().count()};
  std::atomic<std::uint64_t> local{0}, gpu_ipc{0}, ucx{0}, messages{0}, chunks{0};
};
Settings& settings() {
  static Settings s;
  return s;
}

const std::string& host_identity() {
  static const std::string id = [] {
    std::array<char, 256> name{};
    ::gethostname(name.data(), name.size() - 1);
    std::string boot;
    std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
    return std::string(name.data()) + "/" + boot;
  }();
  return id;
}

bool on_device(const void* p) {
  const gpu::DeviceApi& g = gpu::api();
  return g.available() && g.pointer_info(p).device;
}

/// Copies between any two memories of this process.
void copy_any(void* dst, const void* src, std::size_t n, bool device) {
  if (device) {
    gpu::api().copy(dst, src, n);
  } else {
    std::memcpy(dst, src, n);
  }
}

// --- The owner's side: registered regions. ---

struct Region {
  std::uint64_t id = 0;
  std::byte* data = nullptr;
  std::size_t size = 0;
  bool device = false;
  bool owned = false;  // allocate(): freed with the region
  rdma_detail::UcxRegion ucx;
  Region() = default;
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
  ~Region() {
    if (ucx.memh != nullptr) {
      if (auto* u = rdma_detail::Ucx::get()) u->unmap(ucx);  // frees UCX-allocated memory too
    } else if (owned) {
      std::free(data);  // NOLINT: allocated with aligned_alloc
    }
  }
};
using RegionPtr = std::shared_ptr<Region>;

/// The regions this process registered. A copy that touches one holds `use_` shared; removing
/// one takes it alone, so drop() and a stopping proc wait for copies under way (R-4).
class Registry {
 public:
  static Registry& get() {
    static Registry r;
    return r;
  }
  void add(RegionPtr r) {
    std::lock_guard lock(mu_);
    regions_[r->id] = std::move(r);
  }
  RegionPtr find(std::uint64_t id) const {
    std::lock_guard lock(mu_);
    auto it = regions_.find(id);
    return it == regions_.end() ? nullptr : it->second;
  }
  /// Checks that the region holds [offset, offset + size); throws what a peer should be told.
  void expect(std::uint64_t id, std::uint64_t offset, std::uint64_t size) const {
    std::shared_lock in_use(use_);
    checked(id, offset, size);
  }
  /// Runs `touch(region)` on the checked region, which stays registered meanwhile.
  template <class F>
  void use(std::uint64_t id, std::uint64_t offset, std::uint64_t size, F touch) const {
    std::shared_lock in_use(use_);
    touch(*checked(id, offset, size));
  }
  /// Unregisters `id` once no copy touches it; false if it was not registered. After the proc
  /// began to stop, every region is gone already and that is no error.
  bool remove(std::uint64_t id) {
    RegionPtr r;
    std::unique_lock alone(use_);
    std::lock_guard lock(mu_);
    auto it = regions_.find(id);
    if (it == regions_.end()) return stopping_;
    r = std::move(it->second);
    regions_.erase(it);
    return true;
  }
  /// The proc is stopping: its actors, which may own the memory, are about to go. Every region
  /// is unregistered once no copy touches it; later transfers fail as dropped.
  void close() {
    std::unordered_map<std::uint64_t, RegionPtr> gone;
    std::unique_lock alone(use_);
    std::lock_guard lock(mu_);
    stopping_ = true;
    gone.swap(regions_);
  }
  std::uint64_t next_id() { return ++last_id_; }

  static std::string fit_message(std::uint64_t id, std::uint64_t buffer, std::uint64_t offset,
                                 std::uint64_t size) {
    return "a transfer of " + std::to_string(size) + " bytes at offset " + std::to_string(offset) +
           " does not fit RdmaBuffer #" + std::to_string(id) + " of " + std::to_string(buffer) +
           " bytes: transfer at most size() - offset bytes";
  }

 private:
  RegionPtr checked(std::uint64_t id, std::uint64_t offset, std::uint64_t size) const {
    RegionPtr r = find(id);
    if (r == nullptr) {
      throw RdmaError(
          "RdmaBuffer #" + std::to_string(id) +
          (stopping_
               ? " was dropped: its owner's proc is stopping; register the memory in a live proc"
               : " was dropped (or never registered in this process): register "
                 "the memory again and send the new handle"));
    }
    if (offset > r->size || size > r->size - offset) {
      throw RdmaError(fit_message(id, r->size, offset, size));
    }
    return r;
  }

  mutable std::shared_mutex use_;
  mutable std::mutex mu_;
  std::unordered_map<std::uint64_t, RegionPtr> regions_;
  std::atomic<bool> stopping_{false};
  std::atomic<std::uint64_t> last_id_{0};
};

}  // namespace

namespace detail {

/// Each process's rdma actor: answers the checks that come with one-sided transfers, and moves
/// the bytes itself for the messages backend.
class RdmaAgent : public Actor {
 public:
  void check(std::uint64_t id, std::uint64_t offset, std::uint64_t size) {
    Registry::get().expect(id, offset, size);
  }
  Bytes read(std::uint64_t id, std::uint64_t offset, std::uint64_t size) {
    Bytes out;
    Registry::get().use(id, offset, size, [&](const Region& r) {
      if (!r.device) {
        out = Bytes::copy(r.data + offset, size);
        return;
      }
      std::vector<std::byte> staged(size);
      gpu::api().copy(staged.data(), r.data + offset, size);
      out = Bytes::adopt(std::move(staged));
    });
    return out;
  }
  void write(std::uint64_t id, std::uint64_t offset, const Bytes& data) {
    Registry::get().use(id, offset, data.size(), [&](const Region& r) {
      copy_any(r.data + offset, data.data(), data.size(), r.device);
    });
  }
  void drop(std::uint64_t id) {
    if (!Registry::get().remove(id)) {
      throw RdmaError("RdmaBuffer #" + std::to_string(id) + " was already dropped");
    }
  }
  static constexpr auto endpoints =
      baton::endpoints<&RdmaAgent::check, &RdmaAgent::read, &RdmaAgent::write, &RdmaAgent::drop>();
};

}  // namespace detail

namespace {

using detail::RdmaAgent;

ActorRef<RdmaAgent> agent() {
  static std::mutex mu;
  static ActorRef<RdmaAgent> ref;
  std::lock_guard lock(mu);
  if (ref.id().proc.name.empty()) {
    Proc& proc = Runtime::get().proc();
    detail::add_stop_hook(proc, [] { Registry::get().close(); });
    ref = proc.spawn<RdmaAgent>("rdma");
  }
  return ref;
}

/// A few threads that run copies and UCX submissions, so no caller or I/O thread blocks on a
/// large transfer; and the watchdog for timeouts.
class Workers {
 public:
  static Workers& get() {
    static Workers w;
    return w;
  }
  void post(std::function<void()> f) {
    {
      std::lock_guard lock(mu_);
      queue_.push_back(std::move(f));
    }
    cv_.notify_one();
  }
  using TimerKey = std::pair<std::chrono::steady_clock::time_point, std::uint64_t>;
  /// Runs `f` on a worker thread at `when`, unless cancelled before.
  TimerKey at(std::chrono::steady_clock::time_point when, std::function<void()> f) {
    TimerKey key;
    {
      std::lock_guard lock(mu_);
      key = {when, ++last_timer_};
      timers_.emplace(key, std::move(f));
    }
    cv_.notify_all();
    return key;
  }
  void cancel(const TimerKey& key) {
    std::lock_guard lock(mu_);
    timers_.erase(key);  // gone already if it ran
  }

 private:
  Workers() {
    for (int i = 0; i < 2; ++i) {
      threads_.emplace_back([this] { run(); });
    }
  }
  ~Workers() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  void run() {
    std::unique_lock lock(mu_);
    while (!stop_) {
      auto now = std::chrono::steady_clock::now();
      if (!timers_.empty() && timers_.begin()->first.first <= now) {
        auto f = std::move(timers_.begin()->second);
        timers_.erase(timers_.begin());
        lock.unlock();
        f();
        lock.lock();
        continue;
      }
      if (!queue_.empty()) {
        auto f = std::move(queue_.front());
        queue_.pop_front();
        lock.unlock();
        f();
        lock.lock();
        continue;
      }
      if (timers_.empty()) {
        cv_.wait(lock);
      } else {
        const auto until = timers_.begin()->first.first;  // the node may go while we wait
        cv_.wait_until(lock, until);
      }
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  std::map<TimerKey, std::function<void()>> timers_;
  std::uint64_t last_timer_ = 0;
  std::vector<std::thread> threads_;
  bool stop_ = false;
};

/// One transfer, made of parts (a check, chunks, a one-sided copy). It completes when every
/// part has, or, after a failure or timeout, once no part that writes on its own (a device copy,
/// a UCX copy straight into the caller's memory) is still running: guarded parts touch the
/// caller's memory under the lock, and are left behind (R-2).
class Transfer : public std::enable_shared_from_this<Transfer> {
 public:
  explicit Transfer(std::string what) : what_(std::move(what)) {}
  Future<void> future() const { return promise_.get_future(); }

  void add(bool guarded) {
    std::lock_guard lock(mu_);
    ++pending_;
    if (!guarded) ++unguarded_;
  }
  /// Counts in a part that writes on its own, unless the transfer already failed; false if so.
  bool start_unguarded() {
    std::lock_guard lock(mu_);
    if (failed_) return false;
    ++pending_;
    ++unguarded_;
    return true;
  }
  /// Runs `touch` (a copy into or out of the caller's memory) unless the transfer already
  /// failed; whether it ran.
  template <class F>
  bool guarded(F&& touch) {
    std::lock_guard lock(mu_);
    if (failed_) return false;
    touch();
    return true;
  }
  void done(bool guarded, const std::string& error = {}) {
    std::unique_lock lock(mu_);
    --pending_;
    if (!guarded) --unguarded_;
    if (!error.empty()) fail_locked(error);
    maybe_complete(lock);
  }
  void fail(const std::string& error) {
    std::unique_lock lock(mu_);
    fail_locked(error);
    maybe_complete(lock);
  }
  bool failed() const {
    std::lock_guard lock(mu_);
    return failed_;
  }
  bool completed() const {
    std::lock_guard lock(mu_);
    return completed_;
  }
  void arm_timeout() {
    auto ms = std::chrono::milliseconds(settings().timeout_ms.load());
    std::weak_ptr<Transfer> weak = shared_from_this();
    std::lock_guard lock(mu_);
    if (completed_) return;
    timer_ = Workers::get().at(std::chrono::steady_clock::now() + ms, [weak, ms] {
      if (auto op = weak.lock()) {
        op->fail("timed out after " + std::to_string(ms.count()) +
                 " ms (set_rdma_timeout or BATON_RDMA_TIMEOUT_MS allows longer)");
      }
    });
  }

 private:
  void fail_locked(const std::string& error) {
    if (failed_) return;
    failed_ = true;
    error_ = error;
  }
  void maybe_complete(std::unique_lock<std::mutex>& lock) {
    if (completed_ || !(pending_ == 0 || (failed_ && unguarded_ == 0))) return;
    completed_ = true;
    bool failed = failed_;
    std::string message = what_ + ": " + error_;
    auto timer = timer_;
    lock.unlock();
    if (timer) Workers::get().cancel(*timer);
    if (failed) {
      promise_.set_exception(std::make_exception_ptr(RdmaError(message)));
    } else {
      promise_.set_value();
    }
  }

  std::string what_;
  Promise<void> promise_;
  mutable std::mutex mu_;
  int pending_ = 0;
  int unguarded_ = 0;
  bool failed_ = false;
  bool completed_ = false;
  std::string error_;
  std::optional<Workers::TimerKey> timer_;
};
using TransferPtr = std::shared_ptr<Transfer>;

/// The reason a call to the owner's rdma actor failed, for a user.
std::string reason(const std::exception_ptr& e, const RdmaBuffer& buffer) {
  try {
    std::rethrow_exception(e);
  } catch (const ActorError& a) {
    return a.remote_message();
  } catch (const SupervisionError& s) {
    return "the owner " + buffer.owner().id().to_string() + " is gone (" + s.what() +
           "); its memory is lost: register it again in a live proc";
  } catch (const std::exception& x) {
    return "the owner " + buffer.owner().id().to_string() + " cannot be reached: " + x.what();
  }
}

/// Runs `then(error)` when `f` completes; `error` is empty on success.
template <class T, class F>
void when_done(Future<T> f, const RdmaBuffer& buffer, F then) {
  const auto& state = f.state();
  state->on_ready([state, buffer, then = std::move(then)]() mutable {
    try {
      state->value();  // ready: no wait (and none allowed on an actor thread)
    } catch (...) {
      then(reason(std::current_exception(), buffer));
      return;
    }
    then(std::string());
  });
}

/// GPU IPC mappings of other processes' device memory, opened once per allocation.
class IpcCache {
 public:
  static IpcCache& get() {
    static IpcCache c;
    return c;
  }
  std::byte* open(const RdmaBuffer::Descriptor& d) {
    std::string key = std::to_string(d.pid) + "/" + std::to_string(d.id);
    std::lock_guard lock(mu_);
    auto it = open_.find(key);
    if (it != open_.end()) return it->second;
    auto* p = static_cast<std::byte*>(gpu::api().open_handle(d.ipc));
    open_[key] = p;
    return p;
  }
  void forget(const RdmaBuffer::Descriptor& d) {
    std::string key = std::to_string(d.pid) + "/" + std::to_string(d.id);
    std::lock_guard lock(mu_);
    auto it = open_.find(key);
    if (it == open_.end()) return;
    try {
      gpu::api().close_handle(it->second);
    } catch (const gpu::GpuError&) {
      // The owner's allocation may be gone already; the mapping is released either way.
    }
    open_.erase(it);
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::byte*> open_;
};

bool dropped(const std::string& error) {
  return error.find("was dropped") != std::string::npos;
}

/// Forgets what this process cached for a buffer that turned out dropped.
void forget_cached(const RdmaBuffer::Descriptor& d) {
  if (d.device) {
    IpcCache::get().forget(d);
  } else if (!d.ucx_worker.empty()) {
    if (auto* u = rdma_detail::Ucx::get()) u->forget(d.ucx_worker, d.rkey);
  }
}

RdmaBackend choose(const RdmaBuffer& b, const void* local, bool* local_device) {
  const auto& d = b.descriptor();
  *local_device = on_device(local);
  bool same_host = d.host == host_identity();
  bool same_process = same_host && d.pid == ::getpid();
  RdmaBackend forced = settings().backend.load();
  bool ipc_ok =
      d.device && same_host && gpu::api().available() && gpu::api().vendor() == d.ipc.vendor;
  bool ucx_ok =
      !d.device && !*local_device && !d.ucx_worker.empty() && rdma_detail::Ucx::get() != nullptr;
  switch (forced) {
    case RdmaBackend::automatic:
    case RdmaBackend::local:
      break;
    case RdmaBackend::messages:
      return RdmaBackend::messages;
    case RdmaBackend::gpu_ipc:
      if (!ipc_ok) {
        throw RdmaError(
            "the gpu_ipc backend is forced (BATON_RDMA_BACKEND) but cannot serve "
            "this transfer: it needs device memory of a proc on this host and a GPU "
            "of the same vendor here; use auto");
      }
      return RdmaBackend::gpu_ipc;
    case RdmaBackend::ucx:
      if (!ucx_ok) {
        std::string why;
        rdma_detail::Ucx::get(&why);
        throw RdmaError(
            "the ucx backend is forced (BATON_RDMA_BACKEND) but cannot serve this "
            "transfer: it moves host memory only, between procs that both have "
            "UCX" +
            (why.empty() ? std::string() : " (here: " + why + ")") + "; use auto");
      }
      return RdmaBackend::ucx;
  }
  if (same_process) return RdmaBackend::local;
  if (ipc_ok) return RdmaBackend::gpu_ipc;
  if (ucx_ok) return RdmaBackend::ucx;
  return RdmaBackend::messages;
}

/// Staging memory for UCX chunks, kUcxChunk bytes each, kept for reuse: a fresh page costs more to
/// touch than to copy.
class Staging {
 public:
  using Slot = std::shared_ptr<std::byte>;
  static Slot take() {
    static auto* pool = new Staging();  // NOLINT: outlives operations freed at exit
    std::byte* p = nullptr;
    {
      std::lock_guard lock(pool->mu_);
      if (!pool->free_.empty()) {
        p = pool->free_.back();
        pool->free_.pop_back();
      }
    }
    if (p == nullptr) p = new std::byte[kUcxChunk];  // NOLINT: owned by the slot's deleter
    return {p, [](std::byte* q) { pool->give_back(q); }};
  }

 private:
  void give_back(std::byte* p) {
    std::unique_lock lock(mu_);
    if (free_.size() < kKept) {
      free_.push_back(p);
      return;
    }
    lock.unlock();
    delete[] p;  // NOLINT: see take()
  }
  static constexpr std::size_t kKept = kUcxWindow;
  std::mutex mu_;
  std::vector<std::byte*> free_;
};

/// Reports the end of a part of `op`; a failure is explained by the owner if it is gone (a UCX
/// or IPC error says little about why), else the part's own error stands.
void part_done(const TransferPtr& op, const RdmaBuffer& b, bool guarded, const std::string& error) {
  if (error.empty()) return op->done(guarded);
  when_done(b.owner().call(&RdmaAgent::check, b.descriptor().id, 0, 0), b,
            [op, guarded, error](const std::string& owner) {
              op->done(guarded, owner.empty() || dropped(owner) ? error : owner);
            });
}

/// How long a UCX read of one chunk may go unanswered before it moves through messages.
constexpr std::chrono::seconds kUcxStall{2};

/// UCX workers that once left a read unanswered (see Pump::move_by_ucx).
class StalledOwners {
 public:
  static StalledOwners& get() {
    static StalledOwners s;
    return s;
  }
  void add(const std::string& worker) {
    std::lock_guard lock(mu_);
    workers_.insert(worker);
  }
  bool contains(const std::string& worker) const {
    std::lock_guard lock(mu_);
    return workers_.count(worker) != 0;
  }

 private:
  mutable std::mutex mu_;
  std::set<std::string> workers_;
};

/// Moves a transfer in chunks: through the owner's rdma actor (the messages backend: kChunk bytes,
/// kWindow in flight), or through UCX into and out of staging memory of this process, for memory
/// UCX cannot map here (kUcxChunk, kUcxWindow: larger, as each asks the owner's worker anew).
/// Either way only guarded copies touch the caller's memory, so a transfer that fails or times out
/// completes at once (R-2, R-3).
struct Pump : std::enable_shared_from_this<Pump> {
  TransferPtr op;
  RdmaBuffer buffer;
  std::byte* dst = nullptr;        // a read's destination
  const std::byte* src = nullptr;  // a write's source
  std::size_t size = 0, offset = 0, next = 0;
  bool device = false;  // the local memory is device memory
  bool ucx = false;
  std::mutex mu;

  void start() {
    for (std::size_t i = 0; i < (ucx ? kUcxWindow : kWindow); ++i) issue();
  }
  void issue() {
    std::size_t at = 0;
    std::size_t len = 0;
    {
      std::lock_guard lock(mu);
      if (next >= size || op->failed()) return;
      at = next;
      len = std::min(ucx ? kUcxChunk : kChunk, size - next);
      next += len;
    }
    op->add(true);
    try {
      if (ucx) {
        move_by_ucx(at, len);
      } else {
        move_by_message(at, len);
      }
    } catch (const std::exception& e) {
      finished(e.what());
    }
  }

 private:
  /// A chunk's end: the next one starts, or the transfer fails.
  void finished(const std::string& error) {
    if (!error.empty()) return op->done(true, error);
    ++settings().chunks;
    op->done(true);
    issue();
  }
  void move_by_message(std::size_t at, std::size_t len) {
    auto self = shared_from_this();
    const auto id = buffer.descriptor().id;
    if (dst != nullptr) {
      auto reply = buffer.owner().call(&RdmaAgent::read, id, offset + at, len);
      const auto& state = reply.state();
      state->on_ready([self, state, at, len] {
        std::string error;
        try {
          Bytes b = state->value();
          if (b.size() != len) throw RdmaError("short chunk");
          self->op->guarded([&] { copy_any(self->dst + at, b.data(), len, self->device); });
        } catch (...) {
          error = reason(std::current_exception(), self->buffer);
        }
        self->finished(error);
      });
      return;
    }
    std::vector<std::byte> staged(len);
    if (!op->guarded([&] { copy_any(staged.data(), src + at, len, device); })) {
      return op->done(true);  // failed already: nothing to send
    }
    auto reply =
        buffer.owner().call(&RdmaAgent::write, id, offset + at, Bytes::adopt(std::move(staged)));
    when_done(std::move(reply), buffer,
              [self](const std::string& error) { self->finished(error); });
  }
  void move_by_ucx(std::size_t at, std::size_t len) {
    auto self = shared_from_this();
    const auto& d = buffer.descriptor();
    auto* u = rdma_detail::Ucx::get();
    Staging::Slot slot = Staging::take();
    // 0: under way, 1: UCX answered, 2: given up on (a read moved by messages instead).
    auto state = std::make_shared<std::atomic<int>>(0);
    // UCX ends on its progress thread; the rest runs on a worker thread. A chunk abandoned
    // with its transfer keeps its slot until UCX is done with it.
    auto then = [self, slot, at, len, state](const std::string& error) {
      if (state->exchange(1) == 2) return;  // the slot goes back now
      Workers::get().post([self, slot, at, len, error] {
        if (!error.empty()) return part_done(self->op, self->buffer, true, error);
        if (self->dst != nullptr) {
          self->op->guarded([&] { std::memcpy(self->dst + at, slot.get(), len); });
        }
        self->finished({});
      });
    };
    if (dst != nullptr) {
      u->get(d.ucx_worker, d.rkey, d.address + offset + at, slot.get(), len, then);
      // Seen rarely with UCX 1.13 on a loaded host: a get its owner never answers, though the
      // owner lives and answers messages. The chunk then moves through messages, and so does
      // the owner's memory from then on. (Writes wait: a put that lands late would overwrite.)
      Workers::get().at(std::chrono::steady_clock::now() + kUcxStall,
                        [self, state, at, len, worker = d.ucx_worker] {
                          int running = 0;
                          if (!state->compare_exchange_strong(running, 2)) return;
                          StalledOwners::get().add(worker);
                          self->move_by_message(at, len);
                        });
    } else if (op->guarded([&] { std::memcpy(slot.get(), src + at, len); })) {
      u->put(d.ucx_worker, d.rkey, d.address + offset + at, slot.get(), len, then);
    } else {
      op->done(true);  // failed already: nothing to send
    }
  }
};

std::shared_ptr<Pump> make_pump(const TransferPtr& op, const RdmaBuffer& b, void* dst,
                                const void* src, std::size_t size, std::size_t offset) {
  auto pump = std::make_shared<Pump>();
  pump->op = op;
  pump->buffer = b;
  pump->dst = static_cast<std::byte*>(dst);
  pump->src = static_cast<const std::byte*>(src);
  pump->size = size;
  pump->offset = offset;
  return pump;
}

/// While a UCX transfer that needs the owner's help runs, asks every 250 ms whether the owner
/// still answers: a dead owner will never finish it, so the transfer fails at once rather than
/// at its timeout (R-3).
void watch_owner(const std::weak_ptr<Transfer>& weak, const RdmaBuffer& b) {
  Workers::get().at(std::chrono::steady_clock::now() + std::chrono::milliseconds(250), [weak, b] {
    auto op = weak.lock();
    if (op == nullptr || op->completed()) return;
    when_done(b.owner().call(&RdmaAgent::check, b.descriptor().id, 0, 0), b,
              [weak, b](const std::string& error) {
                auto running = weak.lock();
                if (running == nullptr) return;
                if (!error.empty() && !dropped(error)) {
                  running->fail(error);
                } else {
                  watch_owner(weak, b);
                }
              });
  });
}

/// Asks the owner whether [offset, offset + size) is still registered, then, unless the
/// transfer failed meanwhile, runs `then` on a worker thread; what it throws fails the transfer
/// (explained by the owner if it is gone).
template <class F>
void check_then(const TransferPtr& op, const RdmaBuffer& b, std::size_t offset, std::size_t size,
                F then) {
  op->add(true);
  const auto& d = b.descriptor();
  when_done(b.owner().call(&RdmaAgent::check, d.id, offset, size), b,
            [op, b, d, then = std::move(then)](const std::string& error) mutable {
              if (!error.empty()) {
                if (dropped(error)) forget_cached(d);
              } else if (!op->failed()) {
                op->add(true);  // held while `then` runs
                Workers::get().post([op, b, then = std::move(then)]() mutable {
                  try {
                    then();
                  } catch (const std::exception& e) {
                    return part_done(op, b, true, e.what());
                  }
                  op->done(true);
                });
              }
              op->done(true, error);
            });
}

std::string describe(const char* verb, const RdmaBuffer& b, std::size_t size, std::size_t offset) {
  return std::string(verb) + " of " + std::to_string(size) + " bytes at offset " +
         std::to_string(offset) + " of RdmaBuffer #" + std::to_string(b.descriptor().id) +
         " (owner " + b.owner().id().to_string() + ")";
}

Future<void> transfer(const RdmaBuffer& b, void* dst, const void* src, std::size_t size,
                      std::size_t offset) {
  const bool reading = dst != nullptr;
  const auto& d = b.descriptor();
  auto op = std::make_shared<Transfer>(describe(reading ? "read" : "write", b, size, offset));
  if (offset > d.size || size > d.size - offset) {
    op->fail(Registry::fit_message(d.id, d.size, offset, size));
    return op->future();
  }
  bool local_device = false;
  RdmaBackend backend = RdmaBackend::messages;
  try {
    backend = choose(b, reading ? dst : src, &local_device);
  } catch (const RdmaError& e) {
    op->fail(e.what());
    return op->future();
  }
  op->add(true);  // held while the parts are set up, so none completes the transfer early
  // A local copy is done before this returns; everything else waits on another process.
  op->arm_timeout();
  switch (backend) {
    case RdmaBackend::automatic:
    case RdmaBackend::local: {
      ++settings().local;
      try {
        Registry::get().use(d.id, offset, size, [&](const Region& r) {
          const bool device = r.device || local_device;
          if (reading) {
            copy_any(dst, r.data + offset, size, device);
          } else {
            copy_any(r.data + offset, src, size, device);
          }
        });
        op->done(true);
      } catch (const std::exception& e) {
        op->done(true, e.what());
      }
      break;
    }
    case RdmaBackend::gpu_ipc: {
      ++settings().gpu_ipc;
      // The check comes first: the copy must not touch memory its owner has dropped (R-4).
      check_then(op, b, offset, size, [op, d, dst, src, size, offset, reading] {
        if (!op->start_unguarded()) return;
        try {
          std::byte* remote = IpcCache::get().open(d) + offset;
          if (reading) {
            gpu::api().copy(dst, remote, size);
          } else {
            gpu::api().copy(remote, src, size);
          }
          op->done(false);
        } catch (const std::exception& e) {
          op->done(false, e.what());
        }
      });
      op->done(true);
      break;
    }
    case RdmaBackend::ucx: {
      ++settings().ucx;
      // The check comes first, as for gpu_ipc (R-4).
      check_then(op, b, offset, size, [op, b, d, dst, src, size, offset, reading] {
        auto* u = rdma_detail::Ucx::get();
        if (!u->mapped(d.ucx_worker, d.rkey, d.address + offset)) {
          // The owner's worker must serve this one: in chunks through staging memory, so that
          // an owner that stops answering ends the transfer at its timeout (R-2, R-3).
          watch_owner(op, b);
          auto pump = make_pump(op, b, dst, src, size, offset);
          pump->ucx = !StalledOwners::get().contains(d.ucx_worker);
          pump->start();
          return;
        }
        // A copy this process makes alone, straight between the two memories.
        if (!op->start_unguarded()) return;
        auto finished = [op, b](const std::string& error) { part_done(op, b, false, error); };
        try {
          if (reading) {
            u->get(d.ucx_worker, d.rkey, d.address + offset, dst, size, finished);
          } else {
            u->put(d.ucx_worker, d.rkey, d.address + offset, src, size, finished);
          }
        } catch (const std::exception& e) {
          finished(e.what());
        }
      });
      op->done(true);
      break;
    }
    case RdmaBackend::messages: {
      ++settings().messages;
      auto pump = make_pump(op, b, dst, src, size, offset);
      pump->device = local_device;
      pump->start();
      op->done(true);
      break;
    }
  }
  return op->future();
}

/// Registers `r` under `d`'s id and fills in what the descriptor says of it.
std::shared_ptr<const RdmaBuffer::Descriptor> publish(std::shared_ptr<RdmaBuffer::Descriptor> d,
                                                      RegionPtr r) {
  r->id = d->id;
  r->size = d->size;
  d->device = r->device;
  d->address = reinterpret_cast<std::uint64_t>(r->data);
  if (r->ucx.memh != nullptr) {
    d->ucx_worker = rdma_detail::Ucx::get()->address();
    d->rkey = r->ucx.rkey;
  }
  Registry::get().add(std::move(r));
  return d;
}

RdmaBuffer::Descriptor base_descriptor(std::size_t size) {
  RdmaBuffer::Descriptor d;
  d.id = Registry::get().next_id();
  d.size = size;
  d.host = host_identity();
  d.pid = ::getpid();
  return d;
}

}  // namespace

RdmaBuffer RdmaBuffer::register_memory(void* data, std::size_t size) {
  if (data == nullptr && size > 0) throw RdmaError("register_memory: null memory");
  auto d = std::make_shared<Descriptor>(base_descriptor(size));
  auto r = std::make_shared<Region>();
  r->data = static_cast<std::byte*>(data);
  r->device = on_device(data);
  if (r->device) {
    d->ipc = gpu::api().export_handle(data);
  } else if (auto* u = rdma_detail::Ucx::get(); u != nullptr && size > 0) {
    r->ucx = u->map(data, size);
  }
  RdmaBuffer b;
  b.owner_ = agent();
  b.desc_ = publish(std::move(d), std::move(r));
  return b;
}

RdmaBuffer RdmaBuffer::allocate(std::size_t size) {
  if (size == 0) throw RdmaError("allocate: a buffer needs at least one byte");
  auto d = std::make_shared<Descriptor>(base_descriptor(size));
  auto r = std::make_shared<Region>();
  if (auto* u = rdma_detail::Ucx::get()) {
    r->ucx = u->map(nullptr, size);
    r->data = static_cast<std::byte*>(r->ucx.address);
  } else {
    constexpr std::size_t kPage = 4096;
    r->data =
        static_cast<std::byte*>(std::aligned_alloc(kPage, (size + kPage - 1) / kPage * kPage));
    if (r->data == nullptr) throw RdmaError("allocate: out of memory for " + std::to_string(size));
    r->owned = true;
  }
  RdmaBuffer b;
  b.owner_ = agent();
  b.desc_ = publish(std::move(d), std::move(r));
  return b;
}

const RdmaBuffer::Descriptor& RdmaBuffer::descriptor() const {
  if (desc_ == nullptr) throw UsageError("use of an empty RdmaBuffer");
  return *desc_;
}
std::size_t RdmaBuffer::size() const {
  return descriptor().size;
}
bool RdmaBuffer::device() const {
  return descriptor().device;
}

void* RdmaBuffer::data() const {
  const auto& d = descriptor();
  if (d.pid != ::getpid() || d.host != host_identity()) return nullptr;
  RegionPtr r = Registry::get().find(d.id);
  return r != nullptr ? r->data : nullptr;
}

Future<void> RdmaBuffer::read_into(void* dst, std::size_t size, std::size_t offset) const {
  if (dst == nullptr && size > 0) throw UsageError("read_into: null destination");
  return transfer(*this, dst, nullptr, size, offset);
}

Future<void> RdmaBuffer::write_from(const void* src, std::size_t size, std::size_t offset) const {
  if (src == nullptr && size > 0) throw UsageError("write_from: null source");
  return transfer(*this, nullptr, src, size, offset);
}

Future<void> RdmaBuffer::drop() const {
  const auto& d = descriptor();
  auto op = std::make_shared<Transfer>("drop of RdmaBuffer #" + std::to_string(d.id));
  op->add(true);
  if (d.pid == ::getpid() && d.host == host_identity()) {
    // The owner's own process: at once, also while its proc stops and its rdma actor is gone.
    const bool was = Registry::get().remove(d.id);
    op->done(true,
             was ? std::string() : "RdmaBuffer #" + std::to_string(d.id) + " was already dropped");
    return op->future();
  }
  when_done(owner_.call(&RdmaAgent::drop, d.id), *this, [op, d](const std::string& error) {
    forget_cached(d);
    op->done(true, error);
  });
  return op->future();
}

RdmaBackend rdma_backend(const RdmaBuffer& buffer, const void* local) {
  bool local_device = false;
  return choose(buffer, local, &local_device);
}

void set_rdma_backend(RdmaBackend backend) {
  settings().backend = backend;
}

void set_rdma_timeout(std::chrono::milliseconds timeout) {
  settings().timeout_ms = timeout.count();
}

RdmaStats rdma_stats() {
  auto& s = settings();
  return {s.local.load(), s.gpu_ipc.load(), s.ucx.load(), s.messages.load(), s.chunks.load()};
}

RdmaBatch& RdmaBatch::read(const RdmaBuffer& buffer, void* dst, std::size_t size,
                           std::size_t offset) {
  ops_.push_back({buffer, dst, nullptr, size, offset});
  return *this;
}

RdmaBatch& RdmaBatch::write(const RdmaBuffer& buffer, const void* src, std::size_t size,
                            std::size_t offset) {
  ops_.push_back({buffer, nullptr, src, size, offset});
  return *this;
}

Future<void> RdmaBatch::submit() {
  auto all = std::make_shared<Transfer>("a batch of " + std::to_string(ops_.size()) + " transfers");
  all->add(true);
  for (const Op& o : ops_) {
    Future<void> f = o.dst != nullptr ? o.buffer.read_into(o.dst, o.size, o.offset)
                                      : o.buffer.write_from(o.src, o.size, o.offset);
    all->add(false);  // each transfer writes on its own until its future completes
    const auto& state = f.state();
    state->on_ready([all, state] {
      std::string error;
      try {
        state->value();
      } catch (const std::exception& e) {
        error = e.what();
      }
      all->done(false, error);
    });
  }
  ops_.clear();
  all->done(true);
  return all->future();
}

}  // namespace baton
