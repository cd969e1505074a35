#pragma once

// Internal: the `baton` command's side of the admin API (cli_client.tool.cpp): which job to ask,
// and one request to it.

#include <stdexcept>
#include <string>
#include <string_view>

namespace baton::cli {

inline constexpr const char* kVersion = "0.1.0";

/// A failure to report as "baton: WHAT" and exit with status 1.
struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Target {
  std::string url;    // http://HOST:PORT, or https://HOST:PORT for an API served with TLS
  std::string token;  // the admin token
  std::string name;   // how to name the job in errors
  std::string ca;     // for https: the CA file the API's certificate must chain to
};

/// The job to talk to: --addr (with --token, and --ca for https), --job PID, or the only one
/// running.
Target find_target(const std::string& addr, const std::string& token_file, int pid,
                   const std::string& ca_file = "");

/// `method` ("GET" or "POST") `path` on the job's admin API; the body of a 200. Throws Failure
/// saying why on anything else (the job gone, the token refused, the error the API gave).
std::string request(const Target& t, const std::string& method, const std::string& path);
inline std::string get(const Target& t, const std::string& path) {
  return request(t, "GET", path);
}

/// `s` as a query parameter's value (percent-encoded).
std::string url_encoded(std::string_view s);

/// `baton debug`: the Python actors paused in breakpoint(), and a pdb prompt for each, until
/// `quit`; with `list_only`, the list alone.
int run_debug(const Target& t, bool list_only, bool as_json);

/// `baton top`: a live view of the job's procs and actors, every `interval_s`, until `q`.
int run_top(const Target& t, double interval_s);

}  // namespace baton::cli
