// The owner's side of RdmaBuffer: settings, registration, and what a handle says of its memory.

#include <unistd.h>

#include <array>
#include <cstring>
#include <fstream>
#include <mutex>

#include "actor/directory.hpp"
#include "actor/metrics.hpp"
#include "actor/node.hpp"
#include "baton/actor/errors.hpp"
#include "rdma/registry.hpp"
#include "rdma/transfer.hpp"

namespace baton::rdma_detail {
RdmaBackend backend_from_env() {
  const char* v = std::getenv("BATON_RDMA_BACKEND");
  if (v == nullptr || *v == 0 || std::string_view(v) == "auto") return RdmaBackend::automatic;
  for (RdmaBackend b :
       {RdmaBackend::gpu_ipc, RdmaBackend::cma, RdmaBackend::ucx, RdmaBackend::messages}) {
    if (to_string(b) == v) return b;
  }
  throw RdmaError(std::string("BATON_RDMA_BACKEND='") + v +
                  "' is not one of auto, cma, ucx, gpu_ipc, messages");
}

std::chrono::milliseconds timeout_from_env() {
  constexpr std::int64_t kDefaultMs = 30000;
  const char* v = std::getenv("BATON_RDMA_TIMEOUT_MS");
  if (v == nullptr || *v == '\0') return std::chrono::milliseconds(kDefaultMs);
  char* end = nullptr;
  const long long ms = std::strtoll(v, &end, 10);
  if (end == v || *end != '\0' || ms < 1) {
    throw RdmaError(std::string("BATON_RDMA_TIMEOUT_MS='") + v +
                    "' is not a number of milliseconds of 1 or more; unset it for the default (" +
                    std::to_string(kDefaultMs) + ")");
  }
  return std::chrono::milliseconds(ms);
}

namespace {

RdmaBuffer::Descriptor base_descriptor(std::size_t size) {
  RdmaBuffer::Descriptor d;
  d.id = Registry::get().next_id();
  d.size = size;
  d.host = host_identity();
  d.pid = ::getpid();
  return d;
}

/// Registers `r` under `d`'s id and fills in what the descriptor says of it.
std::shared_ptr<const RdmaBuffer::Descriptor> publish(std::shared_ptr<RdmaBuffer::Descriptor> d,
                                                      RegionPtr r) {
  r->id = d->id;
  r->size = d->size;
  d->device = r->device;
  d->address = reinterpret_cast<std::uint64_t>(r->data);
  if (r->ucx.memh != nullptr) {
    d->ucx_worker = r->ucx_worker->address();
    d->rkey = r->ucx.rkey;
  }
  Registry::get().add(std::move(r));
  return d;
}

}  // namespace

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

/// Copies between any two memories of this process.
void copy_any(void* dst, const void* src, std::size_t n, bool device) {
  if (device) {
    gpu::api().copy(dst, src, n);
  } else {
    std::memcpy(dst, src, n);
  }
}

namespace {
std::shared_ptr<detail::Node> node_or_throw() {
  auto node = detail::node_here();
  if (!node) {
    throw UsageError("RdmaBuffer needs a runtime: create `baton::Runtime rt(argc, argv);` first");
  }
  return node;
}

// The node's: this process's rdma actor, spawned on first use.
struct AgentSlot {
  std::mutex mu;
  ActorRef<RdmaAgent> ref;
};
}  // namespace

/// RdmaBuffer's metrics, in every proc's of this process (detail::proc_metrics).
void rdma_metrics(Proc& /*proc*/, detail::ProcMetrics& m) {
  std::shared_ptr<RdmaState> state;
  try {
    state = rdma_state();
  } catch (const std::exception&) {
    return;  // no runtime here now
  }
  constexpr RdmaBackend kBackends[] = {RdmaBackend::local, RdmaBackend::gpu_ipc, RdmaBackend::ucx,
                                       RdmaBackend::messages, RdmaBackend::cma};
  m.family("baton_rdma_bytes_total", "counter",
           "Bytes of the RdmaBuffer transfers this process started, by backend and direction.");
  for (const RdmaBackend b : kBackends) {
    const auto i = static_cast<std::size_t>(b);
    const std::string backend = detail::label("backend", to_string(b));
    m.sample("baton_rdma_bytes_total", backend + ",direction=\"read\"",
             static_cast<double>(state->settings.bytes_read[i].load()));
    m.sample("baton_rdma_bytes_total", backend + ",direction=\"write\"",
             static_cast<double>(state->settings.bytes_written[i].load()));
  }
}

std::shared_ptr<RdmaState> rdma_state() {
  static std::once_flag metrics;  // one source for the process, whichever runtime asks
  std::call_once(metrics, [] { detail::add_metrics_source(&rdma_metrics); });
  return node_or_throw()->extension<RdmaState>();
}

Registry& Registry::get() {
  return *node_or_throw()->extension<Registry>();
}

IpcCache& IpcCache::get() {
  return *node_or_throw()->extension<IpcCache>();
}

ActorRef<RdmaAgent> agent() {
  auto slot = node_or_throw()->extension<AgentSlot>();
  std::lock_guard lock(slot->mu);
  if (slot->ref.id().proc.name.empty()) {
    Proc& proc = detail::serving_proc("RdmaBuffer");
    // The agent's ref holds its proc, which holds the node that holds this slot: let go of it
    // when the proc stops, or the node would never go.
    detail::add_stop_hook(proc, [weak = std::weak_ptr<AgentSlot>(slot)] {
      Registry::get().close();
      if (auto s = weak.lock()) {
        std::lock_guard l(s->mu);
        s->ref = {};
      }
    });
    slot->ref = proc.spawn<RdmaAgent>("rdma");
  }
  return slot->ref;
}

}  // namespace baton::rdma_detail

namespace baton {

using rdma_detail::agent;
using rdma_detail::base_descriptor;
using rdma_detail::forget_cached;
using rdma_detail::host_identity;
using rdma_detail::publish;
using rdma_detail::RdmaAgent;
using rdma_detail::Region;
using rdma_detail::RegionPtr;
using rdma_detail::Registry;
using rdma_detail::Transfer;
using rdma_detail::when_done;

RdmaBuffer RdmaBuffer::register_memory(void* data, std::size_t size) {
  if (data == nullptr && size > 0) throw RdmaError("register_memory: null memory");
  auto d = std::make_shared<Descriptor>(base_descriptor(size));
  auto r = std::make_shared<Region>();
  r->data = static_cast<std::byte*>(data);
  r->device = gpu::api().is_device(data);
  if (r->device) {
    d->ipc = gpu::api().export_handle(data);
  } else if (auto u = rdma_detail::rdma_state()->ucx_shared(); u != nullptr && size > 0) {
    r->ucx = u->map(data, size);
    r->ucx_worker = std::move(u);
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
  if (auto u = rdma_detail::rdma_state()->ucx_shared()) {
    r->ucx = u->map(nullptr, size);
    r->ucx_worker = std::move(u);
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
    forget_cached(op->state(), d);
    op->done(true, error);
  });
  return op->future();
}

}  // namespace baton
