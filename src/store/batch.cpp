// The tensor store's batches (see store.hpp): put_batch, all or nothing, and get_batch, each in
// groups of at most kItemsPerMessage items, one message to a volume per group.

#include <map>
#include <memory>

#include "baton/store/store.hpp"
#include "store/client.hpp"
#include "store/volume.hpp"

namespace baton::store {

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
  // volume is lost in between, what the others stored is undone. A group whose volume is lost
  // before its check goes to the next volume that answers, as a put's key does (and a get's
  // search follows it there).
  std::vector<Future<int>> checks;
  for (std::size_t s = 0; s < b->volumes.size(); ++s) {
    auto checked = std::make_shared<baton::detail::State<int>>();
    probe<Answer>(
        volumes_, b->volumes[s],
        [items = checks_of(s)](const ActorRef<Volume>& v) { return v.call(&Volume::check, items); },
        [](const Answer&) { return true; },
        [b, s, checked](std::optional<Answer> a, const std::string& lost, std::size_t at) {
          if (!a) return checked->set_exception(lost_error("put_batch", lost));
          b->volumes[s] = at;  // the group goes to the volume that answered
          settle(checked, [&] {
            throw_answer(*a);
            return 0;
          });
        });
    checks.push_back(Future<int>(std::move(checked)));
  }
  auto self = *this;
  when_all<int>(std::move(checks), [self, b, mine, next](const std::vector<Outcome<int>>& checked) {
    for (const auto& c : checked) {
      if (c.error) return next->set_exception(c.error);
    }
    std::vector<Future<std::vector<Put>>> stored;
    for (std::size_t s = 0; s < b->volumes.size(); ++s) {
      const ActorRef<Volume>& v = self.volumes_[b->volumes[s]];
      auto put = uploading<PutAnswer>(mine(s), v, [v](std::vector<PutItem> sent) {
        return v.call(&Volume::put, std::move(sent));
      });
      stored.push_back(ask(v, std::move(put), "put_batch", [](const PutAnswer& a) {
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

}  // namespace baton::store
