// A job's credentials in a directory, for agents started by something other than the
// controller: the secret every link proves it holds, and the TLS certificate, key and CA.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "runtime_impl.hpp"

namespace baton::internal {
namespace {

constexpr const char* kSecretFile = "secret";

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
  const auto secret = dir / kSecretFile;
  {
    // Created private: the secret is never readable by others, not even for a moment.
    const int fd = ::open(secret.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) throw UsageError("credentials: cannot write " + secret.string());
    const bool ok =
        ::write(fd, c.secret.data(), c.secret.size()) == static_cast<ssize_t>(c.secret.size());
    ::close(fd);
    if (!ok) throw UsageError("credentials: cannot write " + secret.string());
  }
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

}  // namespace baton::internal
