// fold (issue 63): the loop's end as true as add and revert. The library's fold driven in a child
// that dies (as kill -9 would: no unwinding) at an exact step, then settled by the binary as
// docs/cli.md says: running the same fold again.
#include "overlay/fold.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "overlay/manifest.hpp"

#include "faulty_disk.hpp"
#include "test_util.hpp"

using namespace overlay;
using namespace overlay::test;

namespace {

struct FoldKilled : ::testing::Test {
  TempDir t;
  Install in = make_install(t / "inst");
  std::string pristine = tree_digest(in.root);
  std::vector<std::string> env{"OVERLAY_STATE_DIR=" + (t / "state").string()};

  Cmd run(std::vector<std::string> args) { return run_overlay(args, t.path(), env); }
  // An entry rebuilding the library and invalidating the cache, kept aside (auto, same filesystem).
  Cmd add(const std::string& overlay, int v, std::vector<std::string> extra = {}) {
    fs::path p = t / ("k" + std::to_string(v) + ".cpp");
    write_file(p, "int kernel() { return " + std::to_string(v) + "; }\n");
    std::vector<std::string> a{"add-native",
                               "--overlay",
                               (t / overlay).string(),
                               "--target",
                               in.source.string(),
                               "--patched-file",
                               p.string(),
                               "--artifact",
                               in.artifact.string(),
                               "--invalidate-cache",
                               in.cache.string(),
                               "--build-cwd",
                               in.root.string(),
                               "--build-cmd",
                               "sh -c 'mkdir -p cache && date +%N > cache/built && cat src/kernel.cpp > lib/libk.so'"};
    a.insert(a.end(), extra.begin(), extra.end());
    return run(a);
  }
  // Names in the install's directories that hold "overlay-trash" (what a purge has not taken yet).
  std::vector<std::string> trash_in_install() {
    std::vector<std::string> out;
    for (const auto& e : fs::recursive_directory_iterator(in.root))
      if (e.path().filename().string().find(".overlay-trash-") != std::string::npos) out.push_back(e.path().string());
    return out;
  }
};

// Runs fold in a child that _exits at the first directory fsync after a rename of an aside copy:
// the copy renamed to its trash name, the record that names that trash not yet written.
int fold_killed_after_trash_rename(const fs::path& from, const fs::path& into, const fs::path& state) {
  pid_t pid = ::fork();
  if (pid == 0) {
    FaultyDisk disk(real_disk());
    bool renamed = false;
    disk.before_op = [&](const char* op, const fs::path& path) {
      if (renamed && std::string(op) == "fsync") ::_exit(9);
      renamed = std::string(op) == "rename" && path.filename().string().find(".overlay-aside-") != std::string::npos;
    };
    FoldRequest req{from, into, 30, state, false};
    try {
      fold_overlay(disk, req);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "fold: %s\n", e.what());
      ::_exit(1);
    }
    ::_exit(0);
  }
  return wait_rc(pid);
}

}  // namespace

