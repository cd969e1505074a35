// slurm_cluster: holds a one-node Slurm cluster up (slurm_cluster.test.hpp) for tests written in
// another language. Prints "SLURM_CONF=<path>" once the node is idle, and keeps the cluster until
// its standard input ends (the test closes it, or dies); then stops the daemons.

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "launch/slurm_cluster.test.hpp"

int main() {
  try {
    const baton::test::SlurmCluster cluster;
    std::printf("SLURM_CONF=%s\n", std::getenv("SLURM_CONF"));
    std::fflush(stdout);
    char buf[256];
    while (::read(STDIN_FILENO, buf, sizeof buf) > 0) {
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "slurm_cluster: cannot start a one-node Slurm cluster: %s\n", e.what());
    return 1;
  }
  return 0;
}
