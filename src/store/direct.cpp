// Direct mode of the tensor store (see DirectWriter in store.hpp): a key's versions live in
// buffers of its writer's memory, which readers read one-sided (RdmaBuffer) under leases that
// keep the writer off a buffer while a reader reads it. The volume's side: the writer's
// endpoints and the leases it grants gets. The client's: the writer, and a get's read.

#include <algorithm>
#include <memory>

#include "actor/node.hpp"
#include "baton/store/store.hpp"
#include "net/work_queue.hpp"
#include "store/client.hpp"
#include "store/volume.hpp"

namespace baton::store {
namespace detail {

Answer Volume::direct_open(const std::string& key, const TensorInfo& info,
                           const std::vector<RdmaBuffer>& buffers, std::int64_t lease_ms) {
  const std::string what = "direct writer of " + quoted(key) + ": ";
  if (keys_.contains(key)) {
    return {Code::bad, what + "the key holds stored versions (erase it first)"};
  }
  if (buffers.size() < 2) {
    return {Code::bad, what + std::to_string(buffers.size()) +
                           " buffer(s): it needs at least 2 (one published while the next is "
                           "written)"};
  }
  const auto bytes = static_cast<std::size_t>(Box::whole(info.shape).elements()) * info.element;
  for (const RdmaBuffer& b : buffers) {
    if (b.size() != bytes) {
      return {Code::bad, what + "a buffer of " + std::to_string(b.size()) + " bytes for " +
                             info.to_string() + " (" + std::to_string(bytes) + " bytes)"};
    }
  }
  if (lease_ms <= 0) return {Code::bad, what + "a lease of " + std::to_string(lease_ms) + " ms"};
  // A writer that opens the key again (started anew) replaces the one before, and its leases.
  Direct& d = direct_[key];
  d = Direct{};
  d.info = info;
  d.buffers = buffers;
  d.lease_for = std::chrono::milliseconds(lease_ms);
  return {};
}

DirectSlot Volume::direct_acquire(const std::string& key) {
  auto it = direct_.find(key);
  if (it == direct_.end()) {
    return {{Code::missing, "direct key " + quoted(key) + " is not open here (it was erased)"}, {}};
  }
  Direct& d = it->second;
  const auto now = Direct::Clock::now();
  std::erase_if(d.leases, [&](const Direct::Lease& l) { return l.until <= now; });
  if (d.acquired) return {{}, d.acquired};  // asked again before publishing: the same buffer
  for (std::uint32_t i = 0; i < d.buffers.size(); ++i) {
    const bool leased = std::any_of(d.leases.begin(), d.leases.end(),
                                    [&](const Direct::Lease& l) { return l.buffer == i; });
    if (d.latest != i && !leased) {
      d.acquired = i;
      return {{}, i};
    }
  }
  return {};  // readers hold every other buffer
}

PutAnswer Volume::direct_publish(const std::string& key, std::uint32_t index) {
  PutAnswer a;
  auto it = direct_.find(key);
  if (it == direct_.end()) {
    a.answer = {Code::missing, "direct key " + quoted(key) + " is not open here (it was erased)"};
    return a;
  }
  Direct& d = it->second;
  if (d.acquired != index) {
    a.answer = {Code::bad, "publish of direct key " + quoted(key) + ": buffer " +
                               std::to_string(index) +
                               " was not acquired (write only into the buffer acquire() gave)"};
    return a;
  }
  d.latest = index;
  d.acquired.reset();
  ++d.version;
  ++stats_.puts;
  a.puts.push_back(Put{d.version, true});
  return a;
}

bool Volume::direct_release(const std::string& key, std::uint64_t lease) {
  auto it = direct_.find(key);
  if (it == direct_.end()) return false;
  auto& leases = it->second.leases;
  auto l = std::find_if(leases.begin(), leases.end(),
                        [&](const Direct::Lease& x) { return x.id == lease; });
  if (l == leases.end()) return false;  // ran out, and was dropped
  const bool held = l->until > Direct::Clock::now();
  leases.erase(l);
  return held;
}

Answer Volume::lease(const std::string& key, const GetItem& item, GetAnswer& out) {
  Direct& d = direct_.at(key);
  if (!d.latest) {
    return {Code::missing, "direct key " + quoted(key) + " has no version published yet"};
  }
  if (item.version && *item.version != d.version) {
    return {Code::missing, "version " + std::to_string(*item.version) + " of direct key " +
                               quoted(key) +
                               " is not held: a direct key holds its latest "
                               "version only (" +
                               std::to_string(d.version) + ")"};
  }
  if (item.box && !contains(Box::whole(d.info.shape), *item.box)) {
    return {Code::bad, "get of " + quoted(key) + ": box " + item.box->to_string() + " is outside " +
                           d.info.to_string()};
  }
  const auto now = Direct::Clock::now();
  std::erase_if(d.leases, [&](const Direct::Lease& l) { return l.until <= now; });
  const std::uint64_t id = next_lease_++;
  d.leases.push_back({id, *d.latest, now + d.lease_for});  // counted when released, read
  out.lease = ReadLease{d.buffers[*d.latest], d.info, d.version, id, d.lease_for.count()};
  return {Code::leased, ""};
}

}  // namespace detail

struct DirectWriter::State {
  std::string key;
  ActorRef<Volume> volume;
  std::vector<std::span<std::byte>> spans;
  std::vector<RdmaBuffer> buffers;
};

namespace {

/// The store's timers, one queue per runtime (a node extension): a direct writer whose readers
/// hold every other buffer asks again on them.
struct Timers {
  net::TimerQueue queue;
};

/// A direct writer's acquire: asked again, a little later each time, until a buffer is free.
struct Acquire : std::enable_shared_from_this<Acquire> {
  std::string key;
  ActorRef<Volume> volume;
  std::weak_ptr<baton::detail::Node> node;  // whose timers ask again
  std::shared_ptr<baton::detail::State<std::size_t>> next;
  std::chrono::microseconds wait{20};

