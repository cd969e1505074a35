// `baton-bench ddp`: examples/ddp_train's samples/s per trainer (2 trainers, data-parallel
// through baton) against the same training in one plain libtorch process, in the same run: the
// scaling efficiency.

#include <unistd.h>

#include <array>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "figures.hpp"

namespace baton::bench {
namespace {

/// The number after `marker` in what `command` printed; throws with its output if none.
double figure_of(const std::string& command, const std::string& marker) {
  FILE* out = ::popen(command.c_str(), "r");
  if (out == nullptr) throw std::runtime_error("cannot run " + command);
  std::string text;
  std::array<char, 4096> buf{};
  while (std::fgets(buf.data(), buf.size(), out) != nullptr) text += buf.data();
  const int status = ::pclose(out);
  const auto at = text.rfind(marker);
  if (status != 0 || at == std::string::npos) {
    throw std::runtime_error(command + " failed:\n" + text);
  }
  return std::stod(text.substr(at + marker.size()));
}

}  // namespace

int run_ddp() {
  char self[PATH_MAX] = {};
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  const auto ddp = std::filesystem::path(std::string(self, n > 0 ? static_cast<std::size_t>(n) : 0))
                       .parent_path() /
                   "ddp_train";
  if (!std::filesystem::exists(ddp)) {
    std::fprintf(stderr, "baton-bench ddp: no %s (it is built where libtorch is: libtorch-dev)\n",
                 ddp.c_str());
    return 1;
  }
  const std::string common = ddp.string() + " --epochs 10 --min-accuracy 0 2>/dev/null";
  const double ours = figure_of(common + " --trainers 2", "ddp_train: ");
  const double plain = figure_of(common + " --plain 1", "plain single-process libtorch: ");
  print_figure("ddp_samples_per_s_per_trainer", ours, "samples/s");
  print_figure("plain_libtorch_samples_per_s", plain, "samples/s");
  print_figure("ddp_scaling_efficiency", ours / plain, "x");
  return 0;
}

}  // namespace baton::bench
