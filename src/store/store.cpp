// The tensor store's handle (see store.hpp): which volume a key lives on, and each operation as
// calls to volumes, their answers and failures turned into StoreErrors that name the key.

#include "baton/store/store.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <variant>

#include "baton/mesh/actor_mesh.hpp"
#include "store/client.hpp"
#include "store/volume.hpp"

namespace baton::store {

std::string TensorInfo::to_string() const {
  std::string out = (dtype.empty() ? "bytes" : dtype) + "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    out += (i > 0 ? ", " : "") + std::to_string(shape[i]);
  }
  return out + "]";
}

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
          return uploading<PutAnswer>(*items, v, [v](std::vector<PutItem> sent) {
            return v.call(&Volume::put, std::move(sent));
          });
        },
        [](const PutAnswer&) { return true; },
        [one, key](std::optional<PutAnswer> a, const std::string& lost, std::size_t) {
          if (!a) return one->set_exception(lost_error("put of '" + key + "'", lost));
          settle(one, [&] {
            throw_answer(a->answer);
            return a->puts.at(0);
          });
        });
    return Future<Put>(std::move(one));
  };
  if (pieces.size() == 1) return send(std::move(pieces.front()));
  // Two pieces at a time: what each holds on the way (a slab, an upload) stays bounded.
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

Future<Put> Store::put(const std::string& key, std::span<const std::byte> value,
                       const TensorInfo& info, const PutOptions& options) const {
  Bytes copy;
  try {
    copy = gpu::api().is_device(value.data())
               ? Bytes::make(value.size(),
                             [&](std::span<std::byte> b) {
                               gpu::api().copy(b.data(), value.data(), b.size());
                             })
               : Bytes::copy(value.data(), value.size());
  } catch (const gpu::GpuError& e) {
    auto failed = std::make_shared<baton::detail::State<Put>>();
    failed->set_exception(std::make_exception_ptr(
        StoreError("put of '" + key + "': its device memory could not be read: " + e.what())));
    return Future<Put>(std::move(failed));
  }
  return put(key, std::move(copy), info, options);
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

void Store::fetch(const std::string& key, const GetOptions& options,
                  std::optional<std::span<std::byte>> into, const std::string& dtype,
                  const std::shared_ptr<baton::detail::State<Got>>& next) const {
  auto self = *this;
  const std::vector<GetItem> items{GetItem{key, options.version, options.box}};
  // Large bytes into memory of ours are asked for one-sided, except from a volume in this process
  // (whose answer shares its bytes); the volume answers with a memfd instead where it has one
  // and we share memory with it.
  const bool lease = into && into->size() >= detail::kLeaseBytes;
  probe<GetAnswer>(
      volumes_, home(key),
      [items, lease](const ActorRef<Volume>& v) {
        std::vector<GetItem> asked = detail::via(items, v.id());
        asked[0].lease = lease && asked[0].via != "in-process";
        return v.call(&Volume::get, std::move(asked));
      },
      [](const GetAnswer& a) { return a.answer.code != Code::missing; },
      [self, key, options, into, dtype, next](std::optional<GetAnswer> a, const std::string& lost,
                                              std::size_t at) {
        const bool found = a && a->answer.code != Code::missing;
        if (!found && !lost.empty()) {
          return next->set_exception(lost_error("get of '" + key + "'", lost));
        }
        if (!found) return self.not_found(key, a->answer.message, next);
        if (a->answer.code == Code::leased && a->lease) {
          return self.read_leased(key, options, *a->lease, self.volumes_[at], into, dtype, next);
        }
        if (a->answer.code == Code::too_big) {
          return self.read_pieces(key, std::move(a->got.at(0)), into, dtype, next);
        }
        settle(next, [&] {
          throw_answer(a->answer);
          return delivered(key, std::move(a->got.at(0)), into, dtype);
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

Future<bool> Store::exists(const std::string& key) const {
  auto next = std::make_shared<baton::detail::State<bool>>();
  probe<bool>(
      volumes_, home(key),
      [key](const ActorRef<Volume>& v) { return v.call(&Volume::exists, key); },
      [](const bool& b) { return b; },
      // A key whose volume is lost is not there any more.
      [next](std::optional<bool> b, const std::string&, std::size_t) {
        next->set_value(b.value_or(false));
      });
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
      [next](std::optional<std::monostate>, const std::string&, std::size_t) {
        next->set_value();
      });
  return Future<void>(std::move(next));
}

Future<std::optional<std::uint64_t>> Store::latest_version(const std::string& key) const {
  using Latest = std::optional<std::uint64_t>;
  auto next = std::make_shared<baton::detail::State<Latest>>();
  probe<Latest>(
      volumes_, home(key),
      [key](const ActorRef<Volume>& v) { return v.call(&Volume::latest, key); },
      [](const Latest& n) { return n.has_value(); },
      [next](std::optional<Latest> n, const std::string&, std::size_t) {
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
