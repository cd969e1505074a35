// A job's credentials in a directory, for agents started by something other than the
// controller: the secret every link proves it holds, and the TLS certificate, key and CA.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "host/files.hpp"
#include "runtime_impl.hpp"

namespace baton::internal {
namespace {

constexpr const char* kSecretFile = "secret";
constexpr const char* kTextHeader = "baton-credentials 1";
// What credentials_text() carries, in order.
constexpr const char* kFiles[] = {"secret", "ca.pem", "cert.pem", "key.pem"};

/// Writes `bytes` to `path`, created private (never readable by others, not even for a moment).
void write_private(const std::filesystem::path& path, const std::string& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw UsageError("credentials: cannot write " + path.string());
  const bool ok = ::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size());
  ::close(fd);
  if (!ok) throw UsageError("credentials: cannot write " + path.string());
}

/// "0755".
std::string mode_text(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

/// Throws unless `path` is a file only its owner may read or write (or a directory only its
/// owner may enter).
void check_private(const std::filesystem::path& path, const char* what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    throw UsageError(std::string("credentials: no ") + what + " at " + path.string() +
                     " (make them with `baton-host --make-credentials DIR`)");
  }
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    throw UsageError(std::string("credentials: ") + what + " " + path.string() +
                     " may be read by other users (mode " + mode_text(st.st_mode) +
                     "); it holds the job's keys: `chmod go= " + path.string() + "`");
  }
  if (st.st_uid != ::geteuid()) {
    throw UsageError(std::string("credentials: ") + what + " " + path.string() +
                     " belongs to another user");
  }
}

}  // namespace

Credentials make_credentials(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    throw UsageError("credentials: cannot make " + dir.string() + ": " + ec.message());
  }
  ::chmod(dir.c_str(), 0700);
  Credentials c;
  c.secret = net::new_job_secret();
  write_private(dir / kSecretFile, c.secret);
  c.tls = net::make_job_certificates(dir.string(), 365);
  return c;
}

Credentials load_credentials(const std::filesystem::path& dir) {
  check_private(dir, "credentials directory");
  Credentials c;
  const auto secret = dir / kSecretFile;
  check_private(secret, "secret");
  std::ifstream in(secret);
  std::getline(in, c.secret);
  if (c.secret.size() < 32) {
    throw UsageError("credentials: the secret in " + secret.string() +
                     " is shorter than 32 characters");
  }
  c.tls = net::TlsOptions{(dir / "cert.pem").string(), (dir / "key.pem").string(),
                          (dir / "ca.pem").string()};
  check_private(c.tls.key_file, "TLS key");
  for (const auto& f : {c.tls.cert_file, c.tls.ca_file}) {
    if (!std::filesystem::exists(f)) {
      throw UsageError("credentials: no " + f +
                       " (make them with `baton-host --make-credentials`)");
    }
  }
  return c;
}

std::string credentials_text(const std::string& secret, const net::TlsOptions& tls) {
  const auto entry = [](const char* name, const std::string& bytes) {
    return std::string(name) + " " + std::to_string(bytes.size()) + "\n" + bytes;
  };
  std::string text = std::string(kTextHeader) + "\n" + entry(kFiles[0], secret);
  const std::string* paths[] = {&tls.ca_file, &tls.cert_file, &tls.key_file};
  for (std::size_t i = 0; i < 3; ++i) {
    std::ifstream in(*paths[i], std::ios::binary);
    std::ostringstream bytes;
    bytes << in.rdbuf();
    if (!in || bytes.str().empty()) throw UsageError("credentials: cannot read " + *paths[i]);
    text += entry(kFiles[i + 1], bytes.str());
  }
  return text;
}

Credentials receive_credentials(int fd, const std::filesystem::path& dir) {
  const std::string text = read_fd(fd, 1U << 20);  // far more than any credentials
  const auto bad = [](const std::string& why) {
    return UsageError("credentials on standard input: " + why +
                      " (expected what a baton job sends: --credentials - is for agents a job "
                      "starts; give --credentials DIR otherwise)");
  };
  std::size_t at = text.find('\n');
  if (at == std::string::npos || text.substr(0, at) != kTextHeader) {
    throw bad(text.empty() ? "none came" : "not baton credentials");
  }
  ++at;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw UsageError("credentials: cannot make " + dir.string() + ": " + ec.message());
  ::chmod(dir.c_str(), 0700);
  for (const char* name : kFiles) {
    const std::size_t eol = text.find('\n', at);
    if (eol == std::string::npos) throw bad(std::string("no ") + name);
    const std::string head = text.substr(at, eol - at);
    const std::string want = std::string(name) + " ";
    if (!head.starts_with(want)) throw bad(std::string("no ") + name);
    std::size_t size = 0;
    try {
      size = std::stoul(head.substr(want.size()));
    } catch (const std::exception&) {
      throw bad("a bad size for " + std::string(name));
    }
    if (eol + 1 + size > text.size()) throw bad(std::string("a cut-off ") + name);
    write_private(dir / name, text.substr(eol + 1, size));
    at = eol + 1 + size;
  }
  return load_credentials(dir);
}

Credentials read_credentials_file(const std::filesystem::path& text,
                                  const std::filesystem::path& dir) {
  check_private(text, "credentials file");
  const int fd = ::open(text.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw UsageError("credentials: cannot read " + text.string());
  try {
    Credentials c = receive_credentials(fd, dir);
    ::close(fd);
    return c;
  } catch (...) {
    ::close(fd);
    throw;
  }
}

}  // namespace baton::internal
