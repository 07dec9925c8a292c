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
  // A fleet step's coordinator runs on another machine (overlay fleet): its host name, and the
  // Slurm job it runs in. Empty: the owner runs on this machine (every one-node command).
  std::string host;
  std::string slurm_job;
};

// Fields 4 (ppid) and 22 (start time, clock ticks since boot) of a /proc/PID/stat line; the
// command name (field 2) may hold spaces and parentheses. False when malformed.
bool parse_proc_stat(const std::string& stat, pid_t& ppid, std::uint64_t& start_ticks);

// The start time of a running process, or nothing when no such process exists.
std::optional<std::uint64_t> process_start_ticks(pid_t pid);

// This machine's name (uname's nodename), as a fleet records its coordinator's.
std::string this_host();

// True when the recorded owner, on this machine, is still the same running process (an owner
// on another host: overlay/liveness.hpp).
bool local_owner_alive(const Owner& o);

// "PID:TICKS@HOST/JOB" (the coordinator's --fleet-owner) and back; nullopt when malformed.
std::string owner_text(const Owner& o);
std::optional<Owner> parse_owner_text(const std::string& text);

}  // namespace overlay
