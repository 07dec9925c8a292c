#pragma once
// Who owns a live run: a PID plus the process's start time, so a recycled PID is not mistaken
// for the owner.
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace overlay {

struct Owner {
  pid_t pid = 0;
  std::uint64_t start_ticks = 0;  // field 22 of /proc/PID/stat (clock ticks since boot)
};

// Fields 4 (ppid) and 22 (start time, clock ticks since boot) of a /proc/PID/stat line; the
// command name (field 2) may hold spaces and parentheses. False when malformed.
bool parse_proc_stat(const std::string& stat, pid_t& ppid, std::uint64_t& start_ticks);

// The start time of a running process, or nothing when no such process exists.
std::optional<std::uint64_t> process_start_ticks(pid_t pid);

// True when the recorded owner is still the same running process.
bool owner_alive(const Owner& o);

}  // namespace overlay
