// Collectives on CPU through Gloo, and small ones through baton's messages (exchange.hpp). A
// group's rendezvous is an actor in the controller (Store): each rank's Gloo store calls it with
// baton's messages. Each rank runs its collectives in order on a thread of its own; a failed one
// breaks the group, which then asks every other rank's Peer actor whether it is alive, to name the
// ranks that are gone.

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <pthread.h>
#include <signal.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <type_traits>
#include <utility>

#include "actor/directory.hpp"
#include "actor/proc_state.hpp"
#include "actor/wait_all.hpp"
#include "baton/collective/collective.hpp"
#include "baton/gpu/gpu.hpp"
#include "baton/mesh/mesh.hpp"
#include "collective/exchange.hpp"
#include "collective/nccl.hpp"
#include "collective/reduce.hpp"
#include "host/hosts.hpp"
#include "mesh/stall.hpp"
#include "net/work_queue.hpp"

namespace baton::collective {
namespace {

/// The rendezvous of one group, in the controller: what each rank's Gloo store sets, and the
/// ranks waiting for a key.
class Store : public Actor {
 public:
  void set(const std::string& key, const std::string& value) {
    values_[key] = value;
    auto waiting = waiting_.extract(key);
    if (!waiting.empty()) {
      for (auto& port : waiting.mapped()) port.send(value);
    }
  }
  void wait(const std::string& key, const OncePort<std::string>& reply) {
    if (auto it = values_.find(key); it != values_.end()) return reply.send(it->second);
    waiting_[key].push_back(reply);
  }
  static constexpr auto endpoints = baton::endpoints<&Store::set, &Store::wait>();

 private:
  std::map<std::string, std::string> values_;
  std::map<std::string, std::vector<OncePort<std::string>>> waiting_;
};

/// A rank's witness that it is alive, asked by the others when a collective fails.
/// How many collectives each rank of this proc has entered, by its Peer's name.
struct Progress {
  std::mutex mu;
  std::map<std::string, std::weak_ptr<std::atomic<std::uint64_t>>> by_peer;  // of live ranks
};

class Peer : public Actor {
 public:
  int ping() { return 1; }
  /// How many collectives this rank has entered (-1: unknown).
  std::int64_t entered() {
    const auto p = detail::state_of(proc()).extension<Progress>();
    std::lock_guard lock(p->mu);
    const auto it = p->by_peer.find(id().name);
    const auto n = it == p->by_peer.end() ? nullptr : it->second.lock();
    return n ? static_cast<std::int64_t>(n->load()) : -1;
  }
  static constexpr auto endpoints = baton::endpoints<&Peer::ping, &Peer::entered>();
};

/// The collectives' times of `proc`'s, in its metrics from the first group joined on.
struct CollectiveTimes {
  std::shared_ptr<detail::CallTimes> times = std::make_shared<detail::CallTimes>();
};

void collective_metrics(Proc& proc, detail::ProcMetrics& m) {
  detail::add_histograms(m, "baton_collective_duration_seconds",
                         "How long this proc's collectives took on each rank, by operation.", "op",
                         *detail::state_of(proc).extension<CollectiveTimes>()->times);
}

std::shared_ptr<detail::CallTimes> collective_times(Proc& proc) {
  static std::once_flag registered;  // one source for the process
  std::call_once(registered, [] { detail::add_metrics_source(&collective_metrics); });
  return detail::state_of(proc).extension<CollectiveTimes>()->times;
}

std::string peer_name(std::uint64_t key, std::size_t rank) {
  return "collective-" + std::to_string(key) + "-" + std::to_string(rank);
}

/// Gloo's view of the group's Store actor: calls from the rank's own thread, never an actor's.
class GlooStore : public gloo::rendezvous::Store {
 public:
  GlooStore(Proc& proc, ActorId store, std::chrono::milliseconds timeout)
      : proc_(proc), store_(std::move(store)), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    ActorRef<collective::Store>(store_).send(&collective::Store::set, key,
                                             std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    auto [port, value] = proc_.open_once_port<std::string>();
    ActorRef<collective::Store>(store_).send(&collective::Store::wait, key, port);
    const std::string v = value.get(timeout_);
    return {v.begin(), v.end()};
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) override {
    for (const auto& k : keys) (void)get(k);
  }

