#include "overlay/patch.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <optional>
#include <sstream>

#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/manifest.hpp"
#include "overlay/process.hpp"

namespace overlay {
namespace {

constexpr const char* kPrivatePrefix = "overlay-patch-";
// A private dir younger than this is never swept, whatever its PID says (another PID namespace
// sharing $TMPDIR could be using it); a patch run holds one for seconds.
constexpr std::time_t kSweepAgeS = 600;

// The PID a private dir's name carries ("overlay-patch-<pid>-<hex>"), or 0.
pid_t pid_in_name(const std::string& name) {
  std::string rest = name.substr(std::strlen(kPrivatePrefix));
  std::size_t dash = rest.find('-');
  if (dash == 0 || dash == std::string::npos || rest.find_first_not_of("0123456789") != dash) return 0;
  try {
    return static_cast<pid_t>(std::stol(rest.substr(0, dash)));
  } catch (const std::exception&) {
    return 0;
  }
}

// Private dirs of runs killed before they could delete them (kill -9, power loss): ours (same
// owner), older than kSweepAgeS, named by a PID that no longer runs. Nothing else would remove them.
void sweep_dead_runs(Disk& disk, const fs::path& base) {
  std::time_t now = std::time(nullptr);
  std::vector<DirEntry> entries;
  try {
    entries = disk.list_dir(base);
  } catch (const Error&) {
    return;  // an unlistable $TMPDIR: the private dir's own creation says what is wrong
  }
  for (const auto& e : entries) {
    if (e.name.rfind(kPrivatePrefix, 0) != 0) continue;
    pid_t pid = pid_in_name(e.name);
    if (pid <= 0 || pid == ::getpid() || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
    FileInfo fi = disk.info(base / e.name, Follow::no);
    if (fi.type != FileType::directory || fi.uid != ::geteuid() || now - fi.mtime.tv_sec < kSweepAgeS) continue;
    // Litter, not state: left for the next run rather than failing this one.
    best_effort("a stale private dir left for the next run", [&] { remove_tree(disk, base / e.name); });
  }
}

fs::path make_private_dir(Disk& disk) {
  const char* tmp = std::getenv("TMPDIR");
  fs::path base = (tmp && *tmp) ? fs::path(tmp) : fs::path("/tmp");
  sweep_dead_runs(disk, base);
  for (int attempt = 0; attempt < 16; ++attempt) {
    fs::path d = base / (kPrivatePrefix + std::to_string(::getpid()) + "-" + random_hex(6));
    if (disk.make_dir(d, 0700)) return d;
  }
  throw Error("cannot create a private temporary directory under " + base.string());
}

std::string first_line(const std::string& text) {
  std::istringstream in(text);
  std::string line, last;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    // GNU patch names the hunk that failed on a later line; prefer that one.
    if (line.find("FAILED") != std::string::npos || line.find("garbage") != std::string::npos ||
        line.find("malformed") != std::string::npos || line.find("Reversed") != std::string::npos)
      return line;
    if (last.empty()) last = line;
  }
  return last.empty() ? "no output" : last;
}

RunResult run_gnu_patch(const fs::path& dir, std::vector<std::string> args, const fs::path& diff) {
  RunOptions opts;
  opts.output = Output::capture;
  opts.cwd = dir;
  std::vector<std::string> argv = {"patch",           "--batch", "--forward", "--no-backup-if-mismatch",
                                   "--reject-file=-", "--quiet"};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.insert(argv.end(), {"-i", diff.string()});
  RunResult r = run_process(argv, opts);
  if (!r.exec_error.empty()) throw Error("cannot run GNU patch: " + r.exec_error);
  return r;
}

// "a/b/c.cpp\t2026-…" -> "a/b/c.cpp"; nothing for /dev/null.
std::optional<std::string> header_name(const std::string& line) {
  std::string name = line.substr(4);
  if (auto tab = name.find('\t'); tab != std::string::npos) name.resize(tab);
  while (!name.empty() && (name.back() == ' ' || name.back() == '\r')) name.pop_back();
  if (name == "/dev/null") return std::nullopt;
  if (!name.empty() && name.front() == '"') throw Error("diff names a quoted file name (unsupported): " + name);
  return name;
}

fs::path stripped(const std::string& name, int strip) {
  fs::path p(name);
  if (p.is_absolute()) throw Error("diff names an absolute path: " + name);
  fs::path out;
  int skipped = 0;
  for (const auto& part : p) {
    if (skipped++ < strip) continue;
    out /= part;
  }
  if (out.empty()) throw Error("diff file name has fewer than -p " + std::to_string(strip) + " components: " + name);
  if (!is_safe_relative(out.string())) throw Error("diff names an unsafe path: " + name);
  return out;
}

// Reads "L[,N]" of a hunk header at p (advancing it); returns N, which defaults to 1.
long hunk_count(const char*& p) {
  char* end = nullptr;
  std::strtol(p, &end, 10);
  p = end;
  if (*p != ',') return 1;
  long n = std::strtol(p + 1, &end, 10);
  p = end;
  return n;
}

// Skips a hunk body: `old_n` lines of the old side and `new_n` of the new.
std::size_t skip_hunk(const std::vector<std::string>& lines, std::size_t i, long old_n, long new_n) {
  while (i < lines.size() && (old_n > 0 || new_n > 0)) {
    const std::string& l = lines[i];
    char c = l.empty() ? ' ' : l[0];
    if (c == ' ')
      --old_n, --new_n;
    else if (c == '-')
      --old_n;
    else if (c == '+')
      --new_n;
    else if (c != '\\')
      break;
    ++i;
  }
  return i;
}

}  // namespace

std::vector<fs::path> diff_file_names(const std::string& text, int strip) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  std::vector<fs::path> out;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const std::string& l = lines[i];
    if (l.rfind("@@ -", 0) == 0) {
      const char* p = l.c_str() + 4;
      long old_n = hunk_count(p);
      long new_n = (p[0] == ' ' && p[1] == '+') ? (p += 2, hunk_count(p)) : 0;
      i = skip_hunk(lines, i + 1, old_n, new_n) - 1;
      continue;
    }
    if (l.rfind("--- ", 0) != 0 || i + 1 >= lines.size() || lines[i + 1].rfind("+++ ", 0) != 0) continue;
    auto old_name = header_name(l);
    auto new_name = header_name(lines[i + 1]);
    if (!old_name && !new_name) throw Error("diff header names /dev/null on both sides");
    fs::path a = old_name ? stripped(*old_name, strip) : fs::path();
    fs::path b = new_name ? stripped(*new_name, strip) : fs::path();
    if (old_name && new_name && a != b)
      throw Error("diff renames " + a.string() + " to " + b.string() + " (unsupported)");
    fs::path name = new_name ? b : a;
    if (std::find(out.begin(), out.end(), name) != out.end()) throw Error("diff names a file twice: " + name.string());
    out.push_back(name);
    ++i;
  }
  if (out.empty()) throw Error("diff names no file (is it a unified diff?)");
  return out;
}

