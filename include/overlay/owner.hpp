#pragma once
// Who owns a live run: a PID plus the process's start time, so a recycled PID is not mistaken
// for the owner.
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "overlay/lease.hpp"

namespace overlay {

struct Owner {
  pid_t pid = 0;
  std::uint64_t start_ticks = 0;  // field 22 of /proc/PID/stat (clock ticks since boot)
  // A fleet step's coordinator runs on another machine (overlay fleet): its host name, and the
  // lease it runs under (its scheduler's job). Empty: the owner runs on this machine (every
  // one-node command).
  std::string host;
  Lease lease;
  // The PID namespace `pid` is a number in (the inode of the recorder's /proc/self/ns/pid): a
  // container's pid 2 is not the host's pid 2. 0: not recorded (older manifests), taken as ours.
  std::uint64_t pid_ns = 0;
};

// What can be told of a recorded owner from here: running, gone, or in a PID namespace this
// process cannot see into (a sibling container, or the host seen from a container).
enum class Liveness { alive, gone, unseen };
const char* to_string(Liveness l);

// The inode of this process's PID namespace; 0 where /proc cannot tell.
std::uint64_t this_pid_ns();

// The owner record of running process `pid` (a number in this PID namespace), or nothing when
// there is no such process.
std::optional<Owner> local_owner(pid_t pid);

// This process's time namespace's boottime offset, in clock ticks (/proc/self/timens_offsets; 0
// outside one): a CRIU-restored container's, `unshare --time`'s.
std::int64_t boot_offset_ticks();

// Fields 4 (ppid) and 22 (start time, clock ticks since boot) of a /proc/PID/stat line; the
// command name (field 2) may hold spaces and parentheses. The start time is the host's: the
// reader's boottime offset taken off, so an owner recorded in a time namespace and judged from
// outside it (CI's gc-stale on the host) is the same number. False when malformed.
bool parse_proc_stat(const std::string& stat, pid_t& ppid, std::uint64_t& start_ticks);

// The start time of a running process, or nothing when no such process exists.
std::optional<std::uint64_t> process_start_ticks(pid_t pid);

// This machine's name (uname's nodename), as a fleet records its coordinator's.
std::string this_host();

// Whether the recorded owner, on this machine, is still the same running process (an owner on
// another host: overlay/liveness.hpp). An owner in another PID namespace is looked for among the
// processes of that namespace this one can see; where none can be seen and this is not the
// initial namespace (which sees every process), it is `unseen`.
Liveness local_owner_liveness(const Owner& o);

// The owner's JSON form, the manifest's and status's alike: {pid, start_ticks}, and pid_ns, host
// and the lease (as "ENGINE_job": ID) where set (status adds its word on whether the owner lives). Read back, with its
// checks, by the manifest.
void to_json(nlohmann::json& j, const Owner& o);

// "PID:TICKS~NS@HOST/LEASE" (the coordinator's --fleet-owner; ~NS only when known; LEASE as
// lease_text writes it) and back; nullopt when malformed.
std::string owner_text(const Owner& o);
std::optional<Owner> parse_owner_text(const std::string& text);

}  // namespace overlay
