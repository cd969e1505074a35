#pragma once

// Internal: files that travel to other hosts (see files.cpp).

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace baton::internal {

/// The SHA-256 of a file's bytes, in hex; nullopt if it cannot be read.
std::optional<std::string> sha256_file(const std::filesystem::path& path);
/// Whether `hash` is 64 lowercase hex digits.
bool is_sha256(std::string_view hash);
/// What `fd` gives until its end, or until more than `limit` bytes came (a pipe from a child,
/// or a file); the caller closes `fd`.
std::string read_fd(int fd, std::size_t limit);

/// Files named by their SHA-256 in a directory only this user may enter. A file is checked
/// against its name before each use; one that fails is removed, never used.
class FileCache {
 public:
  explicit FileCache(std::filesystem::path dir);
  const std::filesystem::path& dir() const { return dir_; }

  /// The path of the file with this hash, checked; nullopt, with `why`, if there is none
  /// (a copy that failed its check is removed).
  std::optional<std::filesystem::path> find(const std::string& hash, std::string& why);
  /// Keeps `bytes` as the file `hash` (executable), after checking them; throws if they do not
  /// hash to it.
  std::filesystem::path add(const std::string& hash, const std::string& bytes);

 private:
  std::filesystem::path dir_;
};

}  // namespace baton::internal
