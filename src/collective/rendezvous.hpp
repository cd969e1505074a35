#pragma once

// Internal: where a group's ranks meet. The group's Store actor lives in the controller; each
// rank's Gloo rendezvous (and the small exchange's ports, NCCL's id) go through it with baton's
// own messages.

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "baton/actor/actor.hpp"
#include "baton/actor/proc.hpp"

namespace baton::collective {

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

/// Gloo's view of the group's Store actor: calls from the rank's own thread, never an actor's.
/// (Inside it, `Store` is Gloo's base class: the actor is collective::Store.)
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

}  // namespace baton::collective
