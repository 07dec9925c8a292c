// A real full filesystem (a small tmpfs): ENOSPC while backing up refuses cleanly; ENOSPC while
// restoring is reported, keeps the entry, and a later revert (with space) restores exactly.
// Skips with the reason where this machine does not allow mounting a tmpfs.
#include <sys/mount.h>

#include <cerrno>
#include <cstring>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util.hpp"

using namespace overlay::test;
using json = nlohmann::json;

namespace {

class SmallTmpfs {
 public:
  SmallTmpfs(const fs::path& at, const std::string& size) : at_(at) {
    fs::create_directories(at);
    if (::mount("tmpfs", at.c_str(), "tmpfs", 0, ("size=" + size).c_str()) != 0) error_ = std::strerror(errno);
  }
  ~SmallTmpfs() {
    if (error_.empty()) ::umount2(at_.c_str(), MNT_DETACH);
  }
  const std::string& error() const { return error_; }

 private:
  fs::path at_;
  std::string error_;
};

// Fills the filesystem holding dir until a write fails; returns the filler's path.
fs::path fill(const fs::path& dir) {
  fs::path f = dir / "filler";
  Cmd c = run({"sh", "-c", "cat /dev/zero > " + f.string() + " 2>/dev/null; true"});
  return f;
}

}  // namespace

TEST(FullFilesystem, BackupOnFullDiskRefusedInstallUntouched) {
  TempDir t;
  SmallTmpfs fs_(t / "small", "1m");
  if (!fs_.error().empty()) GTEST_SKIP() << "cannot mount a tmpfs here: " << fs_.error();
  Install in = make_install(t / "inst");
  write_file(in.artifact, std::string(3 << 20, 'a'));  // larger than the overlay's filesystem
  std::string before = tree_digest(in.root);
  write_file(t / "patched.cpp", "int kernel() { return 7; }\n");
  std::vector<std::string> state{"OVERLAY_STATE_DIR=" + (t / "state").string()};
  Cmd a = run_overlay({"add-native", "--overlay", (t / "small/ov").string(), "--target", in.source.string(),
                       "--patched-file", (t / "patched.cpp").string(), "--artifact", in.artifact.string()},
                      {}, state);
  EXPECT_EQ(a.rc, 1);
  EXPECT_NE(a.err.find("No space left on device"), std::string::npos) << a.err;
  EXPECT_EQ(std::count(a.err.begin(), a.err.end(), '\n'), 1);
  EXPECT_EQ(tree_digest(in.root), before);
  EXPECT_FALSE(fs::exists(t / "small/ov/_overlay_manifest.json"));
  EXPECT_TRUE(fs::is_empty(t / "small/ov/_native_backup"));  // no half-made backup left
}

TEST(FullFilesystem, RestoreOnFullDiskReportedThenCompleted) {
  TempDir t;
  SmallTmpfs fs_(t / "small", "4m");
  if (!fs_.error().empty()) GTEST_SKIP() << "cannot mount a tmpfs here: " << fs_.error();
  Install in = make_install(t / "small/inst");
  write_file(in.artifact, std::string(1 << 20, 'a'));
  std::string before = tree_digest(in.root);
  write_file(t / "patched.cpp", "int kernel() { return 7; }\n");
  std::vector<std::string> state{"OVERLAY_STATE_DIR=" + (t / "state").string()};
  Cmd a = run_overlay({"add-native", "--overlay", (t / "ov").string(), "--target", in.source.string(), "--patched-file",
                       (t / "patched.cpp").string(), "--artifact", in.artifact.string(), "--invalidate-cache",
                       in.cache.string(), "--build-cmd", "sh -c 'echo rebuilt > " + in.artifact.string() + "'"},
                      {}, state);
  ASSERT_EQ(a.rc, 0) << a.err;
  fs::path filler = fill(t / "small");
  Cmd r = run_overlay({"revert", "--overlay", (t / "ov").string()}, {}, state);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("No space left on device"), std::string::npos) << r.err;
  EXPECT_EQ(json::parse(read_file(t / "ov/_overlay_manifest.json"))["natives"].size(), 1u);
  fs::remove(filler);
  r = run_overlay({"revert", "--overlay", (t / "ov").string()}, {}, state);
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(tree_digest(in.root), before);
}

// The overlay's filesystem fills while the build's output goes into its log: the build still
// runs to the end (its output reaches stderr), and add-native says the log is incomplete and why,
// on stderr and in --json; the entry reverts exactly once there is room.
TEST(FullFilesystem, ABuildLogCutShortByAFullDiskIsReported) {
  TempDir t;
  SmallTmpfs fs_(t / "small", "1m");
  if (!fs_.error().empty()) GTEST_SKIP() << "cannot mount a tmpfs here: " << fs_.error();
  Install in = make_install(t / "inst");
  std::string before = tree_digest(in.root);
  write_file(t / "patched.cpp", "int kernel() { return 7; }\n");
  std::vector<std::string> state{"OVERLAY_STATE_DIR=" + (t / "state").string()};
  for (const char* mode : {"text", "json"}) {
    std::vector<std::string> args{
        "add-native",
        "--overlay",
        (t / "small/ov").string(),
        "--target",
        in.source.string(),
        "--patched-file",
        (t / "patched.cpp").string(),
        "--artifact",
        in.artifact.string(),
        "--build-cwd",
        in.root.string(),
        "--build-cmd",
        "sh -c 'head -c 3000000 /dev/zero | tr \"\\0\" x; echo; echo build-done; cp src/kernel.cpp lib/libk.so'",
        "--rebuild"};  // the second round's build must run too: its log is the point
    if (std::string(mode) == "json") args.insert(args.begin(), "--json");
    Cmd a = run_overlay(args, {}, state);
    ASSERT_EQ(a.rc, 0) << mode << ": " << a.err.substr(a.err.size() > 2000 ? a.err.size() - 2000 : 0);
    EXPECT_NE(a.err.find("build-done"), std::string::npos) << mode;  // the whole output reached stderr
    EXPECT_NE(a.err.find("is incomplete ("), std::string::npos) << mode;
    EXPECT_NE(a.err.find("No space left on device"), std::string::npos) << mode;
    EXPECT_EQ(read_file(in.artifact), "int kernel() { return 7; }\n");
    if (std::string(mode) == "json") {
      json j = json::parse(a.out);
      EXPECT_NE(j["build"].value("log_error", "").find("No space left on device"), std::string::npos) << a.out;
    }
    for (const auto& e : fs::recursive_directory_iterator(t / "small/ov/_logs"))
      if (e.is_regular_file()) fs::resize_file(e.path(), 0);  // room for revert's manifest write
    Cmd r = run_overlay({"revert", "--overlay", (t / "small/ov").string()}, {}, state);
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(tree_digest(in.root), before);
  }
}
