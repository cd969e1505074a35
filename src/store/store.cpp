// The tensor store's handle (see store.hpp): which volume a key lives on, and each operation as
// calls to volumes, their answers and failures turned into StoreErrors that name the key.

#include "baton/store/store.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <variant>

#include "baton/mesh/actor_mesh.hpp"
#include "store/volume.hpp"

namespace baton::store {

using detail::Answer;
using detail::Code;
using detail::GetAnswer;
using detail::GetItem;
using detail::PutAnswer;
using detail::PutItem;
using detail::Volume;

std::string TensorInfo::to_string() const {
  std::string out = (dtype.empty() ? "bytes" : dtype) + "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    out += (i > 0 ? ", " : "") + std::to_string(shape[i]);
  }
  return out + "]";
}

namespace {

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
std::string reason(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "an unknown error";
  }
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
[[noreturn]] void lost(const std::string& what, const ActorRef<Volume>& volume,
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
/// so after one the search goes on. `done` gets the answer it stopped at (if any), and what
/// the lost volumes said.
template <class R>
struct Probe : std::enable_shared_from_this<Probe<R>> {
  std::vector<ActorRef<Volume>> volumes;
  std::size_t home = 0;
  std::function<Future<R>(const ActorRef<Volume>&)> call;
  std::function<bool(const R&)> found;
  std::function<void(std::optional<R>, const std::string& lost)> done;
  std::string lost;
  std::optional<R> last;

  void attempt(std::size_t tried) {
    if (tried == volumes.size()) return done(std::move(last), lost);
    const ActorRef<Volume>& v = volumes[(home + tried) % volumes.size()];
    when(call(v), [self = this->shared_from_this(), v, tried](Outcome<R> o) {
      if (o.error) {
        self->lost += (self->lost.empty() ? "" : "; ") + std::string("its volume in proc ") +
                      v.id().proc.to_string() + " failed (" + reason(o.error) + ")";
        return self->attempt(tried + 1);
      }
      if (self->found(*o.value) || self->lost.empty())
        return self->done(std::move(o.value), self->lost);
      self->last = std::move(o.value);
      self->attempt(tried + 1);
    });
  }
};

template <class R>
void probe(const std::vector<ActorRef<Volume>>& volumes, std::size_t home,
           std::function<Future<R>(const ActorRef<Volume>&)> call,
           std::function<bool(const R&)> found,
           std::function<void(std::optional<R>, const std::string& lost)> done) {
  auto p = std::make_shared<Probe<R>>();
  p->volumes = volumes;
  p->home = home;
  p->call = std::move(call);
  p->found = std::move(found);
  p->done = std::move(done);
  p->attempt(0);
}

/// The failure of an operation on `key` whose volumes were lost.
std::exception_ptr lost_error(const std::string& what, const std::string& lost) {
  return std::make_exception_ptr(
      StoreError(what + ": " + lost + "; the store's other keys are unaffected"));
}

/// FNV-1a: the same in every process and build, so every holder of a store finds a key alike.
std::uint64_t hash_of(const std::string& key) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const char c : key) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

void throw_answer(const Answer& a) {
  if (a.code == Code::missing) throw KeyNotFound(a.message);
  if (a.code == Code::bad) throw StoreError(a.message);
}

}  // namespace

Future<Store> Store::create_async(const ProcMesh& procs, Spread spread, const std::string& name) {
  auto next = std::make_shared<baton::detail::State<Store>>();
  when(procs.spawn_async<Volume>(name), [spread, next](Outcome<ActorMesh<Volume>> o) {
    if (o.error) return next->set_exception(o.error);
    const ActorMesh<Volume>& mesh = *o.value;
    if (mesh.size() == 0) {
      return next->set_exception(
          std::make_exception_ptr(StoreError("a store needs a proc mesh with at least one proc")));
    }
    std::vector<ActorRef<Volume>> all;
    all.reserve(mesh.size());
    for (std::size_t r = 0; r < mesh.size(); ++r) all.push_back(mesh.at(r));
    if (spread == Spread::per_proc) return next->set_value(Store(std::move(all)));
    if (spread == Spread::single) {
      for (std::size_t r = 1; r < all.size(); ++r) (void)all[r].stop();
      all.resize(1);
      return next->set_value(Store(std::move(all)));
    }
    // per_host: the first volume of each host keeps; the others stop.
    std::vector<Future<std::string>> hosts;
    hosts.reserve(all.size());
    for (const auto& v : all) hosts.push_back(v.call(&Volume::host));
    when_all<std::string>(std::move(hosts), [all, next](std::vector<Outcome<std::string>> where) {
      settle(next, [&] {
        std::vector<ActorRef<Volume>> kept;
        std::set<std::string> seen;
        for (std::size_t r = 0; r < all.size(); ++r) {
          if (where[r].error) std::rethrow_exception(where[r].error);
          if (seen.insert(*where[r].value).second) {
            kept.push_back(all[r]);
          } else {
            (void)all[r].stop();
          }
        }
        return Store(std::move(kept));
      });
    });
  });
  return Future<Store>(std::move(next));
}

