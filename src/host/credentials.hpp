#pragma once

// Internal: a job's credentials (its secret and TLS files) made, stored, read and handed to
// agents (credentials.cpp).

#include <filesystem>
#include <string>

#include "baton/net/link.hpp"

namespace baton::internal {

/// A job's secret and TLS files, kept in a directory only their owner may read: "secret",
/// "ca.pem", "cert.pem", "key.pem". How an agent started by a scheduler gets them: the
/// directory is named by --credentials or BATON_CREDENTIALS, never passed on a command line.
struct Credentials {
  std::string secret;
  net::TlsOptions tls;
};
/// Makes `dir` (mode 0700) with a fresh secret and a CA and certificate (files mode 0600).
Credentials make_credentials(const std::filesystem::path& dir);
/// Reads `dir`; throws UsageError naming what is missing or readable by others.
Credentials load_credentials(const std::filesystem::path& dir);
/// The job's credentials as one text, for an agent's standard input (`baton-host --credentials
/// -`): how a job that starts agents through a pipe (srun, ssh) hands them over, never on a
/// command line. Throws UsageError if the TLS files cannot be read.
std::string credentials_text(const std::string& secret, const net::TlsOptions& tls);
/// Reads credentials_text() from `fd` to its end and writes it to `dir` (made, mode 0700;
/// files 0600), then loads them; throws UsageError saying what was wrong with the text.
Credentials receive_credentials(int fd, const std::filesystem::path& dir);
/// Reads credentials_text() from the file `text` (only its owner may read it: a Kubernetes
/// Secret mounted with mode 0400, say) and writes it to `dir` as receive_credentials() does.
Credentials read_credentials_file(const std::filesystem::path& text,
                                  const std::filesystem::path& dir);

}  // namespace baton::internal
