#pragma once

// Internal: what the store's handle is made of (store.cpp, batch.cpp): futures combined without
// waiting anywhere (a callback when one ends, when all of several have, or several run a few at
// a time), and asking a key's volumes in order, past those that are lost.

#include <algorithm>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "baton/actor/future.hpp"
#include "baton/gpu/gpu.hpp"
#include "baton/store/store.hpp"
#include "store/volume.hpp"
#include "wire/slab.hpp"

namespace baton::store::detail {

template <class T>
using Value = std::conditional_t<std::is_void_v<T>, std::monostate, T>;

/// How a future ended: its value, or its failure.
template <class T>
struct Outcome {
  std::optional<T> value;
  std::exception_ptr error;
};

/// Calls `cb` with how `f` ended, on the thread that completes it (nothing waits).
template <class T, class F>
void when(Future<T> f, F cb) {
  const auto& src = f.state();
  src->on_ready([src, cb = std::move(cb)]() mutable {
    Outcome<Value<T>> o;
    try {
      if constexpr (std::is_void_v<T>) {
        src->value();
        o.value.emplace();
      } else {
        o.value.emplace(std::move(src->value()));
      }
    } catch (...) {
      o.error = std::current_exception();
    }
    cb(std::move(o));
  });
}

/// How each of `futures` ended, once all have.
template <class T>
void when_all(std::vector<Future<T>> futures,
              std::function<void(std::vector<Outcome<Value<T>>>)> cb) {
  struct Gather {
    std::mutex mu;
    std::vector<Outcome<Value<T>>> outcomes;
    std::size_t left = 0;
    std::function<void(std::vector<Outcome<Value<T>>>)> cb;
  };
  auto g = std::make_shared<Gather>();
  g->outcomes.resize(futures.size());
  g->left = futures.size();
  g->cb = std::move(cb);
  if (futures.empty()) return g->cb({});
  for (std::size_t i = 0; i < futures.size(); ++i) {
    when(std::move(futures[i]), [g, i](Outcome<Value<T>> o) {
      std::unique_lock lock(g->mu);
      g->outcomes[i] = std::move(o);
      if (--g->left > 0) return;
      lock.unlock();
      g->cb(std::move(g->outcomes));
    });
  }
}

/// Runs steps 0..count-1, at most `window` at a time (`step(i)` starts one), and gives how each
/// ended, in order, once all have; after a failure no further step starts (those get its error).
template <class T>
void windowed(std::size_t count, std::size_t window, std::function<Future<T>(std::size_t)> step,
              std::function<void(std::vector<Outcome<Value<T>>>)> done) {
  struct Run : std::enable_shared_from_this<Run> {
    std::mutex mu;
    std::size_t count = 0, window = 0, next = 0, running = 0;
    std::exception_ptr failed;
    std::vector<Outcome<Value<T>>> outcomes;
    std::function<Future<T>(std::size_t)> step;
    std::function<void(std::vector<Outcome<Value<T>>>)> done;
    void launch() {
      std::vector<std::size_t> start;
      std::function<void(std::vector<Outcome<Value<T>>>)> finish;
      std::vector<Outcome<Value<T>>> all;
      {
        std::lock_guard lock(mu);
        while (running < window && next < count && !failed) {
          start.push_back(next++);
          ++running;
        }
        if (failed) {
          for (; next < count; ++next) outcomes[next].error = failed;
        }
        if (running == 0 && next == count && done) {
          finish = std::exchange(done, nullptr);
          all = std::move(outcomes);
        }
      }
      if (finish) return finish(std::move(all));
      for (const std::size_t i : start) {
        when(step(i), [self = this->shared_from_this(), i](Outcome<Value<T>> o) {
          {
            std::lock_guard lock(self->mu);
            if (o.error && !self->failed) self->failed = o.error;
            self->outcomes[i] = std::move(o);
            --self->running;
          }
          self->launch();
        });
      }
    }
  };
  auto run = std::make_shared<Run>();
  run->count = count;
  run->window = std::max<std::size_t>(1, window);
  run->outcomes.resize(count);
  run->step = std::move(step);
  run->done = std::move(done);
  run->launch();
}

/// What a failure says.
inline std::string reason(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "an unknown error";
  }
}

