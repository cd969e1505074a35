#include "rdma/ucx.hpp"

#include <poll.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#if defined(BATON_NO_UCX)

// A build without UCX (ThreadSanitizer builds: UCX is not instrumented, and merely loading it
// breaks TSan's start-up). Host memory then moves through messages.
namespace baton::rdma_detail {

struct Ucx::Impl {};

std::shared_ptr<Ucx> Ucx::start(std::string* why) {
  if (why != nullptr) *why = "this build has no UCX (ThreadSanitizer builds leave it out)";
  return nullptr;
}
Ucx::Ucx() = default;
Ucx::~Ucx() = default;
const std::string& Ucx::address() const {
  throw std::logic_error("no UCX in this build");
}
UcxRegion Ucx::map(void* /*address*/, std::size_t /*size*/) {
  throw std::logic_error("no UCX in this build");
}
void Ucx::unmap(UcxRegion& /*region*/) {}
void Ucx::get(const std::string& /*worker*/, const std::string& /*rkey*/, std::uint64_t /*remote*/,
              void* /*local*/, std::size_t /*size*/, Done /*done*/) {
  throw std::logic_error("no UCX in this build");
}
bool Ucx::mapped(const std::string& /*worker*/, const std::string& /*rkey*/,
                 std::uint64_t /*remote*/) {
  throw std::logic_error("no UCX in this build");
}
void Ucx::put(const std::string& /*worker*/, const std::string& /*rkey*/, std::uint64_t /*remote*/,
              const void* /*local*/, std::size_t /*size*/, Done /*done*/) {
  throw std::logic_error("no UCX in this build");
}
void Ucx::forget(const std::string& /*worker*/, const std::string& /*rkey*/) {}

}  // namespace baton::rdma_detail

#else

#include <ucp/api/ucp.h>

namespace baton::rdma_detail {

namespace {

std::string ucs_error(const char* what, ucs_status_t s) {
  return std::string(what) + ": " + ucs_status_string(s);
}

/// An unpacked remote key; destroyed when forgotten and no operation uses it any more.
struct Key {
  ucp_rkey_h h = nullptr;
  Key() = default;
  Key(const Key&) = delete;
  Key& operator=(const Key&) = delete;
  ~Key() {
    if (h != nullptr) ucp_rkey_destroy(h);
  }
};

struct Pending;

/// Operations handed to UCX and not finished: one to a peer that died never finishes, and is
/// freed at teardown.
struct Outstanding {
  std::mutex mu;
  std::unordered_set<Pending*> live;
  std::atomic<int> count{0};
  std::atomic<std::chrono::steady_clock::rep> changed{0};  // when one last started or ended

  void touch() {
    changed.store(std::chrono::steady_clock::now().time_since_epoch().count(),
                  std::memory_order_relaxed);
  }
  std::chrono::steady_clock::time_point last_change() const {
    return std::chrono::steady_clock::time_point(
        std::chrono::steady_clock::duration(changed.load(std::memory_order_relaxed)));
  }
};

/// Operations that moved nothing for this long no longer keep the progress thread spinning.
constexpr std::chrono::seconds kStale{1};

/// One operation's completion, handed to UCX as user data.
struct Pending {
  Ucx::Done done;
  Outstanding* outstanding = nullptr;
  std::shared_ptr<Key> key;  // held while the operation runs
};

void finish(Pending* p, ucs_status_t status) {
  {
    std::lock_guard lock(p->outstanding->mu);
    p->outstanding->live.erase(p);
  }
  p->outstanding->count.fetch_sub(1);
  p->outstanding->touch();
  Ucx::Done done = std::move(p->done);
  delete p;  // NOLINT: owned by UCX's callback until here
  done(status == UCS_OK ? std::string() : ucs_error("UCX transfer failed", status));
}

void on_request_done(void* request, ucs_status_t status, void* user) {
  finish(static_cast<Pending*>(user), status);
  ucp_request_free(request);
}

/// The result of a *_nbx call: done now, failed now, or later through on_request_done.
void settle(ucs_status_ptr_t sp, Pending* p) {
  if (sp == nullptr) {
    finish(p, UCS_OK);
  } else if (UCS_PTR_IS_ERR(sp)) {
    finish(p, UCS_PTR_STATUS(sp));
  }
}

}  // namespace

struct Ucx::Impl {
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  std::string address;
  int efd = -1;
  std::atomic<bool> stop{false};
  std::atomic<bool> detached{false};  // the last user went on the progress thread
  Outstanding outstanding;            // operations this process started that have not finished
  std::thread progress;

  std::mutex mu;
  struct Peer {
    ucp_ep_h ep = nullptr;
    std::map<std::string, std::shared_ptr<Key> > rkeys;
  };
  std::map<std::string, std::shared_ptr<Peer> > peers;  // by worker address

