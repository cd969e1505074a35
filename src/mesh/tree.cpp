// The fixed cast tree of a mesh, and the node of it each member's proc learns (CA-3).

#include <unistd.h>

#include <cstdlib>
#include <random>

#include "actor/node.hpp"
#include "mesh/cast_impl.hpp"

namespace baton::detail {
namespace cast_impl {

std::vector<std::pair<std::uint32_t, std::uint32_t>> split(std::size_t first, std::size_t end,
                                                           std::size_t fanout) {
  std::vector<std::pair<std::uint32_t, std::uint32_t>> out;
  const std::size_t rest = end - first;
  const std::size_t k = std::min(fanout, rest);
  for (std::size_t i = 0; i < k; ++i) {
    out.emplace_back(static_cast<std::uint32_t>(first + i * rest / k),
                     static_cast<std::uint32_t>(first + (i + 1) * rest / k));
  }
  return out;
}

namespace {

/// The host part of a member's address ("10.0.0.2" of "tcp://10.0.0.2:7000"); empty for
/// addresses on this host (unix sockets, in-process).
std::string_view host_of(std::string_view address) {
  constexpr std::string_view kTcp = "tcp://";
  if (!address.starts_with(kTcp)) return {};
  address.remove_prefix(kTcp.size());
  return address.substr(0, address.rfind(':'));
}

}  // namespace

std::vector<std::pair<std::uint32_t, std::uint32_t>> split_at_hosts(
    std::size_t first, std::size_t end, std::size_t host_fanout,
    const std::function<std::string_view(std::size_t)>& address_at) {
  // A range on one host (its ends on the same one: meshes are laid out host by host) is split
  // evenly. One on several is cut only where the host changes, so that a cast enters each host
  // once: one chunk a host, or, with more hosts than the fan-out, runs of whole hosts.
  if (end - first < 2 || host_of(address_at(first)) == host_of(address_at(end - 1))) {
    return split(first, end, host_fanout);
  }
  std::vector<std::size_t> starts{first};  // where each host's run begins
  for (std::size_t i = first + 1; i < end; ++i) {
    if (host_of(address_at(i)) != host_of(address_at(i - 1))) starts.push_back(i);
  }
  starts.push_back(end);
  const std::size_t hosts = starts.size() - 1;
  const std::size_t k = std::min(kCastFanOut, hosts);
  std::vector<std::pair<std::uint32_t, std::uint32_t>> out;
  out.reserve(k);
  for (std::size_t i = 0; i < k; ++i) {
    out.emplace_back(static_cast<std::uint32_t>(starts[i * hosts / k]),
                     static_cast<std::uint32_t>(starts[(i + 1) * hosts / k]));
  }
  return out;
}

std::vector<std::pair<std::uint32_t, std::uint32_t>> root_split(const std::vector<CastMember>& base,
                                                                std::size_t host_fanout) {
  return split_at_hosts(0, base.size(), host_fanout,
                        [&](std::size_t loc) -> std::string_view { return base[loc].address; });
}

}  // namespace cast_impl

using cast_impl::split_at_hosts;

std::vector<CastNode> cast_tree(const std::vector<CastMember>& base, std::size_t host_fanout) {
  std::vector<CastNode> nodes(base.size());
  std::vector<std::pair<std::uint32_t, std::uint32_t>> todo =
      cast_impl::root_split(base, host_fanout);
  while (!todo.empty()) {
    auto [loc, end] = todo.back();
    todo.pop_back();
    CastNode& n = nodes[loc];
    n.loc = loc;
    n.end = end;
    n.self = base[loc];
    n.below.assign(base.begin() + loc + 1, base.begin() + end);
    n.host_fanout = static_cast<std::uint32_t>(host_fanout);
    for (auto c : split_at_hosts(loc + 1, end, host_fanout, [&](std::size_t i) -> std::string_view {
           return base[i].address;
         })) {
      todo.push_back(c);
    }
  }
  return nodes;
}

std::vector<CastChild> children_of(const CastNode& node) {
  std::vector<CastChild> out;
  const auto address_at = [&](std::size_t loc) -> std::string_view {
    return node.below.at(loc - node.loc - 1).address;
  };
  for (auto [b, e] : split_at_hosts(node.loc + 1, node.end, node.host_fanout, address_at)) {
    out.push_back({b, e, node.below.at(b - node.loc - 1)});
  }
  return out;
}

void learn_cast_node(Proc& proc, std::uint64_t key, CastNode node) {
  auto children = children_of(node);
  auto known = std::make_shared<const cast_impl::KnownNode>(
      cast_impl::KnownNode{std::move(node), std::move(children)});
  auto table = state_of(proc).extension<cast_impl::NodeTable>();
  std::lock_guard lock(table->mu);
  table->by_key[key] = std::move(known);
}

void forget_cast_node(Proc& proc, std::uint64_t key) {
  auto table = state_of(proc).extension<cast_impl::NodeTable>();
  std::optional<ActorId> member;
  {
    std::lock_guard lock(table->mu);
    auto it = table->by_key.find(key);
    if (it == table->by_key.end()) return;
    member = it->second->node.self.actor;
    table->by_key.erase(it);
  }
  // The whole mesh is gone: its member here need not be remembered as ended any more.
  state_of(proc).forget_ended(*member);
}

std::size_t cast_nodes_known(Proc& proc) {
  auto table = state_of(proc).extension<cast_impl::NodeTable>();
  std::lock_guard lock(table->mu);
  return table->by_key.size();
}

namespace {
// The node's: unique in this process while the node lives; the process id and a random seed
// keep keys from different spawners (the controller, actors in workers, a later runtime of the
// same process) apart.
struct MeshKeys {
  std::atomic<std::uint64_t> next{0};
  const std::uint64_t seed = std::random_device{}() ^ (std::uint64_t(::getpid()) << 32);
};
}  // namespace

std::uint64_t new_mesh_key() {
  auto node = node_here();
  if (!node) throw UsageError("a mesh needs a proc in this process: create a Runtime first");
  auto keys = node->extension<MeshKeys>();
  return (keys->seed * 0x9E3779B97F4A7C15ULL) ^ keys->next.fetch_add(1, std::memory_order_relaxed);
}

std::uint32_t cast_host_fanout_from_env() {
  const char* v = std::getenv("BATON_CAST_HOST_FANOUT");
  if (v == nullptr || *v == '\0') return kCastHostFanOut;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < 2 || n > static_cast<long>(kCastHostFanOut)) {
    throw UsageError("BATON_CAST_HOST_FANOUT=" + std::string(v) +
                     " is not a fan-out: give a whole number from 2 to " +
                     std::to_string(kCastHostFanOut) +
                     " (how many members of one host a node of a cast sends to directly; " +
                     std::to_string(kCastHostFanOut) + " when unset)");
  }
  return static_cast<std::uint32_t>(n);
}

}  // namespace baton::detail