 private:
  Proc& proc_;
  ActorId store_;
  std::chrono::milliseconds timeout_;
};

/// Thrown where the ranks that are gone are already named.
struct RanksGone : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The device whose memory `p` is, or -1 for host memory (or no GPU).
int device_of(const void* p) {
  auto& gpu = gpu::api();
  if (!gpu.available()) return -1;
  const gpu::PointerInfo info = gpu.pointer_info(p);
  return info.device ? info.device_index : -1;
}

/// The device both buffers of one collective are on (-1: host); they must agree.
int device_of(const void* in, const void* out, const char* what) {
  const int a = device_of(in);
  const int b = device_of(out);
  if (a != b) {
    throw UsageError(std::string(what) +
                     ": the input and output are in different memories (one on a device, one "
                     "not, or on two devices): put both in the same");
  }
  return a;
}

}  // namespace

struct Communicator::Impl {
  Group group;
  int rank = 0;
  Proc* proc = nullptr;
  std::shared_ptr<gloo::rendezvous::Context> context;
  std::unique_ptr<nccl::DeviceComm> device_comm;  // made by the first collective on a device
  std::unique_ptr<SmallExchange> small;           // host buffers up to its kMaxBytes
  std::uint32_t next_tag = 0;
  /// How long this proc's collectives took, by operation (baton_collective_duration_seconds).
  std::shared_ptr<detail::CallTimes> times;
  /// Collectives this rank has entered, as its Peer tells the others (Progress).
  std::shared_ptr<std::atomic<std::uint64_t>> entered =
      std::make_shared<std::atomic<std::uint64_t>>(0);

  std::string broken;                    // why the group can be used no more (the queue's thread's)
  std::atomic<bool> ready{false};        // joined: set on the queue's thread
  std::atomic<std::uint64_t> queued{0};  // ops posted to the queue and not yet done
  // This rank's operations, in order, on a thread of their own. The last member: it goes
  // first, running what is queued while the rest is still there.
  net::JobQueue queue;

  /// The queue's first job: Gloo writes to its peers' sockets from the queue's thread and from
  /// the device thread it starts there (which inherits this mask): a write to a rank that died
  /// must fail with EPIPE, not kill this process with SIGPIPE.
  static void block_sigpipe() {
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    ::pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
  }

  std::chrono::milliseconds timeout() const { return std::chrono::milliseconds(group.timeout_ms); }

  /// Runs `op` (named `what`) on this rank's thread, in order; a failure breaks the group. In a
  /// group of one, an op on host memory (`local`) with nothing queued before it runs here and
  /// now: there is no one to wait for, and the two wake-ups of a trip to the thread would be
  /// most of its time.
  Future<void> submit(const std::string& what, std::function<void()> op, bool local = false) {
    Promise<void> done;
    if (local && group.members.size() == 1 && ready.load(std::memory_order_acquire) &&
        queued.load(std::memory_order_acquire) == 0) {
      run(what, op, done);
      return done.get_future();
    }
    queued.fetch_add(1, std::memory_order_relaxed);
    queue.post([this, what, op = std::move(op), done]() mutable {
      run(what, op, done);
      queued.fetch_sub(1, std::memory_order_release);
    });
    return done.get_future();
  }

  /// Runs `op` (named `what`) and sets `done`; a failure breaks the group.
  void run(const std::string& what, const std::function<void()>& op, Promise<void>& done) {
    if (!broken.empty()) {
      done.set_exception(std::make_exception_ptr(std::runtime_error(broken)));
      return;
    }
    const std::uint64_t index = entered->fetch_add(1) + 1;
    const auto began = std::chrono::steady_clock::now();
    const auto waiting = detail::start_waiting(
        detail::state_of(*proc),
        [this, what, index](double waited_s) { return stall_report(what, index, waited_s); });
    try {
      op();
      if (waiting) waiting->done.store(true);
      times->of(what).observe(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  std::chrono::steady_clock::now() - began)
                                  .count());
      done.set_value();
    } catch (const RanksGone& e) {
      if (waiting) waiting->done.store(true);
      fail(what, e.what(), true);
      done.set_exception(std::make_exception_ptr(std::runtime_error(broken)));
    } catch (const std::exception& e) {
      if (waiting) waiting->done.store(true);
      fail(what, e.what());
      done.set_exception(std::make_exception_ptr(std::runtime_error(broken)));
    }
  }