  void start() {
    ucp_config_t* config = nullptr;
    ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
    if (s != UCS_OK) throw std::runtime_error(ucs_error("ucp_config_read", s));
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
    params.features = UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
    params.mt_workers_shared = 1;
    s = ucp_init(&params, config, &context);
    ucp_config_release(config);
    if (s != UCS_OK) throw std::runtime_error(ucs_error("ucp_init", s));
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_MULTI;
    s = ucp_worker_create(context, &wp, &worker);
    if (s != UCS_OK) throw std::runtime_error(ucs_error("ucp_worker_create", s));
    ucp_address_t* a = nullptr;
    std::size_t len = 0;
    s = ucp_worker_get_address(worker, &a, &len);
    if (s != UCS_OK) throw std::runtime_error(ucs_error("ucp_worker_get_address", s));
    address.assign(reinterpret_cast<const char*>(a), len);  // NOLINT: an opaque blob
    ucp_worker_release_address(worker, a);
    if (ucp_worker_get_efd(worker, &efd) != UCS_OK) efd = -1;
  }

  /// Frees what UCX holds, once the progress thread is done.
  void teardown() {
    // Keys go before the worker and its endpoints (ucp_worker_destroy closes those), except the
    // keys of operations that never finished (their peer died): UCX frees those with the worker.
    for (Pending* p : outstanding.live) {
      if (p->key != nullptr) p->key->h = nullptr;
    }
    peers.clear();
    if (worker != nullptr) ucp_worker_destroy(worker);
    worker = nullptr;
    for (Pending* p : outstanding.live) delete p;  // NOLINT: never finished (peer died)
    outstanding.live.clear();
    if (context != nullptr) ucp_cleanup(context);
    context = nullptr;
  }

  void run() {
    using Clock = std::chrono::steady_clock;
    auto busy_until = Clock::now();
    while (!stop.load(std::memory_order_relaxed)) {
      if (ucp_worker_progress(worker) != 0) {
        busy_until = Clock::now() + std::chrono::milliseconds(2);
        continue;
      }
      // Spin while our own operations run and a little after any activity (a transfer comes in
      // many pieces); but not for operations that have not moved for a second: one whose peer
      // died waits for ever, and must not cost a core. Then sleep until the worker's event fd
      // wakes us, for 1 ms at most while operations wait (some of what they wait for, such as
      // room in a peer's queue, signals nothing).
      const auto now = Clock::now();
      const bool waiting = outstanding.count.load(std::memory_order_relaxed) > 0;
      if (now < busy_until || (waiting && now - outstanding.last_change() < kStale)) continue;
      if (efd < 0) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        continue;
      }
      if (ucp_worker_arm(worker) == UCS_ERR_BUSY) continue;
      // So also for a second after activity: this worker may be serving a peer, and a reply
      // waiting for room in the peer's queue is not signalled either.
      const bool recent = now - busy_until < kStale;
      pollfd p{efd, POLLIN, 0};
      ::poll(&p, 1, waiting || recent ? 1 : 100);
    }
  }

  /// The endpoint to `worker` and the unpacked `rkey` on it, made on first use.
  std::pair<ucp_ep_h, std::shared_ptr<Key> > reach(const std::string& peer,
                                                   const std::string& rkey) {
    std::lock_guard lock(mu);
    auto& slot = peers[peer];
    if (!slot) {
      auto fresh = std::make_shared<Peer>();
      ucp_ep_params_t ep{};
      ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
      ep.address = reinterpret_cast<const ucp_address_t*>(peer.data());  // NOLINT
      // Without peer-failure handling: with it UCX 1.13 leaves shared memory and CMA out and
      // emulates RMA over TCP (0.7 GB/s where shared memory gives 7 to 11). A peer that dies
      // mid-transfer is noticed by the rdma layer instead, which watches the owner.
      ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
      ucs_status_t s = ucp_ep_create(worker, &ep, &fresh->ep);
      if (s != UCS_OK) {
        peers.erase(peer);
        throw std::runtime_error(ucs_error("ucp_ep_create", s));
      }
      slot = std::move(fresh);
    }
    auto& key = slot->rkeys[rkey];
    if (key == nullptr) {
      auto fresh = std::make_shared<Key>();
      ucs_status_t s = ucp_ep_rkey_unpack(slot->ep, rkey.data(), &fresh->h);
      if (s != UCS_OK) {
        slot->rkeys.erase(rkey);
        throw std::runtime_error(ucs_error("ucp_ep_rkey_unpack", s));
      }
      key = std::move(fresh);
    }
    return {slot->ep, key};
  }

  ucp_request_param_t params(Pending* p) const {
    ucp_request_param_t r{};
    r.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    r.cb.send = &on_request_done;
    r.user_data = p;
    return r;
  }

  Pending* pending(Done done, std::shared_ptr<Key> key) {
    auto* p = new Pending{std::move(done), &outstanding, std::move(key)};  // NOLINT: see finish()
    outstanding.count.fetch_add(1);
    outstanding.touch();
    std::lock_guard lock(outstanding.mu);
    outstanding.live.insert(p);
    return p;
  }

