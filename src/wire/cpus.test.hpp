#pragma once

// Tests: binding the calling thread to some of its cores, as taskset or a scheduler's CPU
// binding does to a whole process.

#include <sched.h>

#include <cstddef>

namespace baton::wire::testing {

/// Binds the calling thread to the first `n` of the cores it may run on now. False if the
/// kernel refused.
inline bool bind_to_cores(std::size_t n) {
  cpu_set_t mine;
  CPU_ZERO(&mine);
  if (::sched_getaffinity(0, sizeof(mine), &mine) != 0) return false;
  cpu_set_t bound;
  CPU_ZERO(&bound);
  std::size_t taken = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE && taken < n; ++cpu) {
    if (CPU_ISSET(cpu, &mine)) {
      CPU_SET(cpu, &bound);
      ++taken;
    }
  }
  return ::sched_setaffinity(0, sizeof(bound), &bound) == 0;
}

}  // namespace baton::wire::testing
