#pragma once
// Which running processes map which files: /proc/PID/maps read as Debian's needrestart does,
// with each process's parent, start time and command line. Only what /proc lets us read: another
// user's maps are readable by root alone, and such processes are counted, never guessed at.
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "overlay/disk.hpp"

namespace overlay {

struct MappedFile {
  dev_t dev = 0;
  ino_t ino = 0;
  std::string path;      // as maps names it, without " (deleted)"
  bool deleted = false;  // the inode is no longer at that path
};

struct ProcessInfo {
  pid_t pid = 0;
  pid_t ppid = 0;
  std::uint64_t start_ticks = 0;
  char state = 'R';               // field 3 of /proc/PID/stat: 'Z' is a zombie, no longer running
  std::string cmdline;            // argv joined by spaces
  std::vector<MappedFile> files;  // each (dev, ino, path) once
};

struct ProcessScan {
  std::vector<ProcessInfo> processes;  // by pid
  std::size_t unreadable = 0;          // processes whose maps we may not read (another user's)
  std::size_t examined = 0;            // processes whose maps were read (0: no scan was made)
  const ProcessInfo* find(pid_t pid) const;
  // `roots` and every process descended from them (through ppid), each once.
  std::vector<const ProcessInfo*> with_descendants(const std::vector<pid_t>& roots) const;
};

// Reads every process of /proc (through `disk`), skipping those that exit meanwhile. With
// `only_mapping` non-empty, keeps (and reads the stat and command line of) only the processes
// that map one of those paths: one read per process.
ProcessScan scan_processes(DiskReader& disk, const std::vector<std::string>& only_mapping = {},
                           const fs::path& proc = "/proc");

// Whether a process other than us has a file open or mapped, asked of the kernel in O(1): a write
// lease (fcntl F_SETLEASE) is granted only while no other open file refers to the inode, and a
// mapping keeps its file open. `unknown` where leases are refused (not the file's owner, leases
// disabled, a filesystem without them): then only a scan of /proc can tell.
enum class Openness { nowhere, somewhere, unknown };
Openness probe_open_elsewhere(const fs::path& path);

// One process's parent, start time and command line (not its maps: readable for any user's
// process); nothing when it does not exist or is a zombie (exited, not yet reaped).
std::optional<ProcessInfo> read_process(DiskReader& disk, pid_t pid, const fs::path& proc = "/proc");

// One maps line's file mapping; false for anonymous, special or malformed lines.
bool parse_maps_line(const std::string& line, MappedFile& out);

}  // namespace overlay
