// Nothing of ours changes the filesystem without going through Disk (SPEC, "Power loss"): the
// real binary runs add-native and revert (tar and moved caches, a build), and exec, under strace -f while
// $OVERLAY_DISK_TRACE records every Disk operation; every file-changing syscall of our processes
// must match a recorded Disk operation on the same path. The build's own processes (everything
// from its execve on) are left out: their writes are not ours to order.
#include <algorithm>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

#include "test_util.hpp"

using namespace overlay::test;

namespace {

struct Syscall {
  std::string kind;  // the Disk op that must account for it
  std::string path;
  std::string line;
};

// The Disk ops that account for a syscall of each kind (create sets the exact mode with fchmod;
// mkdir likewise).
const std::map<std::string, std::set<std::string>> kAccountedBy = {
    {"create", {"create"}},  {"write", {"write", "copy", "clone"}},
    {"fsync", {"fsync"}},    {"syncfs", {"syncfs"}},
    {"rename", {"rename"}},  {"remove", {"remove"}},
    {"mkdir", {"mkdir"}},    {"symlink", {"symlink"}},
    {"link", {"link"}},      {"chmod", {"chmod", "create", "mkdir"}},
    {"utime", {"utime"}},    {"chown", {"chown"}},
    {"truncate", {"create"}}};

// The quoted string arguments of a strace line, unescaped enough for paths.
std::vector<std::string> quoted(const std::string& args) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] != '"') continue;
    std::string s;
    for (++i; i < args.size() && args[i] != '"'; ++i) s += args[i] == '\\' && i + 1 < args.size() ? args[++i] : args[i];
    out.push_back(s);
  }
  return out;
}

// The path strace -y annotates the first fd argument with: "3</a/b>" -> "/a/b".
std::string fd_path(const std::string& args) {
  auto lt = args.find('<');
  auto gt = args.find('>', lt);
  return lt == std::string::npos || gt == std::string::npos ? std::string() : args.substr(lt + 1, gt - lt - 1);
}

std::optional<Syscall> classify(const std::string& call, const std::string& args, const std::string& line) {
  auto q = quoted(args);
  auto last = [&] { return q.empty() ? std::string() : q.back(); };
  if (call == "openat" || call == "open" || call == "creat") {
    bool writes = call == "creat" || args.find("O_CREAT") != std::string::npos ||
                  args.find("O_WRONLY") != std::string::npos || args.find("O_RDWR") != std::string::npos ||
                  args.find("O_TRUNC") != std::string::npos;
    if (!writes || q.empty()) return std::nullopt;
    return Syscall{"create", q.front(), line};
  }
  if (call == "write" || call == "pwrite64" || call == "writev" || call == "pwritev")
    return Syscall{"write", fd_path(args), line};
  // A kernel copy writes to its second fd; a clone (ioctl FICLONE) to its first.
  if (call == "copy_file_range") {
    auto second = args.find(", ", args.find(", ") + 2);
    return Syscall{"write", second == std::string::npos ? "" : fd_path(args.substr(second)), line};
  }
  if (call == "ioctl" && args.find("FICLONE") != std::string::npos) return Syscall{"write", fd_path(args), line};
  if (call == "fsync" || call == "fdatasync") return Syscall{"fsync", fd_path(args), line};
  if (call == "syncfs") return Syscall{"syncfs", fd_path(args), line};
  if (call == "rename" || call == "renameat" || call == "renameat2")
    return Syscall{"rename", q.empty() ? "" : q.front(), line};
  if (call == "unlink" || call == "unlinkat" || call == "rmdir") return Syscall{"remove", last(), line};
  if (call == "mkdir" || call == "mkdirat") return Syscall{"mkdir", last(), line};
  if (call == "symlink" || call == "symlinkat") return Syscall{"symlink", last(), line};
  if (call == "link" || call == "linkat") return Syscall{"link", last(), line};
  if (call == "chmod" || call == "fchmodat") return Syscall{"chmod", last(), line};
  if (call == "fchmod") return Syscall{"chmod", fd_path(args), line};
  if (call == "utimensat") return Syscall{"utime", q.empty() ? fd_path(args) : q.front(), line};
  if (call == "chown" || call == "lchown" || call == "fchownat") return Syscall{"chown", last(), line};
  if (call == "fchown") return Syscall{"chown", fd_path(args), line};
  if (call == "truncate" || call == "ftruncate")
    return Syscall{"truncate", q.empty() ? fd_path(args) : q.front(), line};
  return std::nullopt;
}

struct Traced {
  std::vector<Syscall> ours;
  int by_build = 0;
};

// Reads one strace -f -y output: the build processes (those that called execve, but for the
// first: the overlay binary itself, and what they spawned) are set aside; every other
// file-changing call is ours.
void parse_strace(const std::string& text, const std::set<std::string>& ignore, Traced& t) {
  std::set<std::string> build;
  bool started = false;
  std::regex re(R"(^(\d+) +([a-z0-9_]+)\((.*)$)");
  std::regex child(R"(\) = (\d+)<?)");
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, re)) continue;  // "<... resumed>", exits, signals
    std::string pid = m[1], call = m[2], args = m[3];
    if (call == "execve") {
      if (started) build.insert(pid);
      started = true;
    }
    if ((call == "clone" || call == "clone3" || call == "fork" || call == "vfork") && build.count(pid)) {
      std::smatch c;
      if (std::regex_search(line, c, child)) build.insert(c[1]);
    }
    auto sc = classify(call, args, line);
    if (!sc || sc->path.empty() || sc->path[0] != '/') continue;  // pipes, sockets, our stdout/stderr
    if (sc->path.rfind("/dev/", 0) == 0 || sc->path.rfind("/proc/", 0) == 0 || ignore.count(sc->path)) continue;
    if (line.find(") = -1 ") != std::string::npos) continue;  // failed: changed nothing
    if (build.count(pid)) {
      ++t.by_build;
      continue;
    }
    t.ours.push_back(*sc);
  }
}

}  // namespace

