#pragma once

// Test helper: how many slabs this process holds.

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <string>

namespace baton::wire {

/// Mappings of slabs in this process (memfds named baton-bytes), and descriptors of them.
inline std::size_t slabs_here() {
  std::size_t n = 0;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    if (line.find("/memfd:baton-bytes") != std::string::npos) ++n;
  }
  std::error_code ec;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    std::error_code rec;
    if (std::filesystem::read_symlink(fd.path(), rec).string().find("memfd:baton-bytes") !=
        std::string::npos) {
      ++n;
    }
  }
  return n;
}

}  // namespace baton::wire
