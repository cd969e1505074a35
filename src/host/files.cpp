// Files that travel to other hosts: their SHA-256, and the content-addressed cache an agent
// keeps them in (a file is named by its hash, and checked against it before every use).
#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include "host/files.hpp"

namespace baton::internal {

namespace {

using Digest = std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)>;

Digest sha256_start() {
  Digest ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr);
  return ctx;
}

std::string sha256_hex(EVP_MD_CTX* ctx) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx, md, &len);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < len; ++i) {
    hex += kHex[md[i] >> 4];
    hex += kHex[md[i] & 15];
  }
  return hex;
}

}  // namespace

std::string read_fd(int fd, std::size_t limit) {
  std::string text;
  char buf[4096];
  while (text.size() <= limit) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  return text;
}

std::optional<std::string> sha256_file(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  Digest ctx = sha256_start();
  std::vector<unsigned char> buf(std::size_t{1} << 20);
  bool ok = true;
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) ok = false;
    if (n <= 0) break;
    EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<std::size_t>(n));
  }
  ::close(fd);
  if (!ok) return std::nullopt;
  return sha256_hex(ctx.get());
}

bool is_sha256(std::string_view hash) {
  if (hash.size() != 64) return false;
  for (char c : hash) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

FileCache::FileCache(std::filesystem::path dir) : dir_(std::move(dir)) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec)
    throw std::runtime_error("cannot make the file cache " + dir_.string() + ": " + ec.message());
  ::chmod(dir_.c_str(), 0700);
}

std::optional<std::filesystem::path> FileCache::find(const std::string& hash, std::string& why) {
  if (!is_sha256(hash)) {
    why = "'" + hash.substr(0, 80) + "' is not a SHA-256 in hex";
    return std::nullopt;
  }
  const auto path = dir_ / hash;
  if (!std::filesystem::exists(path)) {
    why = "not in the cache";
    return std::nullopt;
  }
  const auto got = sha256_file(path);
  if (got != hash) {
    // Never run: a copy that changed since it was checked in is thrown away.
    std::error_code ignored;
    std::filesystem::remove(path, ignored);
    why = "the cached copy failed its hash check (it hashes to " + got.value_or("nothing") +
          ") and was removed";
    return std::nullopt;
  }
  return path;
}

std::filesystem::path FileCache::add(const std::string& hash, const std::string& bytes) {
  if (!is_sha256(hash))
    throw std::runtime_error("'" + hash.substr(0, 80) + "' is not a SHA-256 in hex");
  // Checked in memory, before anything is written: bytes that are not what they claim to be
  // never reach the disk.
  Digest ctx = sha256_start();
  EVP_DigestUpdate(ctx.get(), bytes.data(), bytes.size());
  if (const std::string got = sha256_hex(ctx.get()); got != hash) {
    throw std::runtime_error("the bytes shipped as " + hash + " hash to " + got + ": not kept");
  }
  const auto part = dir_ / (hash + ".part");
  {
    const int fd = ::open(part.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0700);
    if (fd < 0) {
      throw std::runtime_error("cannot write " + part.string() + ": " + std::strerror(errno));
    }
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int e = errno;
        ::close(fd);
        throw std::runtime_error("cannot write " + part.string() + ": " + std::strerror(e));
      }
      done += static_cast<std::size_t>(n);
    }
    ::fsync(fd);
    ::close(fd);
  }
  const auto path = dir_ / hash;
  std::filesystem::rename(part, path);
  return path;
}

}  // namespace baton::internal