  /// What the stall watch logs of this rank's collective number `index` (`what`), waiting for
  /// `waited_s`: the ranks that have not entered it yet (each rank's Peer asked).
  std::string stall_report(const std::string& what, std::uint64_t index, double waited_s) const {
    auto asked = ask_peers([](const ActorRef<Peer>& p) { return p.call(&Peer::entered); });
    std::string missing;
    auto name = [&](std::size_t r, const std::string& why) {
      missing += (missing.empty() ? "" : ", ") + std::string("rank ") + std::to_string(r) + " (" +
                 group.members[r].to_string() + ", " + why + ")";
    };
    detail::wait_all(
        asked, peer_wait(),
        [&](std::size_t r, std::int64_t n) {
          if (n < static_cast<std::int64_t>(index)) {  // not in this one yet
            name(r, "has entered " + std::to_string(n) + " collectives");
          }
        },
        [&](std::size_t r, const std::string& why) { name(r, "does not answer: " + why); });
    std::string text = "collective " + what + " number " + std::to_string(index) + " on rank " +
                       std::to_string(rank) + " of " + std::to_string(group.members.size()) +
                       " has waited " + std::to_string(static_cast<int>(waited_s)) + " s";
    if (missing.empty()) return text + ", though every rank has entered it (a slow transport?)";
    return text + " for the ranks that have not entered it: " + missing;
  }