/// Calls `send` with `items` as they go to `volume`, each with its path. A value that is
/// uploaded_one_sided is first written into memory the volume reserves for it, and the item
/// names that memory instead of carrying its bytes. Where the writes cannot be made (a forced
/// rdma backend that cannot serve this pair, a transfer that fails), the bytes go in the
/// message after all; a volume lost on the way fails the call as a put's would.
template <class R, class Send>
Future<R> uploading(const std::vector<PutItem>& items, const ActorRef<Volume>& volume, Send send) {
  auto out = std::make_shared<std::vector<PutItem>>(via(items, volume.id()));
  std::vector<std::size_t> which;
  std::vector<std::uint64_t> sizes;
  for (std::size_t i = 0; i < out->size(); ++i) {
    if (!uploaded_one_sided((*out)[i])) continue;
    which.push_back(i);
    sizes.push_back((*out)[i].value.size());
  }
  if (which.empty()) return send(std::move(*out));
  auto next = std::make_shared<baton::detail::State<R>>();
  auto forward = [next](Outcome<Value<R>> o) {
    if (o.error) return next->set_exception(o.error);
    next->set_value(std::move(*o.value));
  };
  when(volume.call(&Volume::reserve, sizes),
       [out, which, send, next, forward](Outcome<std::vector<Upload>> reserved) {
         if (reserved.error) return next->set_exception(reserved.error);
         std::vector<PutItem> written = *out;  // the items as they go if the writes are made
         Future<void> writes;
         try {
           RdmaBatch batch;
           for (std::size_t k = 0; k < which.size(); ++k) {
             PutItem& item = written[which[k]];
             const Upload& u = reserved.value->at(k);
             batch.write(u.buffer, item.value.data(), item.value.size());
             item.via = "rdma " + std::string(to_string(rdma_backend(u.buffer, item.value.data())));
             item.upload = u.id;
             item.upload_size = item.value.size();
             item.value = Bytes();
           }
           writes = batch.submit();
         } catch (const std::exception&) {
           return when(send(std::move(*out)), forward);  // with the bytes in the message
         }
         // `out` keeps the values until the writes end, however they end.
         when(std::move(writes), [out, written = std::move(written), send,
                                  forward](const Outcome<std::monostate>& w) mutable {
           when(send(w.error ? std::move(*out) : std::move(written)), forward);
         });
       });
  return Future<R>(std::move(next));
}

/// Makes `next` ready: `make` gives its value, or throws its failure.
template <class U, class F>
void settle(const std::shared_ptr<baton::detail::State<U>>& next, F make) {
  try {
    if constexpr (std::is_void_v<U>) {
      make();
      next->set_value();
    } else {
      next->set_value(make());
    }
  } catch (...) {
    next->set_exception(std::current_exception());
  }
}

/// A volume's call that failed as a call (its proc gone, say): the operation fails naming it.
[[noreturn]] inline void lost(const std::string& what, const ActorRef<Volume>& volume,
                              const std::exception_ptr& e) {
  throw StoreError(what + ": its volume in proc " + volume.id().proc.to_string() + " failed (" +
                   reason(e) + "); the store's other keys are unaffected");
}

/// One call to `volume`, its answer mapped by `map` (which may throw the answer's error).
template <class R, class F>
auto ask(const ActorRef<Volume>& volume, Future<R> call, const std::string& what, F map) {
  using U = std::invoke_result_t<F, Value<R>>;
  auto next = std::make_shared<baton::detail::State<U>>();
  when(std::move(call), [next, volume, what, map = std::move(map)](Outcome<Value<R>> o) mutable {
    settle(next, [&] {
      if (o.error) lost(what, volume, o.error);
      return map(std::move(*o.value));
    });
  });
  return Future<U>(std::move(next));
}

/// Asks the volumes of a key, from its home on, in order: the first one whose call does not fail
/// as a call (a volume whose proc is gone) and whose answer is `found`, or, when no volume was
/// lost on the way, the first answer at all. A key moves past a lost volume (see Store::put),
/// so after one the search goes on. `done` gets the answer it stopped at (if any), what the lost
/// volumes said, and the index in `volumes` of the volume that gave the answer.
template <class R>
struct Probe : std::enable_shared_from_this<Probe<R>> {
  std::vector<ActorRef<Volume>> volumes;
  std::size_t home = 0;
  std::function<Future<R>(const ActorRef<Volume>&)> call;
  std::function<bool(const R&)> found;
  std::function<void(std::optional<R>, const std::string& lost, std::size_t at)> done;
  std::string lost;
  std::optional<R> last;
  std::size_t last_at = 0;

