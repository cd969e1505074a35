#pragma once

// Worker output on the controller's terminal. Every worker's stdout and stderr come back over
// pipes and are printed line by line with a "[mesh rank]" prefix. The same line from several
// ranks of a mesh within a short window is printed once, with its ranks and a count:
//
//   [procs0 2] loss 0.41
//   [procs0 0-3,5] loading checkpoint (x5)

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace baton {

/// One printed line: a worker's line, or the same line from several ranks of one mesh.
struct OutputLine {
  int stream = 1;  // 1: stdout, 2: stderr
  std::string mesh;
  std::vector<std::size_t> ranks;  // sorted
  std::string text;                // without the newline

  /// "[mesh 3] text", or "[mesh 0-3,5] text (x5)" for several ranks.
  std::string to_string() const;
};

/// A worker's line as kept for whoever looks inside the job (the admin API's logs).
struct KeptLine {
  OutputLine line;
  std::chrono::system_clock::time_point at;  // when it was read
  std::uint64_t seq = 0;                     // 1 for the first line kept, then one more each
};

struct OutputOptions {
  /// How long the first copy of a line waits for the same line from other ranks; zero prints
  /// every line as it comes (no aggregation).
  std::chrono::milliseconds window{100};
  /// Where lines go; by default to this process's stdout or stderr, as the worker wrote them.
  std::function<void(const OutputLine&)> sink;
};

/// Reads workers' pipes on a thread of its own.
class OutputForwarder {
 public:
  explicit OutputForwarder(OutputOptions options = {});
  /// Reads what is left in every pipe and prints every pending line before it returns.
  ~OutputForwarder();
  OutputForwarder(const OutputForwarder&) = delete;
  OutputForwarder& operator=(const OutputForwarder&) = delete;

  /// Takes the read end of a pipe carrying `stream` (1 or 2) of rank `rank` of `mesh`.
  void add(int fd, int stream, std::string mesh, std::size_t rank);
  /// Prints `line` where the default sink does: stdout or stderr, as the worker wrote it.
  static void print(const OutputLine& line);
  /// Prints a line that was read elsewhere (by another host's agent) where this forwarder's
  /// own lines go.
  void emit(const OutputLine& line);
  /// Returns once everything already written to the pipes has been read and printed.
  void flush();
  /// Changes the aggregation window (zero turns aggregation off).
  void set_window(std::chrono::milliseconds window);
  /// The last few stderr lines of one rank (read so far; flush() first to have them all).
  std::vector<std::string> recent_stderr(const std::string& mesh, std::size_t rank) const;

  /// The last lines of every worker, both streams, oldest first: up to kKeptLines in all,
  /// each cut to kKeptChars.
  std::vector<KeptLine> kept() const;

  /// Stderr lines kept per rank for failure reports.
  static constexpr std::size_t kRecentLines = 5;

  static constexpr std::size_t kKeptLines = 10000;
  static constexpr std::size_t kKeptChars = 1024;

  /// Lines longer than this are printed in pieces of this size.
  static constexpr std::size_t kMaxLine = std::size_t{64} * 1024;

 private:
  void start();  // the reader thread, on first need
  struct State;
  std::unique_ptr<State> state_;
  std::thread thread_;
};

}  // namespace baton
