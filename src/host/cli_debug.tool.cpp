// `baton debug`: the Python actors of a job paused in breakpoint(), listed by mesh and rank, and
// a pdb prompt for one of them, through the admin API's /api/debug.

#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "host/cli_client.hpp"

namespace baton::cli {
namespace {

using nlohmann::json;

struct Paused {
  std::string proc;
  std::uint64_t session = 0;
  std::string actor;
  std::string mesh;
  std::size_t rank = 0;
  std::string where;
  double paused_s = 0;
};

std::vector<Paused> paused(const Target& t) {
  std::vector<Paused> out;
  for (const auto& j : json::parse(get(t, "/api/debug"))) {
    out.push_back({j.at("proc").get<std::string>(), j.at("session").get<std::uint64_t>(),
                   j.at("actor").get<std::string>(), j.at("mesh").get<std::string>(),
                   j.at("rank").get<std::size_t>(), j.at("where").get<std::string>(),
                   j.at("paused_s").get<double>()});
  }
  return out;
}

void print_paused(const std::vector<Paused>& list) {
  if (list.empty()) {
    std::cout << "no actor is paused in breakpoint()\n";
    return;
  }
  std::cout << list.size() << (list.size() == 1 ? " actor" : " actors")
            << " paused in breakpoint():\n";
  std::string mesh;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const Paused& p = list[i];
    if (i == 0 || p.mesh != mesh) std::cout << "  mesh " << p.mesh << "\n";
    mesh = p.mesh;
    std::cout << "    " << i << "  rank " << p.rank << "  " << p.actor << "  at " << p.where
              << "  (paused " << static_cast<long>(p.paused_s) << " s)\n";
  }
}

struct Reply {
  std::string output;
  std::string state;
};

/// Sends `line` (if any) to the paused actor's pdb; what it wrote, and its state after.
Reply exchange(const Target& t, const Paused& p, const std::optional<std::string>& line) {
  std::string path =
      "/api/debug/input?proc=" + url_encoded(p.proc) + "&session=" + std::to_string(p.session);
  if (line) path += "&line=" + url_encoded(*line);
  const json r = json::parse(request(t, "POST", path));
  return {r.at("output").get<std::string>(), r.at("state").get<std::string>()};
}

std::string trimmed(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  const auto e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

/// A pdb prompt for `p` until it is continued (or its endpoint returns), or `detach`.
void attach(const Target& t, const Paused& p) {
  std::cout << "attached to " << p.actor << " (mesh " << p.mesh << ", rank " << p.rank
            << "): pdb's commands; 'detach' leaves it paused\n";
  try {
    Reply r = exchange(t, p, std::nullopt);
    if (r.state == "paused" && r.output.empty()) r.output = "> " + p.where + "\n(Pdb) ";
    for (;;) {
      std::cout << r.output << std::flush;
      if (r.state == "ended") {
        std::cout << "\n" << p.actor << " runs on\n";
        return;
      }
      if (r.state == "running") {
        r = exchange(t, p, std::nullopt);  // waits up to half a second on the job's side
        continue;
      }
      std::string line;
      if (!std::getline(std::cin, line) || trimmed(line) == "detach") {
        std::cout << "\ndetached: " << p.actor << " stays paused\n";
        return;
      }
      r = exchange(t, p, line);
    }
  } catch (const Failure& e) {
    std::cout << "\n" << p.actor << " is no longer paused (" << e.what() << ")\n";
  }
}

std::optional<Paused> pick(const std::vector<Paused>& list, const std::string& which) {
  for (std::size_t i = 0; i < list.size(); ++i) {
    if (which == std::to_string(i) || which == list[i].actor) return list[i];
  }
  return std::nullopt;
}

}  // namespace

int run_debug(const Target& t, bool list_only, bool as_json) {
  if (list_only) {
    if (as_json) {
      std::cout << get(t, "/api/debug");
    } else {
      print_paused(paused(t));
    }
    return 0;
  }
  std::vector<Paused> list = paused(t);
  print_paused(list);
  std::cout << "commands: list, attach N, continue [N] (all paused actors, or one), quit\n";
  for (;;) {
    std::cout << "(baton debug) " << std::flush;
    std::string line;
    if (!std::getline(std::cin, line)) break;
    std::istringstream words(line);
    std::string command;
    std::string arg;
    words >> command >> arg;
    if (command.empty()) continue;
    if (command == "quit" || command == "q" || command == "exit") break;
    if (command == "list" || command == "l" || command == "ls") {
      list = paused(t);
      print_paused(list);
    } else if (command == "attach" || command == "a") {
      const auto p = pick(list, arg);
      if (!p) {
        std::cout << "attach takes a number or an actor of the list ('list' shows it again)\n";
        continue;
      }
      attach(t, *p);
    } else if (command == "continue" || command == "c" || command == "cont") {
      std::vector<Paused> which;
      if (arg.empty()) {
        which = paused(t);
      } else if (const auto p = pick(list, arg)) {
        which.push_back(*p);
      } else {
        std::cout << "no paused actor " << arg << " ('list' shows them)\n";
        continue;
      }
      for (const auto& p : which) {
        try {
          (void)exchange(t, p, std::string("continue"));
          std::cout << p.actor << " runs on\n";
        } catch (const Failure& e) {
          std::cout << p.actor << ": " << e.what() << "\n";
        }
      }
      list = paused(t);
    } else {
      std::cout << "unknown command " << command
                << ": list, attach N, continue [N], quit (paused actors stay paused)\n";
    }
  }
  std::cout << "\n";
  return 0;
}

}  // namespace baton::cli