PrivateDir::PrivateDir(Disk& disk) : disk_(disk), path_(make_private_dir(disk)) {}

PrivateDir::~PrivateDir() {
  // best_effort never throws, as a destructor must not.
  best_effort("a private temp dir left behind, which is harmless", [&] { remove_tree(disk_, path_); });
}

// On any failure below, dir_ (a member, already constructed) removes the private copies.
PatchedTree::PatchedTree(Disk& disk, const fs::path& root, const fs::path& diff, int strip) : dir_(disk) {
  std::vector<fs::path> names = diff_file_names(read_small_file(disk, diff, 256u << 20), strip);
  const fs::path& dir = dir_.path();
  std::vector<bool> existed;
  for (const auto& rel : names) {
    FileInfo fi = disk.info(root / rel, Follow::yes);
    if (fi.exists() && fi.type != FileType::regular)
      throw Error("diff names " + (root / rel).string() + ", which is not a regular file");
    if (!fi.exists() && disk.info((root / rel).parent_path(), Follow::yes).type != FileType::directory)
      throw Error("diff creates " + (root / rel).string() + " in a directory that does not exist (not supported)");
    existed.push_back(fi.exists());
    make_dirs(disk, (dir / rel).parent_path(), 0700);
    if (fi.exists()) copy_file_hashing(disk, root / rel, dir / rel, fi.mode, Durable::no);
  }
  RunResult r = run_gnu_patch(dir, {"-p" + std::to_string(strip)}, diff);
  if (!r.ok())
    throw Error("patch " + diff.string() + " does not apply under " + root.string() + ": " +
                first_line(r.out + "\n" + r.err));
  for (std::size_t k = 0; k < names.size(); ++k) {
    bool now = disk.info(dir / names[k], Follow::no).type == FileType::regular;
    if (!existed[k] && !now) throw Error("diff names " + names[k].string() + " but neither finds nor creates it");
    FileChange c = !existed[k] ? FileChange::created : now ? FileChange::modified : FileChange::deleted;
    changes_.push_back({root / names[k], c, now ? dir / names[k] : fs::path()});
  }
  walk_tree(disk, dir, [&](const fs::path& rel, FileType type) {
    if (type != FileType::directory && std::find(names.begin(), names.end(), rel) == names.end())
      throw Error("diff touches " + rel.string() + ", which its headers do not name as a file (unsupported)");
    return WalkStep::descend;
  });
}

PatchedCopy::PatchedCopy(Disk& disk, const fs::path& original, const fs::path& diff) : dir_(disk) {
  file_ = dir_.path() / original.filename();
  FileInfo fi = disk.info(original, Follow::yes);
  copy_file_hashing(disk, original, file_, fi.mode, Durable::no);
  RunResult r = run_gnu_patch(dir_.path(), {file_.string()}, diff);
  if (!r.ok())
    throw Error("patch " + diff.string() + " does not apply to " + original.string() + ": " +
                first_line(r.out + "\n" + r.err));
}

}  // namespace overlay
