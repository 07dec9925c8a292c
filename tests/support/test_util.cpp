#include "test_util.hpp"

#include <fcntl.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "overlay/hash.hpp"
#include "overlay/manifest.hpp"
#include "overlay/process.hpp"

namespace overlay::test {

namespace {

// Each test process keeps its holds, stored builds and digests in a state dir of its own, unless
// its caller named one. Under the default (~/.local/state/overlay) the holds of every finished
// test's deleted overlays pile up and every command reads them all: at 6,530 of them a revert
// fault sweep took 63 s instead of 4 s, and each CI test ran slower than the one before it.
// Removed at exit by the process that made it (a forked child exiting runs this destructor too).
class OwnStateDir {
 public:
  OwnStateDir() {
    if (const char* named = std::getenv("OVERLAY_STATE_DIR"); named && *named) return;
    std::string tmpl = (fs::temp_directory_path() / "overlay-test-state.XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) {
      std::fprintf(stderr, "test_util: mkdtemp %s: %s; tests share the default state dir\n", tmpl.c_str(),
                   std::strerror(errno));
      return;
    }
    dir_ = tmpl;
    maker_ = ::getpid();
    ::setenv("OVERLAY_STATE_DIR", tmpl.c_str(), 1);
  }
  ~OwnStateDir() {
    if (dir_.empty() || ::getpid() != maker_) return;
    std::error_code ec;
    fs::remove_all(dir_, ec);
    if (ec) std::fprintf(stderr, "test_util: removing %s: %s\n", dir_.c_str(), ec.message().c_str());
  }
  OwnStateDir(const OwnStateDir&) = delete;
  OwnStateDir& operator=(const OwnStateDir&) = delete;