Store Store::create(const ProcMesh& procs, Spread spread, const std::string& name) {
  return create_async(procs, spread, name).get();
}

std::string Store::handle() const {
  const Body body = encode(*this);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(body.head.size() * 2);
  for (const char c : body.head) {
    const auto b = static_cast<unsigned char>(c);
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

Store Store::from_handle(const std::string& text) {
  auto nibble = [&](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    throw StoreError("not a store handle (Store::handle() gives one): a character '" +
                     std::string(1, c) + "'");
  };
  if (text.size() % 2 != 0) throw StoreError("not a store handle (Store::handle() gives one)");
  Body body;
  for (std::size_t i = 0; i < text.size(); i += 2) {
    body.head.push_back(static_cast<char>((nibble(text[i]) << 4) | nibble(text[i + 1])));
  }
  try {
    return decode<Store>(body);
  } catch (const std::exception& e) {
    throw StoreError(std::string("not a store handle (Store::handle() gives one): ") + e.what());
  }
}

std::size_t Store::home(const std::string& key) const {
  if (volumes_.empty()) {
    throw StoreError("use of an empty store handle (assign it Store::create's result)");
  }
  return static_cast<std::size_t>(hash_of(key) % volumes_.size());
}

namespace {

/// A put's item: plain bytes are a one-dimensional tensor of bytes; no shard is the whole.
PutItem item_of(const std::string& key, Bytes value, const TensorInfo& info,
                const PutOptions& options) {
  PutItem item{key, std::move(value), info, {}, options.keep};
  if (item.info.shape.empty() && item.info.dtype.empty()) {
    item.info = TensorInfo{"", 1, {static_cast<std::int64_t>(item.value.size())}};
  }
  item.box = options.shard.value_or(Box::whole(item.info.shape));
  return item;
}

}  // namespace

Future<Put> Store::put(const std::string& key, Bytes value, const TensorInfo& info,
                       const PutOptions& options) const {
  PutItem whole = item_of(key, std::move(value), info, options);
  // A value larger than a message carries goes as pieces of rows, each a shard of the same
  // version (their put's group), which the last one completes.
  std::vector<PutItem> pieces;
  if (whole.value.size() > detail::kPieceBytes && whole.box.rank() > 0 && whole.box.sizes[0] > 1) {
    const std::size_t row = whole.value.size() / static_cast<std::size_t>(whole.box.sizes[0]);
    const auto rows =
        static_cast<std::int64_t>(std::max<std::size_t>(1, detail::kPieceBytes / row));
    std::random_device random;
    const std::uint64_t group =
        (hash_of(key) ^ random() ^ (static_cast<std::uint64_t>(random()) << 32)) | 1;  // not 0
    for (std::int64_t first = 0; first < whole.box.sizes[0]; first += rows) {
      PutItem piece = whole;
      piece.box.offsets[0] += first;
      piece.box.sizes[0] = std::min(rows, whole.box.sizes[0] - first);
      piece.value = whole.value.slice(static_cast<std::size_t>(first) * row,
                                      static_cast<std::size_t>(piece.box.sizes[0]) * row);
      piece.group = group;
      pieces.push_back(std::move(piece));
    }
  } else {
    pieces.push_back(std::move(whole));
  }
  auto self = *this;
  auto send = [self, key](PutItem piece) {
    auto items = std::make_shared<std::vector<PutItem>>();
    items->push_back(std::move(piece));
    auto one = std::make_shared<baton::detail::State<Put>>();
    // On the key's home volume; if that one is lost, on the next that is not (a get looks there
    // too), so a key whose volume died can be put again.
    probe<PutAnswer>(
        self.volumes_, self.home(key),
        [items](const ActorRef<Volume>& v) {
          return v.call(&Volume::put, detail::via(*items, v.id()));
        },
        [](const PutAnswer&) { return true; },
        [one, key](std::optional<PutAnswer> a, const std::string& lost) {
          if (!a) return one->set_exception(lost_error("put of '" + key + "'", lost));
          settle(one, [&] {
            throw_answer(a->answer);
            return a->puts.at(0);
          });
        });
    return Future<Put>(std::move(one));
  };
  if (pieces.size() == 1) return send(std::move(pieces.front()));
  // Two pieces at a time: each is copied into a slab of its own as it is sent.
  auto next = std::make_shared<baton::detail::State<Put>>();
  auto shared = std::make_shared<std::vector<PutItem>>(std::move(pieces));
  windowed<Put>(
      shared->size(), 2, [send, shared](std::size_t i) { return send((*shared)[i]); },
      [next](std::vector<Outcome<Put>> done) {
        settle(next, [&] {
          Put out;
          for (auto& d : done) {
            if (d.error) std::rethrow_exception(d.error);
            out.version = d.value->version;
            out.complete = out.complete || d.value->complete;
          }
          return out;
        });
      });
  return Future<Put>(std::move(next));
}

Future<std::vector<Put>> Store::put_batch(
    const std::vector<std::tuple<std::string, Bytes, TensorInfo, PutOptions>>& puts) const {
  // By volume, in groups of at most kItemsPerMessage items, each keeping its place in the batch.
  struct Batch {
    std::vector<PutItem> items;
    std::vector<std::size_t> volumes;          // each group's volume
    std::vector<std::vector<std::size_t>> at;  // each group's items
  };
  auto b = std::make_shared<Batch>();
  std::map<std::size_t, std::vector<std::size_t>> by_volume;
  for (const auto& [key, value, info, options] : puts) {
    by_volume[home(key)].push_back(b->items.size());
    b->items.push_back(item_of(key, value, info, options));
  }
  for (auto& [v, at] : by_volume) {
    for (std::size_t first = 0; first < at.size(); first += detail::kItemsPerMessage) {
      const std::size_t last = std::min(at.size(), first + detail::kItemsPerMessage);
      b->volumes.push_back(v);
      b->at.emplace_back(at.begin() + static_cast<std::ptrdiff_t>(first),
                         at.begin() + static_cast<std::ptrdiff_t>(last));
    }
  }
  auto mine = [b](std::size_t s) {
    std::vector<PutItem> out;
    out.reserve(b->at[s].size());
    for (const std::size_t i : b->at[s]) out.push_back(b->items[i]);
    return out;
  };
  auto checks_of = [b](std::size_t s) {
    std::vector<detail::PutCheck> out;
    out.reserve(b->at[s].size());
    for (const std::size_t i : b->at[s]) out.push_back(detail::PutCheck::of(b->items[i]));
    return out;
  };
  auto next = std::make_shared<baton::detail::State<std::vector<Put>>>();
  // All or nothing: every volume checks its items first; only then are they stored, and if a
  // volume is lost in between, what the others stored is undone.
  std::vector<Future<int>> checks;
  for (std::size_t s = 0; s < b->volumes.size(); ++s) {
    const ActorRef<Volume>& v = volumes_[b->volumes[s]];
    checks.push_back(ask(v, v.call(&Volume::check, checks_of(s)), "put_batch", [](const Answer& a) {
      throw_answer(a);
      return 0;
    }));
  }
  auto self = *this;
  when_all<int>(std::move(checks), [self, b, mine, next](const std::vector<Outcome<int>>& checked) {
    for (const auto& c : checked) {
      if (c.error) return next->set_exception(c.error);
    }
    std::vector<Future<std::vector<Put>>> stored;
    for (std::size_t s = 0; s < b->volumes.size(); ++s) {
      const ActorRef<Volume>& v = self.volumes_[b->volumes[s]];
      stored.push_back(ask(v, v.call(&Volume::put, detail::via(mine(s), v.id())), "put_batch",
                           [](const PutAnswer& a) {
                             throw_answer(a.answer);
                             return a.puts;
                           }));
    }
    when_all<std::vector<Put>>(
        std::move(stored), [self, b, next](std::vector<Outcome<std::vector<Put>>> done) {
          std::exception_ptr failure;
          for (auto& d : done) {
            if (d.error && !failure) failure = d.error;
          }
          if (failure) {
            for (std::size_t s = 0; s < done.size(); ++s) {
              if (!done[s].value) continue;
              std::vector<std::string> keys;
              for (const std::size_t i : b->at[s]) keys.push_back(b->items[i].key);
              self.volumes_[b->volumes[s]].send(&Volume::undo, keys, *done[s].value);
            }
            return next->set_exception(failure);
          }
          std::vector<Put> out(b->items.size());
          for (std::size_t s = 0; s < done.size(); ++s) {
            for (std::size_t j = 0; j < b->at[s].size(); ++j)
              out[b->at[s][j]] = (*done[s].value)[j];
          }
          next->set_value(std::move(out));
        });
  });
  return Future<std::vector<Put>>(std::move(next));
}

Future<Got> Store::get(const std::string& key, const GetOptions& options) const {
  auto next = std::make_shared<baton::detail::State<Got>>();
  fetch(key, options, std::nullopt, {}, next);
  return Future<Got>(std::move(next));
}

Future<Got> Store::get_into(const std::string& key, std::span<std::byte> destination,
                            const GetOptions& options, const std::string& dtype) const {
  auto next = std::make_shared<baton::detail::State<Got>>();
  fetch(key, options, destination, dtype, next);
  return Future<Got>(std::move(next));
}

namespace {

/// Why `into` cannot take what `got` describes ("" if it can).
std::string unfit(const std::string& key, const Got& got, std::span<std::byte> into,
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

}  // namespace

void Store::fetch(const std::string& key, const GetOptions& options,
                  std::optional<std::span<std::byte>> into, const std::string& dtype,
                  const std::shared_ptr<baton::detail::State<Got>>& next) const {
  auto self = *this;
  const std::vector<GetItem> items{GetItem{key, options.version, options.box}};
  probe<GetAnswer>(
      volumes_, home(key),
      [items](const ActorRef<Volume>& v) {
        return v.call(&Volume::get, detail::via(items, v.id()));
      },
      [](const GetAnswer& a) { return a.answer.code != Code::missing; },
      [self, key, into, dtype, next](std::optional<GetAnswer> a, const std::string& lost) {
        const bool found = a && a->answer.code != Code::missing;
        if (!found && !lost.empty()) {
          return next->set_exception(lost_error("get of '" + key + "'", lost));
        }
        if (!found) return self.not_found(key, a->answer.message, next);
        if (a->answer.code == Code::too_big) {
          return self.read_pieces(key, std::move(a->got.at(0)), into, dtype, next);
        }
        settle(next, [&] {
          throw_answer(a->answer);
          Got& got = a->got.at(0);
          if (into) {
            if (std::string why = unfit(key, got, *into, dtype); !why.empty()) {
              throw StoreError(why);
            }
            std::memcpy(into->data(), got.data.data(), got.data.size());
          }
          return std::move(got);
        });
      });
}

void Store::read_pieces(const std::string& key, Got meta, std::optional<std::span<std::byte>> into,
                        const std::string& dtype,
                        const std::shared_ptr<baton::detail::State<Got>>& next) const {
  const auto total = static_cast<std::size_t>(meta.box.elements()) * meta.info.element;
  std::shared_ptr<std::byte[]> owned;
  if (into) {
    if (std::string why = unfit(key, meta, *into, dtype); !why.empty()) {
      return next->set_exception(std::make_exception_ptr(StoreError(why)));
    }
  } else {
    owned.reset(new std::byte[total]);  // not zeroed: every byte is read into it
    into = std::span<std::byte>(owned.get(), total);
  }
  // Pieces of whole rows (of dimension 0), each at most kPieceBytes, each contiguous both in
  // the box and in the destination; all of the version the first answer named.
  const std::size_t row = total / static_cast<std::size_t>(meta.box.sizes.at(0));
  const auto rows = static_cast<std::int64_t>(std::max<std::size_t>(1, detail::kPieceBytes / row));
  // Two at a time: what a piece holds on the way (a slab mapped, or copied) stays bounded.
  const auto count = static_cast<std::size_t>((meta.box.sizes[0] + rows - 1) / rows);
  auto self = *this;
  auto step = [self, key, box = meta.box, version = meta.version, rows, row, dst = *into,
               dtype](std::size_t i) {
    Box piece = box;
    const std::int64_t first = static_cast<std::int64_t>(i) * rows;
    piece.offsets[0] += first;
    piece.sizes[0] = std::min(rows, box.sizes[0] - first);
    const std::span<std::byte> at = dst.subspan(static_cast<std::size_t>(first) * row,
                                                static_cast<std::size_t>(piece.sizes[0]) * row);
    return self.get_into(key, at, GetOptions{version, piece}, dtype);
  };
  windowed<Got>(
      count, 2, step,
      [meta = std::move(meta), owned, total, next](std::vector<Outcome<Got>> done) mutable {
        settle(next, [&] {
          for (auto& d : done) {
            if (d.error) std::rethrow_exception(d.error);
          }
          if (owned) meta.data = Bytes::view(owned, owned.get(), total);
          return std::move(meta);
        });
      });
}

void Store::not_found(const std::string& key, const std::string& message,
                      const std::shared_ptr<baton::detail::State<Got>>& next) const {
  // Names the keys sorted nearest to it, from every volume that answers.
  std::vector<Future<std::vector<std::string>>> asked;
  asked.reserve(volumes_.size());
  for (const auto& vol : volumes_) asked.push_back(vol.call(&Volume::nearest, key));
  when_all<std::vector<std::string>>(
      std::move(asked), [key, message, next](std::vector<Outcome<std::vector<std::string>>> all) {
        std::vector<std::string> near;
        for (auto& o : all) {
          if (o.value) near.insert(near.end(), o.value->begin(), o.value->end());
        }
        auto common = [&](const std::string& k) {
          return std::mismatch(k.begin(), k.end(), key.begin(), key.end()).first - k.begin();
        };
        std::sort(near.begin(), near.end(), [&](const std::string& a, const std::string& b) {
          return common(a) != common(b) ? common(a) > common(b) : a < b;
        });
        near.erase(std::unique(near.begin(), near.end()), near.end());
        if (near.size() > 3) near.resize(3);
        std::string names;
        for (const auto& k : near) names += (names.empty() ? "'" : ", '") + k + "'";
        next->set_exception(std::make_exception_ptr(KeyNotFound(
            message + (names.empty() ? " (the store holds no key)" : "; nearest keys: " + names))));
      });
}

Future<std::vector<Got>> Store::get_batch(const std::vector<std::string>& keys) const {
  // By volume, in groups of at most kItemsPerMessage keys: one message each way per group. A
  // group that does not come back whole (a key missing, a volume lost) is asked again key by
  // key, which says precisely what is wrong.
  struct Group {
    std::size_t volume = 0;
    std::vector<std::size_t> at;
  };
  std::map<std::size_t, std::vector<std::size_t>> by_volume;
  for (std::size_t i = 0; i < keys.size(); ++i) by_volume[home(keys[i])].push_back(i);
  std::vector<Group> groups;
  for (auto& [v, at] : by_volume) {
    for (std::size_t first = 0; first < at.size(); first += detail::kItemsPerMessage) {
      const std::size_t last = std::min(at.size(), first + detail::kItemsPerMessage);
      groups.push_back({v,
                        {at.begin() + static_cast<std::ptrdiff_t>(first),
                         at.begin() + static_cast<std::ptrdiff_t>(last)}});
    }
  }
  auto self = *this;
  std::vector<Future<std::vector<Got>>> each;
  each.reserve(groups.size());
  for (const Group& g : groups) {
    std::vector<GetItem> items;
    items.reserve(g.at.size());
    for (const std::size_t i : g.at) items.push_back(GetItem{keys[i], std::nullopt, std::nullopt});
    auto one = std::make_shared<baton::detail::State<std::vector<Got>>>();
    when(volumes_[g.volume].call(&Volume::get,
                                 detail::via(std::move(items), volumes_[g.volume].id())),
         [self, keys, at = g.at, one](Outcome<GetAnswer> o) {
           if (!o.error && o.value->answer.code == Code::ok)
             return one->set_value(std::move(o.value->got));
           std::vector<Future<Got>> singly;
           singly.reserve(at.size());
           for (const std::size_t i : at) singly.push_back(self.get(keys[i]));
           when_all<Got>(std::move(singly), [one](std::vector<Outcome<Got>> all) {
             settle(one, [&] {
               std::vector<Got> out;
               out.reserve(all.size());
               for (auto& x : all) {
                 if (x.error) std::rethrow_exception(x.error);
                 out.push_back(std::move(*x.value));
               }
               return out;
             });
           });
         });
    each.push_back(Future<std::vector<Got>>(std::move(one)));
  }
  auto next = std::make_shared<baton::detail::State<std::vector<Got>>>();
  when_all<std::vector<Got>>(
      std::move(each), [next, groups, n = keys.size()](std::vector<Outcome<std::vector<Got>>> all) {
        settle(next, [&] {
          std::vector<Got> out(n);
          for (std::size_t g = 0; g < all.size(); ++g) {
            if (all[g].error) std::rethrow_exception(all[g].error);
            for (std::size_t j = 0; j < groups[g].at.size(); ++j) {
              out[groups[g].at[j]] = std::move((*all[g].value)[j]);
            }
          }
          return out;
        });
      });
  return Future<std::vector<Got>>(std::move(next));
}

Future<bool> Store::exists(const std::string& key) const {
  auto next = std::make_shared<baton::detail::State<bool>>();
  probe<bool>(
      volumes_, home(key),
      [key](const ActorRef<Volume>& v) { return v.call(&Volume::exists, key); },
      [](const bool& b) { return b; },
      // A key whose volume is lost is not there any more.
      [next](std::optional<bool> b, const std::string&) { next->set_value(b.value_or(false)); });
  return Future<bool>(std::move(next));
}

Future<std::vector<std::string>> Store::keys(const std::string& prefix) const {
  std::vector<Future<std::vector<std::string>>> each;
  each.reserve(volumes_.size());
  for (const auto& v : volumes_) each.push_back(v.call(&Volume::keys, prefix));
  auto next = std::make_shared<baton::detail::State<std::vector<std::string>>>();
  when_all<std::vector<std::string>>(std::move(each),
                                     [next](std::vector<Outcome<std::vector<std::string>>> all) {
                                       // The keys of a lost volume are not there any more.
                                       std::vector<std::string> out;
                                       for (auto& o : all) {
                                         if (o.value)
                                           out.insert(out.end(), o.value->begin(), o.value->end());
                                       }
                                       std::sort(out.begin(), out.end());
                                       next->set_value(std::move(out));
                                     });
  return Future<std::vector<std::string>>(std::move(next));
}

Future<void> Store::erase(const std::string& key) const {
  // From every volume the key may be on: its home, and past lost ones.
  auto next = std::make_shared<baton::detail::State<void>>();
  probe<std::monostate>(
      volumes_, home(key),
      [key](const ActorRef<Volume>& v) {
        return v.call(&Volume::erase, key).then([] { return std::monostate{}; });
      },
      [](const std::monostate&) { return false; },
      [next](std::optional<std::monostate>, const std::string&) { next->set_value(); });
  return Future<void>(std::move(next));
}

Future<std::optional<std::uint64_t>> Store::latest_version(const std::string& key) const {
  using Latest = std::optional<std::uint64_t>;
  auto next = std::make_shared<baton::detail::State<Latest>>();
  probe<Latest>(
      volumes_, home(key),
      [key](const ActorRef<Volume>& v) { return v.call(&Volume::latest, key); },
      [](const Latest& n) { return n.has_value(); },
      [next](std::optional<Latest> n, const std::string&) {
        next->set_value(n.value_or(std::nullopt));
      });
  return Future<Latest>(std::move(next));
}

Future<std::vector<VolumeStats>> Store::stats() const {
  std::vector<Future<VolumeStats>> each;
  each.reserve(volumes_.size());
  for (const auto& v : volumes_) {
    each.push_back(ask(v, v.call(&Volume::stats), "stats", [](VolumeStats s) { return s; }));
  }
  auto next = std::make_shared<baton::detail::State<std::vector<VolumeStats>>>();
  when_all<VolumeStats>(std::move(each), [next](std::vector<Outcome<VolumeStats>> all) {
    settle(next, [&] {
      std::vector<VolumeStats> out;
      for (auto& o : all) {
        if (o.error) std::rethrow_exception(o.error);
        out.push_back(std::move(*o.value));
      }
      return out;
    });
  });
  return Future<std::vector<VolumeStats>>(std::move(next));
}

}  // namespace baton::store
