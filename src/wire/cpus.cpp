#include "wire/cpus.hpp"

#include <sched.h>

#include <algorithm>
#include <thread>

namespace baton::wire {

std::size_t usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) {
    return static_cast<std::size_t>(std::max(1, CPU_COUNT(&set)));
  }
  return std::max(1U, std::thread::hardware_concurrency());
}

}  // namespace baton::wire