  /// The ranks that do not answer a ping (all asked at once), named; empty when all answer.
  std::string gone() const {
    auto pings = ask_peers([](const ActorRef<Peer>& p) { return p.call(&Peer::ping); });
    std::string names;
    detail::wait_all(
        pings, peer_wait(), [](std::size_t, int) {},
        [&](std::size_t r, const std::string& why) {
          names += (names.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + " (" +
                   group.members[r].to_string() + ") is gone: " + why;
        });
    return names;
  }

  /// How long the other ranks' peers are given to answer: the group's timeout, 5 s at most.
  std::chrono::milliseconds peer_wait() const {
    return std::min<std::chrono::milliseconds>(timeout(), std::chrono::seconds(5));
  }

  /// `call` made to every other rank's Peer at once, each future beside its rank.
  template <class Call>
  std::vector<std::pair<std::size_t, std::invoke_result_t<Call, const ActorRef<Peer>&>>> ask_peers(
      Call call) const {
    std::vector<std::pair<std::size_t, std::invoke_result_t<Call, const ActorRef<Peer>&>>> asked;
    asked.reserve(group.members.size());
    for (std::size_t r = 0; r < group.members.size(); ++r) {
      if (static_cast<int>(r) == rank) continue;
      asked.emplace_back(
          r, call(ActorRef<Peer>(ActorId{group.members[r].proc, peer_name(group.key, r), 0})));
    }
    return asked;
  }

  /// This rank's communicator on `device`, made (with rank 0's id, sent through the group's
  /// store) by the first collective on device memory.
  nccl::DeviceComm& device(int index) {
    if (device_comm) return *device_comm;
    if (auto why = nccl::device_collectives_unavailable(); !why.empty()) {
      throw UsageError("collectives on device memory need NCCL or RCCL: " + why);
    }
    GlooStore store(*proc, group.store, timeout());
    const std::string key = std::to_string(group.key) + "/device-comm-id";
    nccl::DeviceCommId id{};
    if (rank == 0) {
      id = nccl::make_device_comm_id();
      store.set(key, std::vector<char>(id.begin(), id.end()));
    } else {
      const std::vector<char> got = store.get(key);
      if (got.size() != id.size()) throw std::runtime_error("a malformed NCCL id from rank 0");
      std::copy(got.begin(), got.end(), id.begin());
    }
    device_comm = std::make_unique<nccl::DeviceComm>(
        id, rank, static_cast<int>(group.members.size()), index, timeout(), [this] {
          if (auto names = gone(); !names.empty()) throw RanksGone(names);
        });
    return *device_comm;
  }

  /// Joins the ranks' small exchange: this rank's port out through the group's store, every
  /// rank's in.
  void join_small(GlooStore& store) {
    small = std::make_unique<SmallExchange>(*proc, rank, group.members.size());
    const std::string prefix = std::to_string(group.key) + "/small-port/";
    const std::string mine = small->port_text();
    store.set(prefix + std::to_string(rank), std::vector<char>(mine.begin(), mine.end()));
    std::vector<std::string> ports;
    for (std::size_t r = 0; r < group.members.size(); ++r) {
      const std::vector<char> got = store.get(prefix + std::to_string(r));
      ports.emplace_back(got.begin(), got.end());
    }
    small->connect(ports);
  }

  /// What a small collective's wait does when a missing rank's link closed.
  SmallExchange::CheckGone check_gone() const {
    return [this] {
      if (auto names = gone(); !names.empty()) throw RanksGone(names);
    };
  }

  /// Whether the host collective `shape` goes through the small exchange; if not, every rank
  /// has agreed on it there (the same collective, count, type and root) before Gloo's ring runs.
  bool small_or_agreed(const Shape& shape) {
    if (!small) return false;
    if (SmallExchange::small(shape.bytes)) return true;
    small->agree(shape, timeout(), check_gone());
    return false;
  }

  /// `count` elements at `data` reduced over the ranks in place (for avg, summed: the caller
  /// divides): a small buffer through the small exchange, a larger one through Gloo's ring.
  void allreduce_host(void* data, std::size_t count, DType type, ReduceOp op,
                      Shape::Op what = Shape::allreduce) {
    const Shape shape{what, static_cast<std::uint8_t>(type), static_cast<std::uint8_t>(op), -1,
                      count * size_of(type)};
    if (small_or_agreed(shape))
      return small->allreduce(shape, data, count, timeout(), check_gone());
    gloo::AllreduceOptions o(context);
    with_type(type, [&]<class T>() { o.setOutput(static_cast<T*>(data), count); });
    o.setReduceFunction(reduce_fn(type, op));
    o.setTag(next_tag++);
    o.setTimeout(timeout());
    gloo::allreduce(o);
  }

  /// The group is broken: its connections close at once (so the ranks waiting on this one fail
  /// too, not at their timeout), and the ranks that do not answer are named (unless `named`:
  /// `why` names them already).
  void fail(const std::string& what, const std::string& why, bool named = false) {
    context.reset();
    if (device_comm) device_comm->abort();
    const std::string names = named ? why : gone();
    broken = "collective " + what + " failed on rank " + std::to_string(rank) + " of " +
             std::to_string(group.members.size()) + ": " +
             (names.empty() || named ? why : names + " (" + why + ")") +
             "; the group is broken: make a new one of the live members (make_group)";
  }
};

Group make_group(const std::vector<ActorId>& members, const std::vector<std::string>& addresses,
                 GroupOptions options) {
  if (members.empty()) throw UsageError("make_group: no members");
  if (members.size() != addresses.size()) {
    throw UsageError("make_group: one address per member");
  }
  Group g;
  g.key = std::random_device{}() * 0x100000000ULL + std::random_device{}();
  g.members = members;
  g.addresses = addresses;
  g.timeout_ms = options.timeout.count();
  g.hosts = internal::reachable_hosts(addresses);  // where each rank's transport listens
  g.store = detail::serving_proc("make_group")
                .spawn<Store>("collective-store-" + std::to_string(g.key))
                .id();
  return g;
}

Group make_group(const ProcMesh& procs, GroupOptions options) {
  std::vector<ActorId> ids;
  std::vector<std::string> addresses;
  for (std::size_t r = 0; r < procs.size(); ++r) {
    ids.push_back(ActorId{procs.proc(r), kAnyActor, 0});
    addresses.push_back(detail::address_text(procs.proc(r)));
  }
  return make_group(ids, addresses, options);
}

Future<void> Communicator::join(const Group& group, Actor& self) {
  int rank = -1;
  for (std::size_t r = 0; r < group.members.size(); ++r) {
    const ActorId& m = group.members[r];
    if (m == self.id() || (m.name == kAnyActor && m.proc == self.id().proc)) {
      rank = static_cast<int>(r);
    }
  }
  if (rank < 0) {
    throw UsageError("collective::join: " + self.id().to_string() +
                     " is not a member of the group (make_group names its members)");
  }
  for (std::size_t r = 0; r < group.members.size(); ++r) {
    detail::remember_address(group.members[r].proc, group.addresses[r]);
  }
  auto impl = std::make_shared<Impl>();
  impl->group = group;
  impl->rank = rank;
  impl->proc = &self.proc();
  impl->times = collective_times(self.proc());
  const std::string peer = peer_name(group.key, static_cast<std::size_t>(rank));
  {
    const auto progress = detail::state_of(self.proc()).extension<Progress>();
    std::lock_guard lock(progress->mu);
    std::erase_if(progress->by_peer, [](const auto& kv) { return kv.second.expired(); });
    progress->by_peer[peer] = impl->entered;
  }
  (void)self.proc().spawn<Peer>(peer);
  impl->queue.post(&Impl::block_sigpipe);
  Promise<void> joined;
  {
    impl->queue.post([impl, joined] {
      try {
        gloo::transport::tcp::attr attr;
        attr.hostname = impl->group.hosts[static_cast<std::size_t>(impl->rank)];
        auto device = gloo::transport::tcp::CreateDevice(attr);
        auto context = std::make_shared<gloo::rendezvous::Context>(
            impl->rank, static_cast<int>(impl->group.members.size()));
        context->setTimeout(impl->timeout());
        GlooStore store(*impl->proc, impl->group.store, impl->timeout());
        gloo::rendezvous::PrefixStore prefixed(std::to_string(impl->group.key), store);
        context->connectFullMesh(prefixed, device);
        impl->context = std::move(context);
        impl->join_small(store);
        impl->ready.store(true, std::memory_order_release);
        joined.set_value();
      } catch (const std::exception& e) {
        joined.set_exception(std::make_exception_ptr(
            std::runtime_error("collective::join: rank " + std::to_string(impl->rank) +
                               " could not connect to the group: " + e.what())));
      }
    });
  }
  impl_ = std::move(impl);
  return joined.get_future();
}

int Communicator::rank() const {
  return impl_ ? impl_->rank : -1;
}
int Communicator::size() const {
  return impl_ ? static_cast<int>(impl_->group.members.size()) : 0;
}

Future<void> Communicator::allreduce_bytes(void* data, std::size_t count, DType type, ReduceOp op,
                                           Keep keep) {
  if (!impl_) throw UsageError("allreduce on a Communicator that joined no group");
  Impl* c = impl_.get();
  if (const int dev = device_of(data); dev >= 0) {
    return c->submit("allreduce", [c, dev, data, count, type, op, keep = std::move(keep)] {
      c->device(dev).allreduce(data, count, type, op);
    });
  }
  return c->submit(
      "allreduce",
      [c, data, count, type, op, keep = std::move(keep)] {
        c->allreduce_host(data, count, type, op);
        if (op == ReduceOp::avg)
          divide(data, count, type, static_cast<int>(c->group.members.size()));
      },
      /*local=*/true);
}

Future<void> Communicator::broadcast_bytes(void* data, std::size_t bytes, int root, Keep keep) {
  if (!impl_) throw UsageError("broadcast on a Communicator that joined no group");
  if (root < 0 || root >= size()) {
    throw UsageError("broadcast: root " + std::to_string(root) + " is not a rank of the group");
  }
  Impl* c = impl_.get();
  if (const int dev = device_of(data); dev >= 0) {
    return c->submit("broadcast", [c, dev, data, bytes, root, keep = std::move(keep)] {
      c->device(dev).broadcast(data, bytes, root);
    });
  }
  return c->submit(
      "broadcast",
      [c, data, bytes, root, keep = std::move(keep)] {
        const Shape shape{Shape::broadcast, 0, 0, root, bytes};
        if (c->small_or_agreed(shape))
          return c->small->broadcast(shape, data, c->timeout(), c->check_gone());
        gloo::BroadcastOptions o(c->context);
        o.setOutput(static_cast<char*>(data), bytes);
        o.setRoot(root);
        o.setTag(c->next_tag++);
        o.setTimeout(c->timeout());
        gloo::broadcast(o);
      },
      /*local=*/true);
}

Future<void> Communicator::allgather_bytes(const void* in, std::size_t in_bytes, void* out,
                                           std::size_t out_bytes, Keep keep) {
  if (!impl_) throw UsageError("allgather on a Communicator that joined no group");
  if (out_bytes != in_bytes * static_cast<std::size_t>(size())) {
    throw UsageError("allgather: the output must hold size() times the input");
  }
  Impl* c = impl_.get();
  if (const int dev = device_of(in, out, "allgather"); dev >= 0) {
    return c->submit("allgather", [c, dev, in, in_bytes, out, keep = std::move(keep)] {
      c->device(dev).allgather(in, in_bytes, out);
    });
  }
  return c->submit(
      "allgather",
      [c, in, in_bytes, out, out_bytes, keep = std::move(keep)] {
        const Shape shape{Shape::allgather, 0, 0, -1, in_bytes};
        if (c->small_or_agreed(shape)) {
          return c->small->allgather(shape, in, out, c->timeout(), c->check_gone());
        }
        gloo::AllgatherOptions o(c->context);
        o.setInput(const_cast<char*>(static_cast<const char*>(in)), in_bytes);
        o.setOutput(static_cast<char*>(out), out_bytes);
        o.setTag(c->next_tag++);
        o.setTimeout(c->timeout());
        gloo::allgather(o);
      },
      /*local=*/true);
}

Future<void> Communicator::reduce_scatter_bytes(const void* in, std::size_t in_count, void* out,
                                                std::size_t out_count, DType type, ReduceOp op,
                                                Keep keep) {
  if (!impl_) throw UsageError("reduce_scatter on a Communicator that joined no group");
  if (in_count != out_count * static_cast<std::size_t>(size())) {
    throw UsageError("reduce_scatter: the input must hold size() blocks of the output's size");
  }
  Impl* c = impl_.get();
  if (const int dev = device_of(in, out, "reduce_scatter"); dev >= 0) {
    return c->submit("reduce_scatter",
                     [c, dev, in, out, out_count, type, op, keep = std::move(keep)] {
                       c->device(dev).reduce_scatter(in, out, out_count, type, op);
                     });
  }
  return c->submit(
      "reduce_scatter",
      [c, in, in_count, out, out_count, type, op, keep = std::move(keep)] {
        // The whole reduced, then this rank's block kept: twice an allreduce's traffic at most.
        const std::size_t width = size_of(type);
        std::vector<char> all(static_cast<const char*>(in),
                              static_cast<const char*>(in) + in_count * width);
        c->allreduce_host(all.data(), in_count, type, op, Shape::reduce_scatter);
        char* mine = all.data() + static_cast<std::size_t>(c->rank) * out_count * width;
        if (op == ReduceOp::avg) {
          divide(mine, out_count, type, static_cast<int>(c->group.members.size()));
        }
        std::memcpy(out, mine, out_count * width);
      },
      /*local=*/true);
}

Future<void> Communicator::barrier() {
  if (!impl_) throw UsageError("barrier on a Communicator that joined no group");
  Impl* c = impl_.get();
  return c->submit(
      "barrier",
      [c] {
        if (c->small) return c->small->agree(Shape{}, c->timeout(), c->check_gone());
        gloo::BarrierOptions o(c->context);
        o.setTag(c->next_tag++);
        o.setTimeout(c->timeout());
        gloo::barrier(o);
      },
      /*local=*/true);
}

}  // namespace baton::collective
