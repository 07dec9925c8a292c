#pragma once
// Progress of long operations (large copies and hashes, snapshots), for a person watching a
// terminal. The library only reports; the front end decides whether and how to show it. With no
// sink installed (the default, and always in tests of the library) reporting costs a branch.
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace overlay {

// what: "copy libk.so"; done/total in bytes (total 0: unknown); finished: the last call.
using ProgressSink =
    std::function<void(const std::string& what, std::uint64_t done, std::uint64_t total, bool finished)>;

void set_progress_sink(ProgressSink sink);

// Files at least this large get a meter; smaller ones finish before a person could read it.
inline constexpr std::uint64_t kProgressMinBytes = 16u << 20;

// Reports one operation to the sink (none when `what` is empty), at most ten times a second, and its end on
// destruction.
class ProgressMeter {
 public:
  ProgressMeter(std::string what, std::uint64_t total);
  ~ProgressMeter();
  ProgressMeter(const ProgressMeter&) = delete;
  ProgressMeter& operator=(const ProgressMeter&) = delete;
  void advance(std::uint64_t bytes);

 private:
  std::string what_;
  std::uint64_t total_, done_ = 0;
  bool active_;
  std::chrono::steady_clock::time_point next_{};
};

}  // namespace overlay