 private:
  fs::path dir_;
  pid_t maker_ = 0;
};
const OwnStateDir own_state_dir;

}  // namespace

TempDir::TempDir() : TempDir(fs::temp_directory_path()) {}

TempDir::TempDir(const fs::path& base) {
  std::string tmpl = (base / "overlay-test.XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  // Make everything writable first: tests create read-only dirs.
  for (auto it = fs::recursive_directory_iterator(path_, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    if (it->is_directory(ec) && !it->is_symlink(ec))
      fs::permissions(it->path(), fs::perms::owner_all, fs::perm_options::add, ec);
  fs::remove_all(path_, ec);
}

void write_file(const fs::path& p, const std::string& data, mode_t mode) {
  fs::create_directories(p.parent_path());
  {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out << data;
    if (!out) throw std::runtime_error("cannot write " + p.string());
  }
  ::chmod(p.c_str(), mode);
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + p.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string file_sha256(const fs::path& p) { return sha256_hex(read_file(p)); }

void record_native_change(const fs::path& ov, const fs::path& path) {
  Manifest m;
  NativeEntry e;
  SourceItem s;
  s.install_path = path.string();
  s.backup = "_native_backup/x";
  s.sha256 = std::string(64, 'a');
  e.sources.push_back(s);
  m.natives.push_back(e);
  fs::create_directories(ov);
  save_manifest(real_disk(), ov, m);
}

void record_caches_as_moved_in(const fs::path& overlay) {
  const fs::path manifest = overlay / "_overlay_manifest.json";
  nlohmann::json m = nlohmann::json::parse(read_file(manifest));
  for (auto& e : m["natives"]) {
    auto& caches = e["caches"];
    for (std::size_t k = 0; k < caches.size(); ++k) {
      if (!caches[k].contains("aside")) continue;
      std::string rel = "_native_backup/" + e["id"].get<std::string>() + "/cache_" + std::to_string(k) + ".dir";
      fs::rename(caches[k]["aside"]["path"].get<std::string>(), overlay / rel);
      caches[k].erase("aside");
      caches[k]["backup_dir"] = rel;
    }
  }
  write_file(manifest, m.dump(2));
}

bool can_clone_in(const fs::path& dir) {
  fs::path a = dir / ".clone-probe-a", b = dir / ".clone-probe-b";
  write_file(a, std::string(8192, 'x'));
  int in = ::open(a.c_str(), O_RDONLY | O_CLOEXEC);
  int out = ::open(b.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  bool ok = in >= 0 && out >= 0 && ::ioctl(out, FICLONE, in) == 0;
  if (in >= 0) ::close(in);
  if (out >= 0) ::close(out);
  fs::remove(a);
  fs::remove(b);
  return ok;
}

bool wait_while_progressing(const std::function<bool()>& done, const std::function<std::uintmax_t()>& left,
                            std::chrono::seconds stall) {
  using Clock = std::chrono::steady_clock;
  std::uintmax_t last = left();
  auto moved = Clock::now();
  while (!done()) {
    ::usleep(20000);
    std::uintmax_t now = left();
    if (now != last) {
      last = now;
      moved = Clock::now();
    } else if (Clock::now() - moved > stall) {
      return done();
    }
  }
  return true;
}

std::uintmax_t count_entries(const fs::path& p) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(p, ec))) return 0;
  std::uintmax_t n = 1;
  for (auto it = fs::recursive_directory_iterator(p, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    ++n;
  return n;
}

bool wait_until_gone(const fs::path& p) {
  std::error_code ec;
  return wait_while_progressing([&] { return !fs::exists(fs::symlink_status(p, ec)); },
                                [&] { return count_entries(p); });
}

bool process_alive(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return false;
  auto close = line.rfind(')');  // the command name may hold spaces and parentheses
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z';
}

void wait_until_dead(pid_t pid) {
  while (process_alive(pid)) ::usleep(10000);
}

bool until_ready_or_exited(pid_t pid, const std::function<bool()>& ready) {
  while (!ready()) {
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid)
      return ready();
    ::usleep(10000);
  }
  return true;
}

namespace {

// Whether a member of process group `pgid` other than a zombie is listed in /proc.
bool group_runs(pid_t pgid) {
  const std::string want = std::to_string(pgid);
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    std::ifstream in(e.path() / "stat");
    std::string stat;
    if (!std::getline(in, stat)) continue;  // not a process, or gone meanwhile
    auto close = stat.rfind(')');           // the command name may hold spaces and parentheses
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 1));
    std::string state, ppid, pgrp;
    if (rest >> state >> ppid >> pgrp && pgrp == want && state != "Z") return true;
  }
  return false;
}

}  // namespace

bool kill_group_and_wait(pid_t pgid) {
  ::kill(-pgid, SIGKILL);
  ::waitpid(pgid, nullptr, 0);
  for (int i = 0; i < 1000; ++i) {
    if (!group_runs(pgid)) return true;
    ::usleep(10000);
  }
  return false;
}

std::unique_ptr<ScopedMount> ScopedMount::tmpfs(const fs::path& at) {
  auto m = std::unique_ptr<ScopedMount>(new ScopedMount());
  m->at_ = at;
  Cmd c = run({"mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", at.string()});
  m->ok_ = c.rc == 0;
  m->why_ = m->ok_ ? "" : "cannot mount a tmpfs (needs root): " + c.err;
  return m;
}

std::unique_ptr<ScopedMount> ScopedMount::read_only(const fs::path& at) {
  auto m = std::unique_ptr<ScopedMount>(new ScopedMount());
  m->at_ = at;
  Cmd c = run({"mount", "--bind", at.string(), at.string()});
  m->ok_ = c.rc == 0;
  if (m->ok_) {
    Cmd ro = run({"mount", "-o", "remount,bind,ro", at.string()});
    if (ro.rc != 0) m->why_ = "cannot remount read-only: " + ro.err;
    m->ok_ = ro.rc == 0;
    if (!m->ok_) run({"umount", at.string()});
  } else {
    m->why_ = "cannot bind-mount (needs root): " + c.err;
  }
  return m;
}

std::unique_ptr<ScopedMount> ScopedMount::bind(const fs::path& src, const fs::path& at) {
  auto m = std::unique_ptr<ScopedMount>(new ScopedMount());
  m->at_ = at;
  Cmd c = run({"mount", "--bind", src.string(), at.string()});
  m->ok_ = c.rc == 0;
  m->why_ = m->ok_ ? "" : "cannot bind-mount (needs root): " + c.err;
  return m;
}

std::unique_ptr<ScopedMount> ScopedMount::overlayfs(const fs::path& lower, const fs::path& upper, const fs::path& work,
                                                    const fs::path& at) {
  auto m = std::unique_ptr<ScopedMount>(new ScopedMount());
  m->at_ = at;
  std::string opts = "lowerdir=" + lower.string() + ",upperdir=" + upper.string() + ",workdir=" + work.string();
  Cmd c = run({"mount", "-t", "overlay", "overlay", "-o", opts, at.string()});
  m->ok_ = c.rc == 0;
  m->why_ = m->ok_ ? "" : "cannot mount an overlayfs (needs root and the overlay module): " + c.err;
  return m;
}

ScopedMount::~ScopedMount() {
  if (ok_ && run({"umount", at_.string()}).rc != 0) run({"umount", "-l", at_.string()});
}

namespace {
// The trees under `root` left to a detached deleter, not descended into.
std::vector<fs::path> litter_under(const fs::path& root) {
  std::vector<fs::path> found;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    std::string name = it->path().filename().string();
    bool litter = name.find(".overlay-trash-") != std::string::npos ||
                  name.find(".overlay-restore-") != std::string::npos ||
                  (name == "_trash" && it->is_directory(ec) && !fs::is_empty(it->path(), ec));
    if (!litter) continue;
    found.push_back(it->path());
    it.disable_recursion_pending();
  }
  return found;  // a tree changing under the walk ends it early: the next call looks again
}
}  // namespace