TEST(DiskBypass, EveryFileChangeOfOursGoesThroughDisk) {
  if (run({"strace", "-V"}).rc != 0) GTEST_SKIP() << "strace is not installed";
  TempDir t;
  Install in = make_install(t / "inst");
  write_file(t / "patched.cpp", "int kernel() { return 7; }\n");
  // Over 1 MiB: the artifact's backup goes through the kernel copy (or a clone), not write(2).
  write_file(in.artifact, std::string(3 << 20, 'L'), 0755);
  fs::path trace = t / "disk-ops.tsv";
  // LeakSanitizer cannot run under ptrace: the sanitizer build's leak check is off for these runs.
  std::vector<std::string> env = {"OVERLAY_DISK_TRACE=" + trace.string(), "OVERLAY_STATE_DIR=" + (t / "state").string(),
                                  "ASAN_OPTIONS=detect_leaks=0"};
  const std::string build = "sh -c 'echo rebuilt > lib/libk.so; mkdir -p cache/x; echo 1 > cache/x/1'";
  // The change, as add-native and exec both take it.
  const std::vector<std::string> change = {
      "--target",    in.source.string(),   "--patched-file",     (t / "patched.cpp").string(),
      "--artifact",  in.artifact.string(), "--invalidate-cache", in.cache.string(),
      "--build-cwd", in.root.string(),     "--build-cmd",        build};
  auto with_change = [&](std::vector<std::string> head, const std::vector<std::string>& tail) {
    head.insert(head.end(), change.begin(), change.end());
    head.insert(head.end(), tail.begin(), tail.end());
    return head;
  };
  std::vector<std::vector<std::string>> runs;
  for (std::string snapshot : {"tar", "move"}) {
    runs.push_back(with_change({"add-native", "--overlay", (t / "ov").string()}, {"--cache-snapshot", snapshot}));
    runs.push_back({"revert", "--overlay", (t / "ov").string()});
  }
  // The A/B step: its runs' logs, its apply, build and revert (issue 53: the logs were opened
  // with open(2) outside Disk).
  runs.push_back(with_change({"exec", "--overlay", (t / "ov-exec").string(), "--ref"},
                             {"--", "sh", "-c", "echo ran; echo to-stderr >&2"}));
  std::string before = tree_digest(in.root);
  std::vector<std::string> traces;
  int n = 0;
  for (const auto& args : runs) {
    fs::path out = t / ("strace-" + std::to_string(n++) + ".txt");
    std::vector<std::string> argv = {"strace",
                                     "-f",
                                     "-y",
                                     "-qq",
                                     "-o",
                                     out.string(),
                                     "-e",
                                     "trace=%file,%desc,write,pwrite64,writev,fsync,fdatasync,syncfs,fchmod,fchown,"
                                     "ftruncate,clone,clone3,fork,vfork,execve",
                                     overlay_binary()};
    argv.insert(argv.end(), args.begin(), args.end());
    Cmd c = run(argv, t.path(), env);
    ASSERT_EQ(c.rc, 0) << c.err;
    traces.push_back(read_file(out));
  }
  EXPECT_EQ(tree_digest(in.root), before);

  std::set<std::pair<std::string, std::string>> recorded;
  std::istringstream ops(read_file(trace));
  for (std::string line; std::getline(ops, line);) {
    std::istringstream f(line);
    std::string op, path;
    std::getline(f, op, '\t');
    std::getline(f, path, '\t');
    recorded.insert({op, path});
  }
  Traced tr;
  for (const auto& text : traces) parse_strace(text, {trace.string()}, tr);
  std::vector<std::string> bypass;
  std::map<std::string, int> per_kind;
  for (const auto& s : tr.ours) {
    ++per_kind[s.kind];
    const auto& by = kAccountedBy.at(s.kind);
    bool ok = std::any_of(by.begin(), by.end(), [&](const std::string& op) { return recorded.count({op, s.path}); });
    if (!ok) bypass.push_back(s.line);
  }
  std::string kinds;
  for (const auto& [k, c] : per_kind) kinds += " " + k + "=" + std::to_string(c);
  std::printf(
      "disk bypass: %zu file-changing syscalls of ours (%s), %zu Disk ops recorded, %d syscalls of the build left out, "
      "%zu not through Disk\n",
      tr.ours.size(), kinds.c_str() + 1, recorded.size(), tr.by_build, bypass.size());
  for (const auto& b : bypass) ADD_FAILURE() << "not through Disk: " << b;
  // The check must be able to fail: the build's own writes were seen (and set aside), and ours
  // were seen too.
  EXPECT_GT(tr.by_build, 0);
  EXPECT_GT(per_kind["write"], 0);
  EXPECT_GT(per_kind["rename"], 0);
  EXPECT_GT(per_kind["fsync"], 0);
}