  void kick() const { ucp_worker_signal(worker); }
};

std::shared_ptr<Ucx> Ucx::start(std::string* why) {
  try {
    return std::shared_ptr<Ucx>(new Ucx());  // NOLINT: private constructor
  } catch (const std::exception& e) {
    if (why != nullptr) *why = e.what();
    return nullptr;
  }
}

Ucx::Ucx() : impl_(std::make_shared<Impl>()) {
  impl_->start();
  // The thread holds the worker too: a completion that lets go of the last user of this Ucx
  // leaves the teardown to the thread, once it is back in its loop.
  impl_->progress = std::thread([impl = impl_] {
    impl->run();
    if (impl->detached.load()) impl->teardown();
  });
}

Ucx::~Ucx() {
  impl_->stop = true;
  if (impl_->worker != nullptr) impl_->kick();
  if (impl_->progress.get_id() == std::this_thread::get_id()) {
    impl_->detached = true;
    impl_->progress.detach();
    return;
  }
  if (impl_->progress.joinable()) impl_->progress.join();
  impl_->teardown();
}

const std::string& Ucx::address() const {
  return impl_->address;
}

UcxRegion Ucx::map(void* address, std::size_t size) {
  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                  UCP_MEM_MAP_PARAM_FIELD_FLAGS;
  mp.address = address;
  mp.length = size;
  mp.flags = address == nullptr ? UCP_MEM_MAP_ALLOCATE : 0;
  ucp_mem_h memh = nullptr;
  ucs_status_t s = ucp_mem_map(impl_->context, &mp, &memh);
  if (s != UCS_OK) throw std::runtime_error(ucs_error("ucp_mem_map", s));
  UcxRegion r;
  r.memh = memh;
  r.size = size;
  ucp_mem_attr_t attr{};
  attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS;
  s = ucp_mem_query(memh, &attr);
  r.address = s == UCS_OK ? attr.address : address;
  void* packed = nullptr;
  std::size_t len = 0;
  s = ucp_rkey_pack(impl_->context, memh, &packed, &len);
  if (s != UCS_OK) {
    ucp_mem_unmap(impl_->context, memh);
    throw std::runtime_error(ucs_error("ucp_rkey_pack", s));
  }
  r.rkey.assign(static_cast<const char*>(packed), len);
  ucp_rkey_buffer_release(packed);
  return r;
}

void Ucx::unmap(UcxRegion& region) {
  if (region.memh == nullptr) return;
  ucp_mem_unmap(impl_->context, static_cast<ucp_mem_h>(region.memh));
  region.memh = nullptr;
}

bool Ucx::mapped(const std::string& worker, const std::string& rkey, std::uint64_t remote) {
  auto [ep, key] = impl_->reach(worker, rkey);
  void* here = nullptr;
  return ucp_rkey_ptr(key->h, remote, &here) == UCS_OK;
}

void Ucx::get(const std::string& worker, const std::string& rkey, std::uint64_t remote, void* local,
              std::size_t size, Done done) {
  auto [ep, key] = impl_->reach(worker, rkey);
  ucp_rkey_h h = key->h;
  Pending* p = impl_->pending(std::move(done), std::move(key));
  ucp_request_param_t r = impl_->params(p);
  settle(ucp_get_nbx(ep, local, size, remote, h, &r), p);
  impl_->kick();
}

void Ucx::put(const std::string& worker, const std::string& rkey, std::uint64_t remote,
              const void* local, std::size_t size, Done done) {
  auto [ep, key] = impl_->reach(worker, rkey);
  // The put's own completion only frees `local`; the flush after it completes once the data is
  // in the peer's memory, and carries the first error of either.
  auto first_error = std::make_shared<std::string>();
  ucp_rkey_h h = key->h;
  Pending* put_done = impl_->pending(
      [first_error](const std::string& e) {
        if (!e.empty() && first_error->empty()) *first_error = e;
      },
      key);
  ucp_request_param_t r = impl_->params(put_done);
  settle(ucp_put_nbx(ep, local, size, remote, h, &r), put_done);
  Pending* flushed =
      impl_->pending([first_error, done = std::move(done)](
                         const std::string& e) { done(!first_error->empty() ? *first_error : e); },
                     std::move(key));
  ucp_request_param_t f = impl_->params(flushed);
  settle(ucp_ep_flush_nbx(ep, &f), flushed);
  impl_->kick();
}

void Ucx::forget(const std::string& worker, const std::string& rkey) {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->peers.find(worker);
  if (it != impl_->peers.end()) it->second->rkeys.erase(rkey);  // freed once unused
}

}  // namespace baton::rdma_detail

#if defined(__SANITIZE_ADDRESS__)
// UCX keeps allocations of its own (an operation to a peer that died, caches) past teardown.
extern "C" const char* __lsan_default_suppressions() {  // NOLINT: named by the sanitizer
  return "leak:libucs.so\nleak:libuct.so\nleak:libucp.so\n";
}
#endif

#endif  // BATON_NO_UCX