bool settle_litter(const fs::path& root) {
  auto left = [&] {
    std::uintmax_t n = 0;
    for (const auto& p : litter_under(root)) n += count_entries(p);
    return n;
  };
  return wait_while_progressing([&] { return litter_under(root).empty() && litter_under(root).empty(); }, left);
}

ino_t inode_of(const fs::path& p) {
  struct stat st {};
  if (::lstat(p.c_str(), &st) != 0) throw std::runtime_error("lstat " + p.string());
  return st.st_ino;
}

bool shares_blocks(const fs::path& p) {
  int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("open " + p.string());
  ::fsync(fd);  // delayed allocation: extents are known once written back
  constexpr unsigned kMax = 64;
  std::vector<char> buf(sizeof(fiemap) + kMax * sizeof(fiemap_extent), 0);
  auto* fm = reinterpret_cast<fiemap*>(buf.data());
  fm->fm_length = FIEMAP_MAX_OFFSET;
  fm->fm_flags = FIEMAP_FLAG_SYNC;
  fm->fm_extent_count = kMax;
  int rc = ::ioctl(fd, FS_IOC_FIEMAP, fm);
  ::close(fd);
  if (rc != 0) return false;
  for (unsigned i = 0; i < fm->fm_mapped_extents; ++i)
    if (fm->fm_extents[i].fe_flags & FIEMAP_EXTENT_SHARED) return true;
  return false;
}

std::string tree_digest(const fs::path& root) {
  // The state once a command's detached deleter is done: what a test compares.
  settle_litter(root);
  std::vector<std::string> lines;
  struct stat rst {};
  if (::lstat(root.c_str(), &rst) != 0) return "<missing>";
  lines.push_back(". dir " + std::to_string(rst.st_mode & 07777));
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
    struct stat st {};
    ::lstat(it->path().c_str(), &st);
    std::string rel = it->path().lexically_relative(root).string();
    std::string mode = std::to_string(st.st_mode & 07777);
    if (S_ISLNK(st.st_mode))
      lines.push_back(rel + " link " + fs::read_symlink(it->path()).string());
    else if (S_ISDIR(st.st_mode))
      lines.push_back(rel + " dir " + mode);
    else if (S_ISREG(st.st_mode))
      lines.push_back(rel + " file " + mode + " " + file_sha256(it->path()));
    else
      lines.push_back(rel + " other " + mode);
  }
  std::sort(lines.begin(), lines.end());
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

bool have(const std::vector<std::string>& argv) { return run(argv).rc == 0; }

namespace {
// Every Python process a test starts (the tool's interpreters, servers, workers, builds) inherits
// this, wherever the suite runs: installs and site trees digested before and after a command must
// differ only by what the tool did, never by a __pycache__ the test's own processes wrote. A test
// about bytecode turns it off for one command with "PYTHONDONTWRITEBYTECODE=" (empty is unset).
[[maybe_unused]] const bool kNoBytecodeWritten = ::setenv("PYTHONDONTWRITEBYTECODE", "1", 1) == 0;
}  // namespace

Cmd run(const std::vector<std::string>& argv, const fs::path& cwd, const std::vector<std::string>& env) {
  RunOptions o;
  o.output = Output::capture;
  o.cwd = cwd;
  o.env_set = env;
  RunResult r = run_process(argv, o);
  if (!r.exec_error.empty()) throw std::runtime_error(r.exec_error);
  return {r.term_signal ? 128 + r.term_signal : r.exit_code, r.out, r.err};
}

