// The members of actor meshes that this process spawned, by proc: who hears of them when
// their proc dies (see ProcMesh::spawn).

#include <mutex>
#include <unordered_map>

#include "actor/node.hpp"
#include "mesh/hosted.hpp"

namespace baton::detail {
namespace {

struct Hosted {
  std::mutex mu;
  std::unordered_map<std::string, std::vector<HostedMember>> by_proc;
};
// The node's: gone with the runtime that spawned them.
std::shared_ptr<Hosted> hosted() {
  auto node = node_here();
  return node ? node->extension<Hosted>() : nullptr;
}

bool stopped(const HostedMember& m) {
  return !m.life || m.life->stopped(m.loc);
}

}  // namespace

void note_hosted(std::vector<HostedMember> members) {
  auto h = hosted();
  if (!h) return;  // no runtime here to hear of its procs
  std::lock_guard lock(h->mu);
  for (auto it = h->by_proc.begin(); it != h->by_proc.end();) {
    std::erase_if(it->second, stopped);
    it = it->second.empty() ? h->by_proc.erase(it) : std::next(it);
  }
  for (auto& m : members) {
    std::string proc = m.actor.proc.name;
    h->by_proc[proc].push_back(std::move(m));
  }
}

std::vector<HostedMember> take_hosted(const std::string& proc) {
  std::vector<HostedMember> out;
  {
    auto h = hosted();
    if (!h) return out;
    std::lock_guard lock(h->mu);
    auto it = h->by_proc.find(proc);
    if (it == h->by_proc.end()) return out;
    out = std::move(it->second);
    h->by_proc.erase(it);
  }
  std::erase_if(out, stopped);
  return out;
}

}  // namespace baton::detail