  void ask() {
    when(volume.call(&Volume::direct_acquire, key),
         [self = shared_from_this()](Outcome<detail::DirectSlot> o) {
           if (!o.error && o.value->answer.code == Code::ok && !o.value->index) {
             return self->again();
           }
           settle(self->next, [&]() -> std::size_t {
             if (o.error)
               detail::lost("acquire of direct key '" + self->key + "'", self->volume, o.error);
             throw_answer(o.value->answer);
             return *o.value->index;
           });
         });
  }
  /// Readers hold every other buffer: ask again shortly (their reads are short, or their
  /// leases run out).
  void again() {
    auto n = node.lock();
    if (!n) {
      return next->set_exception(std::make_exception_ptr(
          StoreError("acquire of direct key '" + key + "': the runtime ended")));
    }
    wait = std::min<std::chrono::microseconds>(wait * 2, std::chrono::milliseconds(5));
    n->extension<Timers>()->queue.at(std::chrono::steady_clock::now() + wait,
                                     [self = shared_from_this()] { self->ask(); });
  }
};

}  // namespace

const std::string& DirectWriter::key() const {
  return state_->key;
}

std::size_t DirectWriter::buffers() const {
  return state_ ? state_->spans.size() : 0;
}

std::span<std::byte> DirectWriter::buffer(std::size_t index) const {
  return state_->spans.at(index);
}

Future<std::size_t> DirectWriter::acquire() const {
  if (!state_) throw StoreError("acquire() of an empty DirectWriter (assign it Store::direct's)");
  auto a = std::make_shared<Acquire>();
  a->key = state_->key;
  a->volume = state_->volume;
  a->node = baton::detail::node_here();
  a->next = std::make_shared<baton::detail::State<std::size_t>>();
  a->ask();
  return Future<std::size_t>(a->next);
}

Future<Put> DirectWriter::publish(std::size_t index) const {
  if (!state_) throw StoreError("publish() of an empty DirectWriter (assign it Store::direct's)");
  const std::string what = "publish of direct key '" + state_->key + "'";
  if (index >= state_->spans.size()) {
    auto failed = std::make_shared<baton::detail::State<Put>>();
    failed->set_exception(std::make_exception_ptr(
        StoreError(what + ": no buffer " + std::to_string(index) + " (it has " +
                   std::to_string(state_->spans.size()) + ")")));
    return Future<Put>(std::move(failed));
  }
  const auto i = static_cast<std::uint32_t>(index);
  return ask(state_->volume, state_->volume.call(&Volume::direct_publish, state_->key, i), what,
             [](const PutAnswer& a) {
               throw_answer(a.answer);
               return a.puts.at(0);
             });
}

Future<void> DirectWriter::close() const {
  auto done = std::make_shared<baton::detail::State<void>>();
  if (!state_) {
    done->set_value();
    return Future<void>(std::move(done));
  }
  auto st = state_;
  when(st->volume.call(&Volume::erase, st->key), [st, done](const Outcome<std::monostate>&) {
    // The key is gone (or its volume is): no reader is granted the buffers any more.
    std::vector<Future<void>> drops;
    drops.reserve(st->buffers.size());
    for (const RdmaBuffer& b : st->buffers) drops.push_back(b.drop());
    when_all<void>(std::move(drops), [done](const std::vector<Outcome<std::monostate>>& all) {
      settle(done, [&] {
        for (const auto& d : all) {
          if (d.error) std::rethrow_exception(d.error);
        }
      });
    });
  });
  return Future<void>(std::move(done));
}

Future<DirectWriter> Store::direct(const std::string& key, const TensorInfo& info,
                                   std::vector<std::span<std::byte>> buffers,
                                   const DirectOptions& options) const {
  auto next = std::make_shared<baton::detail::State<DirectWriter>>();
  auto st = std::make_shared<DirectWriter::State>();
  st->key = key;
  st->spans = std::move(buffers);
  try {
    if (volumes_.empty()) throw StoreError("direct() of an empty store handle");
    // The volume checks sizes and counts too; registering memory of the wrong size would fail
    // less clearly, so they are checked here first.
    const auto bytes = static_cast<std::size_t>(Box::whole(info.shape).elements()) * info.element;
    for (const auto& s : st->spans) {
      if (s.size() != bytes) {
        throw StoreError("direct writer of '" + key + "': a buffer of " + std::to_string(s.size()) +
                         " bytes for " + info.to_string() + " (" + std::to_string(bytes) +
                         " bytes)");
      }
    }
    if (st->spans.size() < 2) {
      throw StoreError("direct writer of '" + key + "': " + std::to_string(st->spans.size()) +
                       " buffer(s); it needs at least 2 (one published while the next is "
                       "written)");
    }
    for (const auto& s : st->spans)
      st->buffers.push_back(RdmaBuffer::register_memory(s.data(), s.size()));
  } catch (...) {
    next->set_exception(std::current_exception());
    return Future<DirectWriter>(std::move(next));
  }
  const std::int64_t lease_ms = options.lease.count();
  probe<Answer>(
      volumes_, home(key),
      [st, info, lease_ms](const ActorRef<Volume>& v) {
        return v.call(&Volume::direct_open, st->key, info, st->buffers, lease_ms);
      },
      [](const Answer&) { return true; },
      [st, volumes = volumes_, next](std::optional<Answer> a, const std::string& lost,
                                     std::size_t at) {
        if (!a || a->code != Code::ok) {
          for (const RdmaBuffer& b : st->buffers) (void)b.drop();
        }
        if (!a) return next->set_exception(lost_error("direct writer of '" + st->key + "'", lost));
        settle(next, [&] {
          throw_answer(*a);
          st->volume = volumes[at];
          DirectWriter w;
          w.state_ = st;
          return w;
        });
      });
  return Future<DirectWriter>(std::move(next));
}

void Store::read_leased(const std::string& key, const GetOptions& options,
                        const detail::ReadLease& lease, const ActorRef<Volume>& volume,
                        std::optional<std::span<std::byte>> into, const std::string& dtype,
                        const std::shared_ptr<baton::detail::State<Got>>& next) const {
  Got meta;
  meta.info = lease.info;
  meta.version = lease.version;
  meta.box = options.box.value_or(Box::whole(lease.info.shape));
  const std::size_t element = lease.info.element;
  const Box held = lease.box.value_or(Box::whole(lease.info.shape));
  const auto total = static_cast<std::size_t>(held.elements()) * element;
  const auto wanted = static_cast<std::size_t>(meta.box.elements()) * element;
  const std::uint64_t id = lease.lease;
  const std::string where = lease.direct ? "its direct writer's memory" : "its volume's memory";
  if (into) {
    if (std::string why = unfit(key, meta, *into, dtype); !why.empty()) {
      volume.send(&Volume::release, key, id, std::uint64_t{0}, std::string("rdma"));
      return next->set_exception(std::make_exception_ptr(StoreError(why)));
    }
  }
  // What the lease holds is read at once: into the destination when it is the box asked for
  // (and, for a destination in device memory, when the source is device memory too: GPU IPC
  // copies device to device), else into host memory of ours, from which the box is copied.
  const bool all = meta.box == held;
  const bool device_into = into && gpu::api().is_device(into->data());
  const bool straight = all && into && (!device_into || lease.buffer.device());
  std::shared_ptr<std::byte[]> read_buf;
  std::byte* at = nullptr;
  if (straight) {
    at = into->data();
  } else {
    read_buf.reset(new std::byte[std::max<std::size_t>(1, total)]);  // every byte is read
    at = read_buf.get();
  }
  std::string path;
  Future<void> reading;
  try {
    path = "rdma " + std::string(to_string(rdma_backend(lease.buffer, at)));
    reading = lease.buffer.read_into(at, total, lease.offset);
  } catch (const std::exception& e) {
    // A forced rdma backend that cannot serve this pair: stored bytes come in an answer instead
    // (the version leased); a direct key's live only in its writer's memory.
    volume.send(&Volume::release, key, id, std::uint64_t{0}, std::string("rdma"));
    if (lease.direct) {
      return next->set_exception(std::make_exception_ptr(
          StoreError("get of '" + key + "' from " + where + ": " + e.what())));
    }
    std::vector<GetItem> items{GetItem{key, meta.version, meta.box}};
    when(volume.call(&Volume::get, detail::via(items, volume.id())),
         [key, volume, into, dtype, next](Outcome<GetAnswer> a) {
           settle(next, [&] {
             if (a.error) detail::lost("get of '" + key + "'", volume, a.error);
             throw_answer(a.value->answer);
             return delivered(key, std::move(a.value->got.at(0)), into, dtype);
           });
         });
    return;
  }
  const std::int64_t lease_ms = lease.lease_ms;
  const bool direct = lease.direct;
  when(std::move(reading),
       [key, volume, id, lease_ms, direct, where, path, total, meta, all, into, device_into,
        straight, read_buf, held, element, wanted, next](Outcome<std::monostate> read) mutable {
         const std::uint64_t moved = read.error ? 0 : total;
         when(volume.call(&Volume::release, key, id, moved, path), [=](Outcome<bool> kept) mutable {
           settle(next, [&] {
             if (read.error) {
               throw StoreError("get of '" + key + "' from " + where + ": " +
                                detail::reason(read.error));
             }
             // A volume lost after the read granted no buffer to a direct writer meanwhile (the
             // writer asks it), and stored bytes never change, so the read stands.
             if (!kept.error && !*kept.value) {
               throw StoreError(
                   "get of '" + key + "': the read from " + where +
                   " took longer than its lease (" + std::to_string(lease_ms) + " ms), so " +
                   (direct ? "the writer may have written that buffer meanwhile; read again, or "
                             "open the key with a longer DirectOptions::lease"
                           : "the volume may have freed those bytes meanwhile; read again"));
             }
             if (straight) return std::move(meta);
             if (all) {
               meta.data = Bytes::view(read_buf, read_buf.get(), wanted);
             } else {
               // The box, assembled in host memory: the destination's own, or one of ours.
               std::shared_ptr<std::byte[]> out;
               std::byte* dst = nullptr;
               if (into && !device_into) {
                 dst = into->data();
               } else {
                 out.reset(new std::byte[std::max<std::size_t>(1, wanted)]);
                 dst = out.get();
               }
               copy_region(read_buf.get(), held, dst, meta.box, meta.box, element);
               if (into && !device_into) return std::move(meta);
               meta.data = Bytes::view(out, out.get(), wanted);
             }
             if (into) {  // device memory: one copy from the host bytes read
               place(key, into->data(), meta.data, true);
               meta.data = Bytes();
             }
             return std::move(meta);
           });
         });
       });
}

}  // namespace baton::store
