#include "overlay/process_scan.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <set>
#include <sstream>
#include <tuple>

#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/owner.hpp"

namespace overlay {
namespace {

constexpr std::size_t kMaxProcText = 64u << 20;

std::string joined_cmdline(std::string raw) {
  while (!raw.empty() && raw.back() == '\0') raw.pop_back();
  std::replace(raw.begin(), raw.end(), '\0', ' ');
  return raw;
}

// Field 3 of a /proc/PID/stat line, just after the command name's closing parenthesis.
char stat_state(const std::string& stat) {
  auto close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() ? stat[close + 2] : '?';
}

}  // namespace

bool parse_maps_line(const std::string& line, MappedFile& out) {
  // addr perms offset major:minor inode path — the path starts after the inode's spaces.
  std::istringstream in(line);
  std::string addr, perms, offset, devs, inode;
  if (!(in >> addr >> perms >> offset >> devs >> inode) || inode == "0") return false;
  std::string path;
  std::getline(in, path);
  path.erase(0, path.find_first_not_of(' '));
  if (path.empty() || path[0] != '/') return false;
  const std::string gone = " (deleted)";
  out.deleted = path.size() > gone.size() && path.compare(path.size() - gone.size(), gone.size(), gone) == 0;
  if (out.deleted) path.resize(path.size() - gone.size());
  auto colon = devs.find(':');
  if (colon == std::string::npos) return false;
  try {
    out.dev = makedev(static_cast<unsigned>(std::stoul(devs.substr(0, colon), nullptr, 16)),
                      static_cast<unsigned>(std::stoul(devs.substr(colon + 1), nullptr, 16)));
    out.ino = static_cast<ino_t>(std::stoull(inode));
  } catch (const std::exception&) {
    return false;
  }
  out.path = path;
  return true;
}

const ProcessInfo* ProcessScan::find(pid_t pid) const {
  auto it = std::lower_bound(processes.begin(), processes.end(), pid,
                             [](const ProcessInfo& p, pid_t v) { return p.pid < v; });
  return it != processes.end() && it->pid == pid ? &*it : nullptr;
}

std::vector<const ProcessInfo*> ProcessScan::with_descendants(const std::vector<pid_t>& roots) const {
  std::set<pid_t> in(roots.begin(), roots.end());
  for (bool more = true; more;) {  // a few passes: process trees are shallow
    more = false;
    for (const auto& p : processes)
      if (!in.count(p.pid) && in.count(p.ppid)) more = in.insert(p.pid).second;
  }
  std::vector<const ProcessInfo*> out;
  for (pid_t pid : in)
    if (const ProcessInfo* p = find(pid)) out.push_back(p);
  return out;
}

Openness probe_open_elsewhere(const fs::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return errno == ENOENT ? Openness::nowhere : Openness::unknown;
  if (!S_ISREG(st.st_mode)) return Openness::unknown;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return Openness::unknown;
  // Someone opening the file while we hold the lease makes the kernel signal us: with a signal
  // whose default action is to ignore it, never SIGIO's (terminate). We hold it for two calls.
  ::fcntl(fd, F_SETSIG, SIGURG);
  Openness r = Openness::unknown;
  if (::fcntl(fd, F_SETLEASE, F_WRLCK) == 0) {
    ::fcntl(fd, F_SETLEASE, F_UNLCK);
    r = Openness::nowhere;
  } else if (errno == EAGAIN) {
    r = Openness::somewhere;
  }
  ::close(fd);
  return r;
}

std::optional<ProcessInfo> read_process(DiskReader& disk, pid_t pid, const fs::path& proc) {
  if (pid <= 0) return std::nullopt;
  fs::path dir = proc / std::to_string(pid);
  ProcessInfo p;
  p.pid = pid;
  try {
    std::string stat = read_small_file(disk, dir / "stat", kMaxProcText);
    if (!parse_proc_stat(stat, p.ppid, p.start_ticks)) return std::nullopt;
    p.state = stat_state(stat);
    if (p.state == 'Z') return std::nullopt;
  } catch (const std::exception&) {
    return std::nullopt;  // gone (or never was)
  }
  // Hidden (hidepid) or gone meanwhile: the process still was there.
  best_effort("the process is shown without its command line",
              [&] { p.cmdline = joined_cmdline(read_small_file(disk, dir / "cmdline", kMaxProcText)); });
  return p;
}

ProcessScan scan_processes(DiskReader& disk, const std::vector<std::string>& only_mapping, const fs::path& proc) {
  ProcessScan scan;
  for (const auto& e : disk.list_dir(proc)) {
    if (e.name.empty() || e.name.find_first_not_of("0123456789") != std::string::npos) continue;
    fs::path dir = proc / e.name;
    ProcessInfo p;
    try {
      std::string maps = read_small_file(disk, dir / "maps", kMaxProcText);
      ++scan.examined;
      std::set<std::tuple<dev_t, ino_t, std::string>> seen;
      std::istringstream lines(maps);
      for (std::string l; std::getline(lines, l);) {
        MappedFile f;
        if (parse_maps_line(l, f) && seen.emplace(f.dev, f.ino, f.path).second) p.files.push_back(f);
      }
      bool wanted = only_mapping.empty() || std::any_of(p.files.begin(), p.files.end(), [&](const MappedFile& f) {
                      return std::find(only_mapping.begin(), only_mapping.end(), f.path) != only_mapping.end();
                    });
      if (!wanted) continue;
      p.pid = static_cast<pid_t>(std::stol(e.name));
      std::string stat = read_small_file(disk, dir / "stat", kMaxProcText);
      if (!parse_proc_stat(stat, p.ppid, p.start_ticks)) continue;
      p.state = stat_state(stat);
      if (p.state == 'Z') continue;  // a zombie runs nothing
      p.cmdline = joined_cmdline(read_small_file(disk, dir / "cmdline", kMaxProcText));
    } catch (const DiskError& err) {
      if (err.code() == EACCES || err.code() == EPERM) ++scan.unreadable;
      continue;  // gone meanwhile, or another user's
    } catch (const std::exception&) {
      continue;
    }
    scan.processes.push_back(std::move(p));
  }
  std::sort(scan.processes.begin(), scan.processes.end(),
            [](const ProcessInfo& a, const ProcessInfo& b) { return a.pid < b.pid; });
  return scan;
}

}  // namespace overlay
