// One rank's end of a group (rank.hpp): its Peer, which the other ranks ask whether it is alive
// and how many collectives it entered; its collectives, queued or started where they are called;
// and how a failed one breaks the group, naming the ranks that are gone.

#include "collective/rank.hpp"

#include <gloo/allreduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <pthread.h>
#include <signal.h>

#include <map>
#include <type_traits>
#include <utility>
#include <vector>

#include "actor/proc_state.hpp"
#include "actor/wait_all.hpp"
#include "collective/reduce.hpp"
#include "mesh/stall.hpp"

namespace baton::collective {
namespace {

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

/// Thrown where the ranks that are gone are already named.
struct RanksGone : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// `call` made to every other rank's Peer of `c` at once, each future beside its rank.
template <class Call>
std::vector<std::pair<std::size_t, std::invoke_result_t<Call, const ActorRef<Peer>&>>> ask_peers(
    const Communicator::Impl& c, Call call) {
  std::vector<std::pair<std::size_t, std::invoke_result_t<Call, const ActorRef<Peer>&>>> asked;
  asked.reserve(c.group.members.size());
  for (std::size_t r = 0; r < c.group.members.size(); ++r) {
    if (static_cast<int>(r) == c.rank) continue;
    asked.emplace_back(
        r, call(ActorRef<Peer>(ActorId{c.group.members[r].proc, peer_name(c.group.key, r), 0})));
  }
  return asked;
}

}  // namespace

Communicator::Impl::Impl(const Group& g, int r, Actor& self)
    : group(g), rank(r), proc(&self.proc()), times(collective_times(self.proc())) {
  const std::string peer = peer_name(group.key, static_cast<std::size_t>(rank));
  {
    const auto progress = detail::state_of(self.proc()).extension<Progress>();
    std::lock_guard lock(progress->mu);
    std::erase_if(progress->by_peer, [](const auto& kv) { return kv.second.expired(); });
    progress->by_peer[peer] = entered;
  }
  (void)self.proc().spawn<Peer>(peer);
  queue.post(&Impl::block_sigpipe);
}

Future<void> Communicator::Impl::connect() {
  Promise<void> joined;
  queue.post([this, joined] {
    try {
      gloo::transport::tcp::attr attr;
      attr.hostname = group.hosts[static_cast<std::size_t>(rank)];
      auto device = gloo::transport::tcp::CreateDevice(attr);
      auto made =
          std::make_shared<gloo::rendezvous::Context>(rank, static_cast<int>(group.members.size()));
      made->setTimeout(timeout());
      GlooStore store(*proc, group.store, timeout());
      gloo::rendezvous::PrefixStore prefixed(std::to_string(group.key), store);
      made->connectFullMesh(prefixed, device);
      context = std::move(made);
      join_small(store);
      ready.store(true, std::memory_order_release);
      joined.set_value();
    } catch (const std::exception& e) {
      joined.set_exception(std::make_exception_ptr(
          std::runtime_error("collective::join: rank " + std::to_string(rank) +
                             " could not connect to the group: " + e.what())));
    }
  });
  return joined.get_future();
}

Communicator::Impl::~Impl() {
  if (small) small->watch(timeout(), check_gone());
  break_for_failed();
}

void Communicator::Impl::break_for_failed() {
  std::optional<Failed> f;
  {
    std::lock_guard lock(watch_mu);
    f.swap(failed_here);
  }
  if (!f) return;
  try {
    std::rethrow_exception(f->error);
  } catch (const RanksGone& e) {
    fail(f->what, e.what(), true);
  } catch (const std::exception& e) {
    fail(f->what, e.what());
  }
  f->done.set_exception(std::make_exception_ptr(std::runtime_error(broken)));
  queued.fetch_sub(1, std::memory_order_release);
}

void Communicator::Impl::block_sigpipe() {
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  ::pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
}

Future<void> Communicator::Impl::submit(const std::string& what, std::function<void()> op,
                                        bool local) {
  Promise<void> done;
  if (local && group.members.size() == 1 && ready.load(std::memory_order_acquire) &&
      queued.load(std::memory_order_acquire) == 0) {
    run(what, op, done);
    return done.get_future();
  }
  queued.fetch_add(1, std::memory_order_relaxed);
  queue.post([this, what, op = std::move(op), done]() mutable {
    if (small) small->watch(timeout(), check_gone());  // one started on the calling thread
    break_for_failed();
    run(what, op, done);
    queued.fetch_sub(1, std::memory_order_release);
  });
  return done.get_future();
}

void Communicator::Impl::run(const std::string& what, const std::function<void()>& op,
                             Promise<void>& done) {
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

std::string Communicator::Impl::stall_report(const std::string& what, std::uint64_t index,
                                             double waited_s) const {
  auto asked = ask_peers(*this, [](const ActorRef<Peer>& p) { return p.call(&Peer::entered); });
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

std::string Communicator::Impl::gone() const {
  auto pings = ask_peers(*this, [](const ActorRef<Peer>& p) { return p.call(&Peer::ping); });
  std::string names;
  detail::wait_all(
      pings, peer_wait(), [](std::size_t, int) {},
      [&](std::size_t r, const std::string& why) {
        names += (names.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + " (" +
                 group.members[r].to_string() + ") is gone: " + why;
      });
  return names;
}

std::chrono::milliseconds Communicator::Impl::peer_wait() const {
  return std::min<std::chrono::milliseconds>(timeout(), std::chrono::seconds(5));
}

nccl::DeviceComm& Communicator::Impl::device(int index) {
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
  device_comm = std::make_unique<nccl::DeviceComm>(id, rank, static_cast<int>(group.members.size()),
                                                   index, timeout(), [this] {
                                                     if (auto names = gone(); !names.empty())
                                                       throw RanksGone(names);
                                                   });
  return *device_comm;
}

void Communicator::Impl::join_small(GlooStore& store) {
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

SmallExchange::CheckGone Communicator::Impl::check_gone() const {
  return [this] {
    if (auto names = gone(); !names.empty()) throw RanksGone(names);
  };
}

bool Communicator::Impl::small_or_agreed(const Shape& shape) {
  if (!small) return false;
  if (SmallExchange::small(shape.bytes)) return true;
  small->run(shape, nullptr, nullptr, timeout(), check_gone());
  return false;
}

bool Communicator::Impl::can_start_now(const Shape& shape) const {
  return small && group.members.size() > 1 && SmallExchange::small(shape.bytes) &&
         ready.load(std::memory_order_acquire) && queued.load(std::memory_order_acquire) == 0 &&
         small->idle();
}

Future<void> Communicator::Impl::start_now(const std::string& what, const Shape& shape,
                                           const void* in, void* out, std::function<void()> after,
                                           Keep keep) {
  Promise<void> done;
  if (!broken.empty()) {
    done.set_exception(std::make_exception_ptr(std::runtime_error(broken)));
    return done.get_future();
  }
  queued.fetch_add(1, std::memory_order_relaxed);  // until it ends: what follows waits
  const std::uint64_t index = entered->fetch_add(1) + 1;
  const auto began = std::chrono::steady_clock::now();
  auto waiting = detail::start_waiting(
      detail::state_of(*proc),
      [this, what, index](double waited_s) { return stall_report(what, index, waited_s); });
  auto ended = [this, what, shape, out, after = std::move(after), keep = std::move(keep), done,
                waiting,
                began](SmallExchange::Parts* parts, const std::exception_ptr& error) mutable {
    if (waiting) waiting->done.store(true);
    std::exception_ptr failed = error;
    if (!failed) {
      try {
        small->finish(shape, *parts, out);
        if (after) after();
        times->of(what).observe(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                    std::chrono::steady_clock::now() - began)
                                    .count());
        done.set_value();
      } catch (...) {
        failed = std::current_exception();
      }
    }
    if (!failed) {
      queued.fetch_sub(1, std::memory_order_release);
      return;
    }
    // Breaking the group asks the other ranks whether they are alive, which may take seconds:
    // on the rank's thread, not this one (it may be a link's). Left here before the collective
    // counts as ended, so that what the rank's thread runs next sees it first.
    {
      std::lock_guard lock(watch_mu);
      failed_here = Failed{what, failed, done};
    }
    if (!queue.post([this] { break_for_failed(); })) break_for_failed();
  };
  if (!small->start(shape, small->part(shape, in), std::move(ended))) {
    throw std::logic_error("a collective started while another was under way");
  }
  arm_watch();
  return done.get_future();
}

void Communicator::Impl::arm_watch() {
  std::lock_guard lock(watch_mu);
  if (watch_armed) return;
  watch_armed = true;
  (void)timers.at(std::chrono::steady_clock::now() + kWatchAfter, [this] { look(); });
}

void Communicator::Impl::look() {
  const auto now = std::chrono::steady_clock::now();
  const auto under_way = small->under_way();
  std::lock_guard lock(watch_mu);
  if (under_way && now - under_way->first >= kWatchAfter && watched != under_way->second) {
    watched = under_way->second;
    queued.fetch_add(1, std::memory_order_relaxed);
    const bool posted = queue.post([this] {
      small->watch(timeout(), check_gone());
      break_for_failed();
      queued.fetch_sub(1, std::memory_order_release);
    });
    if (!posted) queued.fetch_sub(1, std::memory_order_release);
  }
  watch_armed = under_way.has_value();
  if (watch_armed) (void)timers.at(now + kWatchAfter, [this] { look(); });
}

void Communicator::Impl::allreduce_host(void* data, std::size_t count, DType type, ReduceOp op,
                                        Shape::Op what) {
  const Shape shape{what, static_cast<std::uint8_t>(type), static_cast<std::uint8_t>(op), -1,
                    count * size_of(type)};
  if (small_or_agreed(shape)) return small->run(shape, data, data, timeout(), check_gone());
  gloo::AllreduceOptions o(context);
  with_type(type, [&]<class T>() { o.setOutput(static_cast<T*>(data), count); });
  o.setReduceFunction(reduce_fn(type, op));
  o.setTag(next_tag++);
  o.setTimeout(timeout());
  gloo::allreduce(o);
}

void Communicator::Impl::fail(const std::string& what, const std::string& why, bool named) {
  context.reset();
  if (device_comm) device_comm->abort();
  const std::string names = named ? why : gone();
  broken = "collective " + what + " failed on rank " + std::to_string(rank) + " of " +
           std::to_string(group.members.size()) + ": " +
           (names.empty() || named ? why : names + " (" + why + ")") +
           "; the group is broken: make a new one of the live members (make_group)";
}

}  // namespace baton::collective
