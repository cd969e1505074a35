#pragma once

// Internal: waiting for several replies asked at once, each until one shared deadline. Whoever
// looks inside the job (the admin API, stall reports, a broken collective) asks every proc or
// rank at once, then takes what came in time and names what did not.

#include <algorithm>
#include <chrono>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "baton/actor/future.hpp"

namespace baton::detail {

/// Waits for each future of `asked` (each beside what names it) until one deadline, `wait` from
/// now: `took(name, value)` for each answer, `failed(name, why)` for each that failed or did
/// not come in time (or whose `took` threw).
template <class Name, class T, class Took, class Failed>
void wait_all(std::vector<std::pair<Name, Future<T>>>& asked,
              std::chrono::steady_clock::duration wait, Took&& took, Failed&& failed) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  for (auto& [name, reply] : asked) {
    try {
      const auto left = std::max(std::chrono::steady_clock::duration::zero(),
                                 deadline - std::chrono::steady_clock::now());
      took(name, std::move(reply).get(left));
    } catch (const std::exception& e) {
      failed(name, std::string(e.what()));
    }
  }
}

}  // namespace baton::detail
