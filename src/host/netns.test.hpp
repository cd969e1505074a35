#pragma once

// Test helper: hosts with addresses of their own on this machine, as network namespaces joined
// by a bridge (needs root and iproute2). Used by the namespace tests and `baton-bench hosts`.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "host/self_spawn.test.hpp"

namespace baton::test {

/// The `ip` program (iproute2).
inline std::string ip_program() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
    if (::access(p, X_OK) == 0) return p;
  }
  throw std::runtime_error("no `ip` program (Debian's iproute2; `make deps` installs it)");
}

/// Runs the program at `path` (called `name`) with `args`; throws with what it printed if it
/// fails.
inline void run_tool(const std::string& path, const std::string& name,
                     const std::vector<std::string>& args) {
  auto child = start_self_as(path, name, args, environment(), STDERR_FILENO);
  const std::string err = read_to_end(child.from);
  int status = 0;
  ::waitpid(child.pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string cmd = name;
    for (const auto& a : args) cmd += " " + a;
    throw std::runtime_error("`" + cmd + "` failed: " + err);
  }
}

/// Runs `ip args...`; throws with what it printed if it fails.
inline void ip(const std::vector<std::string>& args) {
  run_tool(ip_program(), "ip", args);
}

/// Whether `name` is a NetHosts name ("bt<pid>s<set>...") of a process that is gone.
inline bool of_a_dead_test(const std::string& name) {
  std::size_t end = 2;
  while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end])) != 0) ++end;
  if (!name.starts_with("bt") || end == 2 || end > 9 || end == name.size() || name[end] != 's') {
    return false;
  }
  return ::kill(static_cast<pid_t>(std::stol(name.substr(2, end - 2))), 0) != 0 && errno == ESRCH;
}

/// Removes the namespaces and bridges that a test killed before its cleanup left (a new set's
/// subnet may be a stale one's, whose routes would take its packets).
inline void remove_stale_net_hosts() {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/run/netns", ec)) {
    const std::string name = e.path().filename().string();
    if (!of_a_dead_test(name)) continue;
    try {
      ip({"netns", "del", name});
    } catch (const std::exception&) {
      // Another test removed it first.
    }
  }
  for (const auto& e : std::filesystem::directory_iterator("/sys/class/net", ec)) {
    const std::string name = e.path().filename().string();
    if (!name.ends_with("br") || !of_a_dead_test(name)) continue;
    try {
      ip({"link", "del", name});
    } catch (const std::exception&) {
      // Another test removed it first.
    }
  }
}

/// N hosts: network namespaces, each with one end of a veth pair whose other end is on a bridge
/// in this namespace, where the controller is. All of it is removed with the object.
class NetHosts {
 public:
  explicit NetHosts(std::size_t n) {
    remove_stale_net_hosts();
    // Names and a subnet of this process's own, new for each set (a namespace's interfaces
    // may outlive it for a moment in the kernel).
    static int sets = 0;
    const int id = static_cast<int>(::getpid());
    const int set = sets++;
    tag_ = "bt" + std::to_string(id) + "s" + std::to_string(set);
    subnet_ = "10." + std::to_string(77 + set % 100) + "." + std::to_string(id % 250) + ".";
    bridge_ = tag_ + "br";
    try {
      ip({"link", "add", bridge_, "type", "bridge"});
      made_bridge_ = true;
      ip({"addr", "add", subnet_ + "1/24", "dev", bridge_});
      ip({"link", "set", bridge_, "up"});
      for (std::size_t i = 0; i < n; ++i) {
        const std::string ns = tag_ + "h" + std::to_string(i);
        ip({"netns", "add", ns});
        namespaces_.push_back(ns);
        const std::string outside = tag_ + "v" + std::to_string(i);
        ip({"link", "add", outside, "type", "veth", "peer", "name", inside(i)});
        ip({"link", "set", inside(i), "netns", ns});
        ip({"link", "set", outside, "master", bridge_});
        ip({"link", "set", outside, "up"});
        ip({"netns", "exec", ns, "ip", "addr", "add", address(i) + "/24", "dev", inside(i)});
        ip({"netns", "exec", ns, "ip", "link", "set", inside(i), "up"});
        ip({"netns", "exec", ns, "ip", "link", "set", "lo", "up"});
      }
    } catch (...) {
      cleanup();
      throw;
    }
  }
  ~NetHosts() { cleanup(); }
  NetHosts(const NetHosts&) = delete;
  NetHosts& operator=(const NetHosts&) = delete;

  const std::string& ns(std::size_t i) const { return namespaces_.at(i); }
  std::string address(std::size_t i) const { return subnet_ + std::to_string(10 + i); }
  /// Limits what the network sends to host i to `rate` (tc's words: "16mbit"), as a slow link
  /// to it would.
  void throttle_to(std::size_t i, const std::string& rate) {
    std::string tc = ip_program();
    tc.replace(tc.rfind('/') + 1, std::string::npos, "tc");
    run_tool(tc, "tc",
             {"qdisc", "add", "dev", tag_ + "v" + std::to_string(i), "root", "tbf", "rate", rate,
              "burst", "64kb", "latency", "5s"});
  }
  /// Cuts host i off the network (its end of the link goes down), or brings it back.
  void set_link(std::size_t i, bool up) {
    ip({"netns", "exec", ns(i), "ip", "link", "set", inside(i), up ? "up" : "down"});
  }

 private:
  std::string inside(std::size_t i) const { return tag_ + "p" + std::to_string(i); }
  void cleanup() {
    for (std::size_t i = 0; i < namespaces_.size(); ++i) {
      try {
        ip({"link", "del", tag_ + "v" + std::to_string(i)});  // both ends of the pair, now
      } catch (const std::exception&) {
        // Not made yet.
      }
      try {
        ip({"netns", "del", namespaces_[i]});
      } catch (const std::exception& e) {
        std::fprintf(stderr, "cleanup: %s\n", e.what());
      }
    }
    namespaces_.clear();
    if (made_bridge_) {
      try {
        ip({"link", "del", bridge_});
      } catch (const std::exception& e) {
        std::fprintf(stderr, "cleanup: %s\n", e.what());
      }
      made_bridge_ = false;
    }
  }

  std::string tag_;
  std::string subnet_;
  std::string bridge_;
  bool made_bridge_ = false;
  std::vector<std::string> namespaces_;
};

}  // namespace baton::test