// A candidate stacked on the accepted overlay, both keeping the one cache aside: the fold merges
// the cache, and the candidate's aside copy (the accepted build of it) goes to trash. Killed right
// after that rename, the trash is named by no record; the fold run again must find it by name,
// finish the fold and exit 0, and the final revert must leave the install as it was.
TEST_F(FoldKilled, AfterTheTrashRenameItsTrashIsFoundAndTheSameFoldExitsZero) {
  ASSERT_EQ(add("acc", 5).rc, 0);
  Cmd c = add("cand", 6, {"--over", (t / "acc").string()});
  ASSERT_EQ(c.rc, 0) << c.err;
  auto cm = load_manifest(real_disk(), t / "cand");
  ASSERT_TRUE(cm && cm->natives.size() == 1 && cm->natives[0].caches.size() == 1 && cm->natives[0].caches[0].aside)
      << "the candidate's cache was not kept aside: the shape under test needs it";
  ASSERT_EQ(fold_killed_after_trash_rename(t / "cand", t / "acc", t / "state"), 9)
      << "the fold never renamed an aside copy to trash";
  ASSERT_FALSE(trash_in_install().empty()) << "the kill left no trash: the shape under test needs it";

  Cmd again = run({"fold", "--from", (t / "cand").string(), "--into", (t / "acc").string()});
  EXPECT_EQ(again.rc, 0) << again.out << again.err;
  EXPECT_NE(again.out.find("is folded into " + (t / "acc").string() + " (fold "), std::string::npos) << again.out;
  ASSERT_TRUE(settle_litter(in.root));
  EXPECT_EQ(trash_in_install(), std::vector<std::string>{});
  // A fold that ended leaves no mark: once more is nothing to fold, as for any empty candidate.
  EXPECT_EQ(run({"fold", "--from", (t / "cand").string(), "--into", (t / "acc").string()}).rc, 1);

  ASSERT_EQ(run({"revert", "--overlay", (t / "acc").string()}).rc, 0);
  ASSERT_TRUE(settle_litter(in.root));
  EXPECT_EQ(tree_digest(in.root), pristine);
  Cmd clean = run({"status", "--all", "--check-clean"});
  EXPECT_EQ(clean.rc, 0) << clean.out << clean.err;
}

// A candidate that was never folded and has no entry: still nothing to fold (exit 1).
TEST_F(FoldKilled, AnEmptyCandidateNeverFoldedIsStillNothingToFold) {
  ASSERT_EQ(add("cand", 6).rc, 0);
  ASSERT_EQ(run({"revert", "--overlay", (t / "cand").string()}).rc, 0);
  Cmd f = run({"fold", "--from", (t / "cand").string(), "--into", (t / "acc").string()});
  EXPECT_EQ(f.rc, 1) << f.out;
  EXPECT_NE(f.err.find("nothing to fold"), std::string::npos) << f.err;
}

// Issue 63: a candidate whose build failed after it rewrote the library (verify then passes) is
// not accepted: fold refuses it, nothing changed; its record and status say the build failed.
TEST_F(FoldKilled, ACandidateWhoseBuildFailedIsRefused) {
  fs::path p = t / "k7.cpp";
  write_file(p, "int kernel() { return 7; }\n");
  Cmd a = run({"add-native", "--overlay", (t / "cand").string(), "--target", in.source.string(), "--patched-file",
               p.string(), "--artifact", in.artifact.string(), "--build-cwd", in.root.string(), "--build-cmd",
               "sh -c 'cat src/kernel.cpp > lib/libk.so && exit 3'"});
  ASSERT_EQ(a.rc, 1) << a.out << a.err;
  EXPECT_EQ(run({"verify-native", "--overlay", (t / "cand").string()}).rc, 0) << "the shape: verify passes";
  auto m = load_manifest(real_disk(), t / "cand");
  ASSERT_TRUE(m && m->natives.size() == 1 && m->natives[0].build_failed);
  EXPECT_NE(m->natives[0].build_failed->find("exit 3"), std::string::npos) << *m->natives[0].build_failed;
  Cmd s = run({"status", "--overlay", (t / "cand").string()});
  EXPECT_NE(s.out.find("  build     FAILED ("), std::string::npos) << s.out;
  std::string before = tree_digest(t.path());
  Cmd f = run({"fold", "--from", (t / "cand").string(), "--into", (t / "acc").string()});
  EXPECT_EQ(f.rc, 1) << f.out;
  EXPECT_NE(f.err.find("the candidate's build failed (entry " + m->natives[0].id), std::string::npos) << f.err;
  EXPECT_EQ(tree_digest(t.path()), before);
  ASSERT_EQ(run({"revert", "--overlay", (t / "cand").string()}).rc, 0);
  ASSERT_TRUE(settle_litter(in.root));
  EXPECT_EQ(tree_digest(in.root), pristine);
}