const char* overlay_binary() {
  const char* env = std::getenv("OVERLAY_BIN");
  return env && *env ? env : OVERLAY_BIN;
}

fs::path source_dir() {
  const char* env = std::getenv("OVERLAY_SOURCE_DIR");
  return env && *env ? fs::path(env) : fs::path(OVERLAY_SOURCE_DIR);
}

fs::path shared_reference() { return source_dir().parent_path() / "shared/reference"; }

std::string missing_shared_reference(const std::string& rel) {
  fs::path p = rel.empty() ? shared_reference() : shared_reference() / rel;
  if (fs::exists(p)) return "";
  return "needs " + p.string() + ", which is not here (upstream's scripts: keep shared/ beside the checkout)";
}

bool shared_reference_required() {
  const char* env = std::getenv("OVERLAY_REQUIRE_SHARED");
  return env != nullptr && *env != '\0' && std::string(env) != "0";
}

Cmd run_overlay(const std::vector<std::string>& args, const fs::path& cwd, const std::vector<std::string>& env) {
  std::vector<std::string> argv{overlay_binary()};
  argv.insert(argv.end(), args.begin(), args.end());
  return run(argv, cwd, env);
}

void expect_refused_unchanged(const std::vector<std::vector<std::string>>& cases, const fs::path& root,
                              const std::function<Cmd(const std::vector<std::string>&)>& run_case) {
  std::string before = tree_digest(root);
  for (const auto& c : cases) {
    Cmd r = run_case(c);
    std::string shown;
    for (const auto& w : c) shown += w + " ";
    EXPECT_GT(r.rc, 0) << shown;
    EXPECT_LT(r.rc, 128) << shown;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << shown << "-> " << r.err;
    EXPECT_EQ(r.out, "") << shown;
    EXPECT_EQ(tree_digest(root), before) << shown;
  }
}

pid_t spawn_overlay(const std::vector<std::string>& args, const std::vector<std::string>& env) {
  pid_t pid = ::fork();
  if (pid == 0) {
    int devnull = ::open("/dev/null", O_WRONLY);
    ::dup2(devnull, 1);
    ::dup2(devnull, 2);
    for (const auto& kv : env) ::putenv(const_cast<char*>(kv.c_str()));
    std::vector<char*> argv{const_cast<char*>(overlay_binary())};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

int wait_rc(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string c_extension_source(const std::string& name, int value) {
  return "#define PY_SSIZE_T_CLEAN\n#include <Python.h>\n"
         "static PyObject* value(PyObject* s, PyObject* a) { (void)s; (void)a; return PyLong_FromLong(" +
         std::to_string(value) +
         "); }\n"
         "static PyMethodDef M[] = {{\"value\", value, METH_NOARGS, \"\"}, {0, 0, 0, 0}};\n"
         "static struct PyModuleDef D = {PyModuleDef_HEAD_INIT, \"" +
         name +
         "\", 0, -1, M, 0, 0, 0, 0};\n"
         "PyMODINIT_FUNC PyInit_" +
         name + "(void) { return PyModule_Create(&D); }\n";
}

Install make_install(const fs::path& root) {
  Install in;
  in.root = root;
  in.source = root / "src/kernel.cpp";
  in.artifact = root / "lib/libk.so";
  in.cache = root / "cache";
  write_file(in.source, "int kernel() { return 4; }\n");
  write_file(in.artifact, std::string(100000, 'A') + "original library\n", 0755);
  // Built an hour ago, as an installed library is: add-native waits out the second a tracked
  // artifact was written in (whole-second build tools), which would make every test wait.
  fs::last_write_time(in.artifact, fs::file_time_type::clock::now() - std::chrono::hours(1));
  write_file(in.cache / "a/b/deep.bin", "deep entry\n");
  write_file(in.cache / "tool.sh", "#!/bin/sh\necho hi\n", 0755);
  write_file(in.cache / "ro.txt", "read only\n", 0444);
  fs::create_directories(in.cache / "empty");
  fs::create_symlink("a/b/deep.bin", in.cache / "link");
  fs::create_symlink("/nonexistent/target", in.cache / "dangling");
  return in;
}

}  // namespace overlay::test
