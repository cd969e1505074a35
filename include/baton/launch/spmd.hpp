#pragma once

// SPMD programs as they are: an existing torchrun-style program (a torch.distributed script, or
// any executable) run once on every proc of a mesh, with the environment torchrun gives it.

#include <cstdint>
#include <string>
#include <vector>

#include "baton/actor/future.hpp"
#include "baton/mesh/proc_mesh.hpp"

namespace baton {

struct SpmdOptions {
  std::vector<std::string> argv;  // the program (looked up on PATH) and its arguments
  std::vector<std::string> env;   // more "NAME=value" entries, on every rank
  std::uint16_t master_port = 0;  // 0: a port free on rank 0's host when it starts
};

/// Runs `options.argv` on every proc of `procs` (one process each, a child of the proc, in its
/// working directory), with RANK (the proc's rank), LOCAL_RANK and LOCAL_WORLD_SIZE (within its
/// host: the "hosts" dimension, if the mesh has one), WORLD_SIZE, MASTER_ADDR and MASTER_PORT
/// (rank 0's host and a free port there) set. What each prints is forwarded as the proc's own
/// output, naming it. The future holds each rank's exit status, by rank (128 + the signal if
/// one killed it); a rank that exits non-zero or is killed is also reported through supervision,
/// naming it, the program and how it ended. If a proc dies first, the future fails saying so.
Future<std::vector<int>> run_spmd(const ProcMesh& procs, const SpmdOptions& options);

}  // namespace baton
