#pragma once
// Who owns a live run: a PID plus the process's start time, so a recycled PID is not mistaken
// for the owner.
#include <sys/types.h>

#include <cstdint>
#include <optional>

namespace overlay {

struct Owner {
  pid_t pid = 0;
  std::uint64_t start_ticks = 0;  // field 22 of /proc/PID/stat (clock ticks since boot)
};

// The start time of a running process, or nothing when no such process exists.
std::optional<std::uint64_t> process_start_ticks(pid_t pid);

// True when the recorded owner is still the same running process.
bool owner_alive(const Owner& o);

}  // namespace overlay