  void attempt(std::size_t tried) {
    if (tried == volumes.size()) return done(std::move(last), lost, last_at);
    const std::size_t at = (home + tried) % volumes.size();
    const ActorRef<Volume>& v = volumes[at];
    when(call(v), [self = this->shared_from_this(), v, tried, at](Outcome<R> o) {
      if (o.error) {
        self->lost += (self->lost.empty() ? "" : "; ") + std::string("its volume in proc ") +
                      v.id().proc.to_string() + " failed (" + reason(o.error) + ")";
        return self->attempt(tried + 1);
      }
      if (self->found(*o.value) || self->lost.empty())
        return self->done(std::move(o.value), self->lost, at);
      self->last = std::move(o.value);
      self->last_at = at;
      self->attempt(tried + 1);
    });
  }
};

template <class R>
void probe(const std::vector<ActorRef<Volume>>& volumes, std::size_t home,
           std::function<Future<R>(const ActorRef<Volume>&)> call,
           std::function<bool(const R&)> found,
           std::function<void(std::optional<R>, const std::string& lost, std::size_t at)> done) {
  auto p = std::make_shared<Probe<R>>();
  p->volumes = volumes;
  p->home = home;
  p->call = std::move(call);
  p->found = std::move(found);
  p->done = std::move(done);
  p->attempt(0);
}

/// The failure of an operation on `key` whose volumes were lost.
inline std::exception_ptr lost_error(const std::string& what, const std::string& lost) {
  return std::make_exception_ptr(
      StoreError(what + ": " + lost + "; the store's other keys are unaffected"));
}

/// FNV-1a: the same in every process and build, so every holder of a store finds a key alike.
inline std::uint64_t hash_of(const std::string& key) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const char c : key) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

inline void throw_answer(const Answer& a) {
  if (a.code == Code::missing) throw KeyNotFound(a.message);
  if (a.code == Code::bad) throw StoreError(a.message);
}

/// Why `into` cannot take what `got` describes ("" if it can).
inline std::string unfit(const std::string& key, const Got& got, std::span<std::byte> into,
                         const std::string& dtype) {
  if (!dtype.empty() && got.info.dtype != dtype) {
    return "get of '" + key + "' into a destination of " + dtype + ", but the key holds " +
           got.info.to_string() + " (read it without a destination, then convert)";
  }
  const auto bytes = static_cast<std::size_t>(got.box.elements()) * got.info.element;
  if (bytes != into.size()) {
    return "get of '" + key + "' into a destination of " + std::to_string(into.size()) +
           " bytes: box " + got.box.to_string() + " of " + got.info.to_string() + " has " +
           std::to_string(bytes) + " (" + std::to_string(got.info.element) + " bytes an element)";
  }
  return {};
}

/// Copies `src` (host memory) into `dst`: host memory, or device memory where `device` (a
/// failed device copy is a StoreError naming `key`'s get).
inline void place(const std::string& key, std::byte* dst, const Bytes& src, bool device) {
  if (!device) return wire::copy_out(src, dst);
  try {
    if (src.size() != 0) gpu::api().copy(dst, src.data(), src.size());
  } catch (const gpu::GpuError& e) {
    throw StoreError("get of '" + key + "' into device memory: " + e.what());
  }
}

/// What a get whose answer carried the bytes gives: `got`, copied into `into` (host or device
/// memory) when given, after checking that it fits.
inline Got delivered(const std::string& key, Got got, std::optional<std::span<std::byte>> into,
                     const std::string& dtype) {
  if (into) {
    if (std::string why = unfit(key, got, *into, dtype); !why.empty()) throw StoreError(why);
    place(key, into->data(), got.data, gpu::api().is_device(into->data()));
  }
  return got;
}

/// A put's item: plain bytes are a one-dimensional tensor of bytes; no shard is the whole.
inline PutItem item_of(const std::string& key, Bytes value, const TensorInfo& info,
                       const PutOptions& options) {
  PutItem item{key, std::move(value), info, {}, options.keep};
  if (item.info.shape.empty() && item.info.dtype.empty()) {
    item.info = TensorInfo{"", 1, {static_cast<std::int64_t>(item.value.size())}};
  }
  item.box = options.shard.value_or(Box::whole(item.info.shape));
  return item;
}

}  // namespace baton::store::detail

// What store.cpp and batch.cpp call unqualified.
namespace baton::store {
using detail::Answer;
using detail::ask;
using detail::Code;
using detail::delivered;
using detail::GetAnswer;
using detail::GetItem;
using detail::hash_of;
using detail::item_of;
using detail::lost_error;
using detail::Outcome;
using detail::place;
using detail::probe;
using detail::PutAnswer;
using detail::PutItem;
using detail::settle;
using detail::throw_answer;
using detail::unfit;
using detail::uploading;
using detail::Volume;
using detail::when;
using detail::when_all;
using detail::windowed;
}  // namespace baton::store
