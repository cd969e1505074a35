#pragma once

// Internal: the cores this process may use.

#include <cstddef>

namespace baton::wire {

/// The cores the calling thread may run on: its affinity mask, which taskset, a scheduler's CPU
/// binding (Slurm's --cpu-bind) or a container's cpuset narrows, not the machine's online cores
/// (std::thread::hardware_concurrency). At least 1.
std::size_t usable_cpus();

}  // namespace baton::wire
