// Issue 31: the shapes real servers have, through the real binary. A container's install reached
// through a bind mount or on overlayfs, several agents racing for one target, a read-only
// install, names as long as NAME_MAX allows, setuid artifacts. Each mounts what it needs (root;
// skipped, saying why, where mounting is refused).
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util.hpp"

using namespace overlay::test;
using json = nlohmann::json;

namespace {

// An install whose build (`cp src/kernel.cpp lib/libk.so`, a fresh cache) makes the artifact of
// whatever source is in place: candidate bytes are visible in both.
struct Field : ::testing::Test {
  TempDir t;
  std::vector<std::string> state{"OVERLAY_STATE_DIR=" + (t / "state").string()};

  Cmd add(const Install& in, const fs::path& ov, const std::string& body, std::vector<std::string> extra = {}) {
    write_file(t / "patched.cpp", body);
    std::vector<std::string> a{"add-native",
                               "--overlay",
                               ov.string(),
                               "--target",
                               in.source.string(),
                               "--patched-file",
                               (t / "patched.cpp").string(),
                               "--artifact",
                               in.artifact.string(),
                               "--invalidate-cache",
                               in.cache.string(),
                               "--build-cwd",
                               in.root.string(),
                               "--build-cmd",
                               "sh -c 'cp src/kernel.cpp lib/libk.so && mkdir -p cache && echo new > cache/f'"};
    a.insert(a.end(), extra.begin(), extra.end());
    return run_overlay(a, {}, state);
  }
  Cmd revert(const fs::path& ov) { return run_overlay({"revert", "--overlay", ov.string()}, {}, state); }
};

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::atoi(v) : fallback;
}

}  // namespace

// docker run -v: the install is reached through a bind mount of a directory on the overlay's own
// filesystem (same st_dev, another mount), where rename says EXDEV.
TEST_F(Field, ABindMountedInstallIsAppliedAndRevertedByteExact) {
  fs::create_directories(t / "real");
  fs::create_directories(t / "mnt");
  auto m = ScopedMount::bind(t / "real", t / "mnt");
  if (!m->ok()) GTEST_SKIP() << m->why();
  Install in = make_install(t / "mnt/inst");
  std::string before = tree_digest(in.root);
  Cmd a = add(in, t / "ov", "int kernel() { return 7; }\n");
  ASSERT_EQ(a.rc, 0) << a.err;
  EXPECT_EQ(read_file(in.artifact), "int kernel() { return 7; }\n");
  EXPECT_EQ(run_overlay({"verify-native", "--overlay", (t / "ov").string()}, {}, state).out,
            "FRESH_BUILD_OK (checked 1)\n");
  Cmd r = revert(t / "ov");
  ASSERT_EQ(r.rc, 0) << r.err;
  ASSERT_TRUE(settle_litter(in.root));
  EXPECT_EQ(tree_digest(in.root), before);
  EXPECT_EQ(run_overlay({"status", "--overlay", (t / "ov").string(), "--check-clean"}, {}, state).rc, 0);
  // `move` renames the cache beside itself on its own filesystem, as `aside` does: the overlay on
  // another mount is no reason to refuse it any more (issue 62), and nothing comes into the overlay.
  Cmd mv = add(in, t / "ov", "int kernel() { return 8; }\n", {"--cache-snapshot", "move"});
  ASSERT_EQ(mv.rc, 0) << mv.err;
  json mj = json::parse(read_file(t / "ov/_overlay_manifest.json"));
  EXPECT_TRUE(mj["natives"][0]["caches"].back().contains("aside")) << mj.dump();
  ASSERT_EQ(revert(t / "ov").rc, 0);
  ASSERT_TRUE(settle_litter(in.root));
  EXPECT_EQ(tree_digest(in.root), before);
}

// The overlay reached through another mount at revert than at add-native (a container that binds
// the host's overlay dir): a cache an earlier version moved into it and the files backed up in it
// go back by copy.
TEST_F(Field, AnOverlayReachedThroughABindMountAtRevertRestoresItsMovedCache) {
  Install in = make_install(t / "inst");
  std::string before = tree_digest(in.root);
  Cmd a = add(in, t / "ov", "int kernel() { return 7; }\n", {"--cache-snapshot", "move"});
  ASSERT_EQ(a.rc, 0) << a.err;
  record_caches_as_moved_in(t / "ov");
  json mj = json::parse(read_file(t / "ov/_overlay_manifest.json"));
  ASSERT_TRUE(mj["natives"][0]["caches"].back().contains("backup_dir")) << mj.dump();  // moved in, by rename
  fs::create_directories(t / "ovmnt");
  auto m = ScopedMount::bind(t / "ov", t / "ovmnt");
  if (!m->ok()) GTEST_SKIP() << m->why();
  Cmd r = run_overlay({"revert", "--overlay", (t / "ovmnt").string()}, {}, state);
  ASSERT_EQ(r.rc, 0) << r.err;
  ASSERT_TRUE(settle_litter(in.root));
  EXPECT_EQ(tree_digest(in.root), before);
}

// A container's root: the install in an image's lower layer, seen through overlayfs, with the
// overlay dir inside the container too. A directory of the lower layer cannot be renamed there
// (EXDEV), so the cache is kept as a tar and emptied in place; files rename (copy-up) as usual.
TEST_F(Field, AnInstallOnOverlayfsIsAppliedAndRevertedByteExact) {
  for (const char* d : {"lower", "upper", "work", "merged"}) fs::create_directories(t / d);
  make_install(t / "lower/inst");
  auto m = ScopedMount::overlayfs(t / "lower", t / "upper", t / "work", t / "merged");
  if (!m->ok()) GTEST_SKIP() << m->why();
  Install in{t / "merged/inst", t / "merged/inst/src/kernel.cpp", t / "merged/inst/lib/libk.so",
             t / "merged/inst/cache"};
  std::string before = tree_digest(in.root);
  Cmd a = add(in, t / "merged/ov", "int kernel() { return 7; }\n");
  ASSERT_EQ(a.rc, 0) << a.err;
  EXPECT_EQ(read_file(in.artifact), "int kernel() { return 7; }\n");
  EXPECT_EQ(read_file(in.cache / "f"), "new\n");
  Cmd r = revert(t / "merged/ov");
  ASSERT_EQ(r.rc, 0) << r.err;
  ASSERT_TRUE(settle_litter(in.root));
  EXPECT_EQ(tree_digest(in.root), before);
  Cmd aside = add(in, t / "merged/ov", "int kernel() { return 8; }\n", {"--cache-snapshot", "aside"});
  EXPECT_NE(aside.rc, 0);
  EXPECT_NE(aside.err.find("overlayfs"), std::string::npos) << aside.err;
  EXPECT_EQ(tree_digest(in.root), before);
}

// Two, four and eight agents start add-native on one target at once, each with its own overlay
// and candidate: exactly one wins each round, whatever the timing; while it is applied no check
// says clean; after it is reverted the install is the original and every check says clean.
TEST_F(Field, AgentsRacingForOneTargetExactlyOneWinsEachRound) {
  Install in = make_install(t / "inst");
  std::string before = tree_digest(in.root);
  const int rounds = env_int("OVERLAY_FIELD_ROUNDS", 8);
  int total = 0;
  for (int agents : {2, 4, 8}) {
    for (int round = 0; round < rounds; ++round, ++total) {
      std::vector<pid_t> pids;
      for (int k = 0; k < agents; ++k) {
        fs::path patched = t / ("cand" + std::to_string(k) + ".cpp");
        write_file(patched, "int kernel() { return " + std::to_string(100 + k) + "; }\n");
        pids.push_back(
            spawn_overlay({"add-native", "--overlay", (t / ("ov" + std::to_string(k))).string(), "--target",
                           in.source.string(), "--patched-file", patched.string(), "--artifact", in.artifact.string(),
                           "--invalidate-cache", in.cache.string(), "--build-cwd", in.root.string(), "--build-cmd",
                           "sh -c 'cp src/kernel.cpp lib/libk.so && mkdir -p cache && echo new > cache/f'"},
                          state));
      }
      std::vector<int> winners;
      for (int k = 0; k < agents; ++k)
        if (wait_rc(pids[k]) == 0) winners.push_back(k);
      ASSERT_EQ(winners.size(), 1u) << agents << " agents, round " << round;
      std::string won = (t / ("ov" + std::to_string(winners[0]))).string();
      EXPECT_EQ(read_file(in.source), "int kernel() { return " + std::to_string(100 + winners[0]) + "; }\n");
      EXPECT_EQ(run_overlay({"status", "--all", "--check-clean"}, {}, state).rc, 1);
      Cmd all = run_overlay({"status", "--all"}, {}, state);
      EXPECT_NE(all.out.find("status: 1 overlay(s) known to the holds registry"), std::string::npos) << all.out;
      ASSERT_EQ(revert(won).rc, 0);
      ASSERT_TRUE(settle_litter(in.root));
      ASSERT_EQ(tree_digest(in.root), before) << agents << " agents, round " << round;
      for (int k = 0; k < agents; ++k) {
        fs::path ov = t / ("ov" + std::to_string(k));
        if (!fs::exists(ov)) continue;  // a loser refused before it made anything
        EXPECT_EQ(run_overlay({"status", "--overlay", ov.string(), "--check-clean"}, {}, state).rc, 0) << ov;
        EXPECT_TRUE(!fs::exists(ov / "_native_backup") || fs::is_empty(ov / "_native_backup")) << ov;
      }
      EXPECT_EQ(run_overlay({"status", "--all", "--check-clean"}, {}, state).rc, 0);
    }
  }
  std::printf("field race: %d rounds (2, 4 and 8 agents, %d each): exactly one winner in every round\n", total, rounds);
}

// A read-only install (a read-only bind mount, as images mount them): refused before any entry or
// hold exists, so the next add-native, once the install is writable, is not refused as held.
TEST_F(Field, AReadOnlyInstallIsRefusedBeforeAnythingIsRecorded) {
  Install in = make_install(t / "inst");
  std::string before = tree_digest(in.root);
  {
    auto ro = ScopedMount::read_only(in.root);
    if (!ro->ok()) GTEST_SKIP() << ro->why();
    Cmd a = add(in, t / "ov", "int kernel() { return 7; }\n");
    EXPECT_NE(a.rc, 0);
    EXPECT_NE(a.err.find("cannot write the install: the directory of " + in.source.string() + " is read-only"),
              std::string::npos)
        << a.err;
    EXPECT_EQ(std::count(a.err.begin(), a.err.end(), '\n'), 1) << a.err;
    EXPECT_FALSE(fs::exists(t / "ov/_overlay_manifest.json"));
    Cmd all = run_overlay({"status", "--all"}, {}, state);
    EXPECT_NE(all.out.find("status: 0 overlay(s) known to the holds registry"), std::string::npos) << all.out;
  }
  EXPECT_EQ(tree_digest(in.root), before);
  Cmd b = add(in, t / "ov2", "int kernel() { return 8; }\n");
  ASSERT_EQ(b.rc, 0) << b.err;
  ASSERT_EQ(revert(t / "ov2").rc, 0);
  ASSERT_TRUE(settle_litter(in.root));
  EXPECT_EQ(tree_digest(in.root), before);
}

// Names of 255 bytes (NAME_MAX) for the source, the artifact and the cache dir: the tool's own
// temp, backup and aside names stay within NAME_MAX.
TEST_F(Field, NamesOfNameMaxBytesArePatchedAndRestored) {
  std::string stem(251, 'k');
  Install in{t / "inst", t / "inst/src" / (stem + ".cpp"), t / "inst/lib" / (stem + ".so"),
             t / "inst" / std::string(255, 'c')};
  write_file(in.source, "int kernel() { return 4; }\n");
  write_file(in.artifact, "original library\n", 0755);
  fs::last_write_time(in.artifact, fs::file_time_type::clock::now() - std::chrono::hours(1));
  write_file(in.cache / "entry", "cached\n");
  std::string before = tree_digest(in.root);
  std::string so = "lib/" + in.artifact.filename().string(), cache = in.cache.filename().string();
  for (const char* way : {"move", "aside", "tar"}) {
    write_file(t / "patched.cpp", "int kernel() { return 7; }\n");
    Cmd a =
        run_overlay({"add-native", "--overlay", (t / "ov").string(), "--target", in.source.string(), "--patched-file",
                     (t / "patched.cpp").string(), "--artifact", in.artifact.string(), "--invalidate-cache",
                     in.cache.string(), "--cache-snapshot", way, "--build-cwd", in.root.string(), "--build-cmd",
                     "sh -c 'cp src/" + in.source.filename().string() + " " + so + " && mkdir -p " + cache + "'"},
                    {}, state);
    ASSERT_EQ(a.rc, 0) << way << ": " << a.err;
    EXPECT_EQ(read_file(in.artifact), "int kernel() { return 7; }\n");
    Cmd r = revert(t / "ov");
    ASSERT_EQ(r.rc, 0) << way << ": " << r.err;
    ASSERT_TRUE(settle_litter(in.root));
    EXPECT_EQ(tree_digest(in.root), before) << way;
  }
}

// A setuid, setgid artifact of another user, which the build (as root) recreates: the restore
// gives back the recorded owner, not the builder, and the bits chown clears (owner set last
// would hand back 0755 for 06755).
TEST_F(Field, ASetuidArtifactComesBackWithItsSetuidBits) {
  Install in = make_install(t / "inst");
  ASSERT_EQ(::chown(in.artifact.c_str(), 65534, 65534), 0);
  ASSERT_EQ(::chmod(in.artifact.c_str(), 06755), 0);  // after chown, which clears the bits
  std::string before = tree_digest(in.root);
  write_file(t / "patched.cpp", "int kernel() { return 7; }\n");
  Cmd a = run_overlay({"add-native", "--overlay", (t / "ov").string(), "--target", in.source.string(), "--patched-file",
                       (t / "patched.cpp").string(), "--artifact", in.artifact.string(), "--build-cwd",
                       in.root.string(), "--build-cmd", "sh -c 'rm lib/libk.so && cp src/kernel.cpp lib/libk.so'"},
                      {}, state);
  ASSERT_EQ(a.rc, 0) << a.err;
  struct stat built {};
  ASSERT_EQ(::stat(in.artifact.c_str(), &built), 0);
  EXPECT_EQ(built.st_uid, ::geteuid());  // the builder's now
  ASSERT_EQ(revert(t / "ov").rc, 0);
  struct stat st {};
  ASSERT_EQ(::stat(in.artifact.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 06755u);
  EXPECT_EQ(st.st_uid, 65534u);
  ASSERT_TRUE(settle_litter(in.root));
  EXPECT_EQ(tree_digest(in.root), before);
}

// Root asked to revert an overlay another user owns (its manifest decides what is written where):
// refused in one line naming the owner, nothing changed; status and verify-native the same;
// --trust-owner (or $OVERLAY_TRUSTED_ROOTS) says it is trusted, and then it is reverted.
TEST_F(Field, AnOverlayAnotherUserOwnsIsActedOnOnlyWhenTrusted) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (to hand the overlay to nobody)";
  Install in = make_install(t / "inst");
  std::string before = tree_digest(in.root);
  ASSERT_EQ(add(in, t / "ov", "int kernel() { return 7; }\n").rc, 0);
  ASSERT_EQ(run({"chown", "-R", "65534:65534", (t / "ov").string()}).rc, 0);
  std::string patched = tree_digest(in.root);
  const std::string ov = (t / "ov").string();
  for (std::vector<std::string> cmd : {std::vector<std::string>{"revert", "--overlay", ov},
                                       {"status", "--overlay", ov},
                                       {"verify-native", "--overlay", ov}}) {
    Cmd c = run_overlay(cmd, {}, state);
    EXPECT_NE(c.rc, 0) << cmd[0];
    EXPECT_NE(c.err.find("overlay directory " + ov + " is owned by another user (uid 65534)"), std::string::npos)
        << c.err;
    EXPECT_EQ(std::count(c.err.begin(), c.err.end(), '\n'), 1) << c.err;
    EXPECT_EQ(tree_digest(in.root), patched) << cmd[0];
  }
  std::vector<std::string> trusted = state;
  trusted.push_back("OVERLAY_TRUSTED_ROOTS=/nonexistent:" + t.path().string());
  EXPECT_EQ(run_overlay({"status", "--overlay", ov}, {}, trusted).rc, 0);
  Cmd r = run_overlay({"revert", "--overlay", ov, "--trust-owner"}, {}, state);
  ASSERT_EQ(r.rc, 0) << r.err;
  ASSERT_TRUE(settle_litter(in.root));
  EXPECT_EQ(tree_digest(in.root), before);
}

// File names that are not UTF-8 (legal on Linux) for the target, the artifact and a file the
// build writes that nothing tracks: the manifest keeps them as the bytes they are (Python's
// "\udcXX" escapes), so the traced build's change is recorded and revert removes the file;
// overlay_setup.py reverts what it reads of ours, and we revert what it wrote.
TEST_F(Field, NamesThatAreNotUtf8AreBytesEndToEnd) {
  const std::string k = std::string("k") + '\xfe' + "rn", so = std::string("lib") + '\xff' + ".so";
  const std::string stale = std::string("stale") + '\xfe' + ".o";
  Install in{t / "inst", t / "inst/src" / (k + ".cpp"), t / "inst/lib" / so, t / "inst/cache"};
  write_file(in.source, "int kernel() { return 4; }\n");
  write_file(in.artifact, "original library\n", 0755);
  fs::last_write_time(in.artifact, fs::file_time_type::clock::now() - std::chrono::hours(1));
  std::string before = tree_digest(in.root);
  write_file(t / "patched.cpp", "int kernel() { return 7; }\n");
  const std::string build = "sh -c 'cp src/" + k + ".cpp lib/" + so + " && cp src/" + k + ".cpp " + stale + "'";
  Cmd a = run_overlay({"add-native", "--overlay", (t / "ov").string(), "--target", in.source.string(), "--patched-file",
                       (t / "patched.cpp").string(), "--artifact", in.artifact.string(), "--build-cwd",
                       in.root.string(), "--build-cmd", build},
                      {}, state);
  ASSERT_EQ(a.rc, 0) << a.err;
  std::string text = read_file(t / "ov/_overlay_manifest.json");
  EXPECT_NE(text.find("k\\udcfern.cpp"), std::string::npos) << text;
  EXPECT_NE(text.find("stale\\udcfe.o"), std::string::npos) << text;  // the build's output, recorded
  EXPECT_EQ(run_overlay({"verify-native", "--overlay", (t / "ov").string()}, {}, state).out,
            "FRESH_BUILD_OK (checked 1)\n");
  Cmd r = revert(t / "ov");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(read_file(in.source), "int kernel() { return 4; }\n");
  EXPECT_EQ(read_file(in.artifact), "original library\n");
  // stale\376.o, which the traced build made, went with the revert: the install is as before.
  Cmd clean = run_overlay({"status", "--overlay", (t / "ov").string(), "--check-clean"}, {}, state);
  EXPECT_EQ(clean.rc, 0) << clean.out << clean.err;
  EXPECT_FALSE(fs::exists(in.root / stale));
  EXPECT_EQ(tree_digest(in.root), before);

  // overlay_setup.py reverts ours (it reads the names back as the bytes they are)...
  fs::path py = shared_reference() / "overlay_setup.py";
  OVERLAY_REQUIRE_SHARED_REFERENCE("overlay_setup.py");
  ASSERT_EQ(run_overlay({"add-native", "--overlay", (t / "ov2").string(), "--target", in.source.string(),
                         "--patched-file", (t / "patched.cpp").string(), "--artifact", in.artifact.string(),
                         "--build-cwd", in.root.string(), "--build-cmd", build},
                        {}, state)
                .rc,
            0);
  fs::remove(in.root / stale);
  Cmd pr = run({"python3", py.string(), "revert", "--overlay", (t / "ov2").string()});
  ASSERT_EQ(pr.rc, 0) << pr.out << pr.err;
  EXPECT_EQ(tree_digest(in.root), before);
  // ...and we revert what it wrote for the same names.
  Cmd pa = run({"python3", py.string(), "add-native", "--overlay", (t / "ov3").string(), "--target", in.source.string(),
                "--patched-file", (t / "patched.cpp").string(), "--artifact", in.artifact.string(), "--build-cwd",
                in.root.string(), "--build-cmd", build});
  ASSERT_EQ(pa.rc, 0) << pa.out << pa.err;
  EXPECT_EQ(read_file(in.artifact), "int kernel() { return 7; }\n");
  fs::remove(in.root / stale);
  Cmd our = revert(t / "ov3");
  ASSERT_EQ(our.rc, 0) << our.err;
  EXPECT_EQ(tree_digest(in.root), before);
}

// A real SIGKILL while add-native copies its backups (before its record exists) leaves an entry
// directory no manifest names; the next revert or gc-stale removes it, and the install is as it was.
TEST_F(Field, BackupsOfAnAddNativeKilledBeforeItsRecordAreSwept) {
  Install in = make_install(t / "inst");
  std::string big(128u << 20, '\0');
  for (std::size_t i = 0; i < big.size(); i += 4096) big[i] = static_cast<char>(i >> 12);
  write_file(in.artifact, big, 0755);
  big.clear();
  std::string before = tree_digest(in.root);
  write_file(t / "patched.cpp", "int kernel() { return 7; }\n");
  auto partial = [&](const fs::path& ov) {
    std::vector<fs::path> out;
    if (fs::is_directory(ov / "_native_backup"))
      for (const auto& e : fs::directory_iterator(ov / "_native_backup"))
        if (e.is_directory()) out.push_back(e.path());
    return out;
  };
  for (const char* sweeper : {"revert", "gc-stale"}) {
    fs::path ov = t / (std::string("ov-") + sweeper);
    bool killed_before_record = false;
    for (int attempt = 0; attempt < 5 && !killed_before_record; ++attempt) {
      fs::remove_all(ov);
      pid_t pid = spawn_overlay({"add-native", "--overlay", ov.string(), "--target", in.source.string(),
                                 "--patched-file", (t / "patched.cpp").string(), "--artifact", in.artifact.string(),
                                 "--build-cwd", in.root.string(), "--build-cmd", "true"},
                                state);
      // Killed once the artifact's backup is being written: its record comes only after.
      for (int i = 0; i < 20000; ++i) {
        bool copying = false;
        for (const auto& d : partial(ov))
          for (const auto& f : fs::directory_iterator(d))
            copying |= f.path().filename().string().find("libk.so") != std::string::npos;
        if (copying) break;
        ::usleep(200);
      }
      ::kill(pid, SIGKILL);
      wait_rc(pid);
      killed_before_record = !fs::exists(ov / "_overlay_manifest.json") && !partial(ov).empty();
      if (!killed_before_record) {
        ASSERT_EQ(revert(ov).rc, 0);
      }
    }
    ASSERT_TRUE(killed_before_record) << "the kill never landed during the backup";
    EXPECT_EQ(tree_digest(in.root), before);
    Cmd r = std::string(sweeper) == "revert" ? revert(ov) : run_overlay({"gc-stale", "--root", ov.string()}, {}, state);
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_TRUE(partial(ov).empty()) << sweeper;
    EXPECT_NE(r.err.find("the backups of an add-native interrupted before its record"), std::string::npos) << r.err;
    EXPECT_EQ(tree_digest(in.root), before);
    // The next add-native on the target is not refused: the killed one left no hold.
    Cmd again = add(in, ov, "int kernel() { return 8; }\n");
    EXPECT_EQ(again.rc, 0) << again.err;
    ASSERT_EQ(revert(ov).rc, 0);
  }
}

// Two overlays stacked on one target with --force: reverted newest first, the install comes back
// exact; the older one first is refused in one line naming the newer (nothing changed), for it
// would leave the first patch in place with nothing on record. A source someone else changed
// after add-native is replaced by the original with a line saying so, never silently.
TEST_F(Field, ForceStackedOverlaysRevertInOrderOrAreRefused) {
  Install in = make_install(t / "inst");
  std::string before = tree_digest(in.root);
  ASSERT_EQ(add(in, t / "ov1", "int kernel() { return 1; }\n").rc, 0);
  Cmd held = add(in, t / "ov2", "int kernel() { return 2; }\n");
  EXPECT_NE(held.rc, 0);  // held by ov1 without --force
  Cmd b = add(in, t / "ov2", "int kernel() { return 2; }\n", {"--force"});
  ASSERT_EQ(b.rc, 0) << b.err;
  std::string stacked = tree_digest(in.root);
  Cmd early = revert(t / "ov1");
  EXPECT_EQ(early.rc, 1);
  EXPECT_NE(early.err.find("patched again over this entry by overlay " + (t / "ov2").string()), std::string::npos)
      << early.err;
  EXPECT_EQ(early.err.rfind("cannot restore"), early.err.find("cannot restore")) << early.err;  // one refusal line
  EXPECT_EQ(tree_digest(in.root), stacked);
  EXPECT_EQ(run_overlay({"status", "--all", "--check-clean"}, {}, state).rc, 1);
  Cmd r2 = revert(t / "ov2");
  ASSERT_EQ(r2.rc, 0) << r2.err;
  EXPECT_EQ(read_file(in.source), "int kernel() { return 1; }\n");  // ov1's patch, still on record
  EXPECT_EQ(run_overlay({"status", "--all", "--check-clean"}, {}, state).rc, 1);
  Cmd r1 = revert(t / "ov1");
  ASSERT_EQ(r1.rc, 0) << r1.err;
  ASSERT_TRUE(settle_litter(in.root));
  EXPECT_EQ(tree_digest(in.root), before);
  EXPECT_EQ(run_overlay({"status", "--all", "--check-clean"}, {}, state).rc, 0);

  ASSERT_EQ(add(in, t / "ov1", "int kernel() { return 1; }\n").rc, 0);
  write_file(in.source, "int kernel() { return 99; }  // edited by hand\n");
  Cmd d = revert(t / "ov1");
  ASSERT_EQ(d.rc, 0) << d.err;
  EXPECT_NE(d.err.find(in.source.string() + " changed since add-native patched it"), std::string::npos) << d.err;
  ASSERT_TRUE(settle_litter(in.root));
  EXPECT_EQ(tree_digest(in.root), before);
}

namespace {

// Every extended attribute of p (user., trusted., security., ACLs), as getfattr dumps them.
std::string xattr_dump(const fs::path& p) {
  Cmd c = run({"getfattr", "--absolute-names", "-h", "-d", "-m", "-", "-e", "hex", p.string()});
  return c.rc == 0 ? c.out : "getfattr failed: " + c.err;
}

}  // namespace

// A source with user. and trusted. attributes and a POSIX ACL, owned by nobody; an artifact with a
// file capability (security.capability), which the build rewrites in place (a write clears it):
// revert gives each back exactly, and status says when the patched file's metadata drifts.
TEST_F(Field, ExtendedAttributesAclsAndCapabilitiesAreRestored) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (trusted. attributes, capabilities, chown)";
  if (!have({"setfattr", "--version"}) || !have({"setfacl", "--version"}))
    GTEST_SKIP() << "no setfattr/setfacl (attr, acl)";
  Install in = make_install(t / "inst");
  ASSERT_EQ(::chown(in.source.c_str(), 65534, 65534), 0);
  ASSERT_EQ(::chmod(in.source.c_str(), 0640), 0);  // the ACL below widens the group bits (its mask) to rw
  for (std::vector<std::string> cmd :
       {std::vector<std::string>{"setfattr", "-n", "user.origin", "-v", "vendor", in.source.string()},
        {"setfattr", "-n", "trusted.overlay-test", "-v", "0x00ff10", in.source.string()},
        {"setfacl", "-m", "u:65534:rw,g:0:r", in.source.string()},
        {"setfattr", "-n", "security.capability", "-v", "0x0100000200040000000000000000000000000000",
         in.artifact.string()},
        {"setfattr", "-n", "user.built-by", "-v", "ci", in.artifact.string()}}) {
    Cmd c = run(cmd);
    if (c.rc != 0) GTEST_SKIP() << cmd[0] << " " << cmd[2] << " refused here: " << c.err;
  }
  std::string src_x = xattr_dump(in.source), art_x = xattr_dump(in.artifact), before = tree_digest(in.root);
  ASSERT_NE(src_x.find("system.posix_acl_access"), std::string::npos) << src_x;
  ASSERT_NE(art_x.find("security.capability"), std::string::npos) << art_x;
  write_file(t / "patched.cpp", "int kernel() { return 7; }\n");
  Cmd a = run_overlay({"add-native", "--overlay", (t / "ov").string(), "--target", in.source.string(), "--patched-file",
                       (t / "patched.cpp").string(), "--artifact", in.artifact.string(), "--build-cwd",
                       in.root.string(), "--build-cmd", "sh -c 'cat src/kernel.cpp > lib/libk.so'"},
                      {}, state);
  ASSERT_EQ(a.rc, 0) << a.err;
  EXPECT_EQ(xattr_dump(in.source), src_x);  // the patched file carries the original's
  EXPECT_EQ(xattr_dump(in.artifact).find("security.capability"), std::string::npos);  // the build's write cleared it
  Cmd st = run_overlay({"status", "--overlay", (t / "ov").string()}, {}, state);
  EXPECT_EQ(st.out.find("metadata drifted"), std::string::npos) << st.out;
  ASSERT_EQ(run({"setfattr", "-x", "user.origin", in.source.string()}).rc, 0);
  ASSERT_EQ(::chmod(in.source.c_str(), 0600), 0);
  st = run_overlay({"status", "--overlay", (t / "ov").string()}, {}, state);
  EXPECT_NE(st.out.find("metadata drifted: mode 0600 (recorded 0660); extended attributes differ "
                        "(system.posix_acl_access, user.origin)"),
            std::string::npos)
      << st.out;
  Cmd r = revert(t / "ov");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(xattr_dump(in.source), src_x);
  EXPECT_EQ(xattr_dump(in.artifact), art_x);
  EXPECT_EQ(run({"getfacl", "-c", "-n", in.source.string()}).out.find("user:65534:rw-") != std::string::npos, true);
  struct stat s {};
  ASSERT_EQ(::stat(in.source.c_str(), &s), 0);
  EXPECT_EQ(s.st_uid, 65534u);
  ASSERT_TRUE(settle_litter(in.root));
  EXPECT_EQ(tree_digest(in.root), before);
}

// An artifact and a source that have other names (hard links, as a package's lib.so and
// lib.so.1 can be): whether the build writes into the artifact's inode or replaces it, after
// revert every name holds the original bytes and the names are one inode again.
TEST_F(Field, HardLinkedFilesComeBackAsOneInodeWithEveryName) {
  for (const char* build : {"cat src/kernel.cpp > lib/libk.so", "rm lib/libk.so && cp src/kernel.cpp lib/libk.so"}) {
    SCOPED_TRACE(build);
    fs::remove_all(t / "inst");
    Install in = make_install(t / "inst");
    fs::create_hard_link(in.artifact, in.root / "lib/libk.so.1");
    fs::create_hard_link(in.source, in.root / "src/kernel-alias.cpp");
    std::string before = tree_digest(in.root);
    write_file(t / "patched.cpp", "int kernel() { return 7; }\n");
    Cmd a = run_overlay({"add-native", "--overlay", (t / "ov").string(), "--target", in.source.string(),
                         "--patched-file", (t / "patched.cpp").string(), "--artifact", in.artifact.string(),
                         "--build-cwd", in.root.string(), "--build-cmd", std::string("sh -c '") + build + "'"},
                        {}, state);
    ASSERT_EQ(a.rc, 0) << a.err;
    EXPECT_EQ(read_file(in.artifact), "int kernel() { return 7; }\n");
    Cmd r = revert(t / "ov");
    ASSERT_EQ(r.rc, 0) << r.err;
    ASSERT_TRUE(settle_litter(in.root));
    EXPECT_EQ(tree_digest(in.root), before);  // every name's bytes
    EXPECT_EQ(inode_of(in.artifact), inode_of(in.root / "lib/libk.so.1"));
    EXPECT_EQ(inode_of(in.source), inode_of(in.root / "src/kernel-alias.cpp"));
    EXPECT_EQ(fs::hard_link_count(in.artifact), 2u);  // nothing of ours still links to it
    EXPECT_FALSE(fs::exists(t / "ov/_native_backup") && !fs::is_empty(t / "ov/_native_backup"));
  }
}

namespace {

std::uint64_t allocated_bytes(const fs::path& p) {
  struct stat s {};
  return ::stat(p.c_str(), &s) == 0 ? static_cast<std::uint64_t>(s.st_blocks) * 512 : ~0ull;
}

}  // namespace

// A sparse artifact (256 MiB, 128 KiB of data in two runs): its backup and the file revert puts
// back hold what its data holds, not 256 MiB of allocated zeros; the bytes are exact, by a copy
// into the install (the overlay on another mount) as by a rename.
TEST_F(Field, SparseFilesAreBackedUpAndRestoredByTheirDataAlone) {
  for (bool other_mount : {false, true}) {
    SCOPED_TRACE(other_mount ? "overlay reached through a bind mount" : "one mount");
    fs::remove_all(t / "inst");
    fs::remove_all(t / "ov");
    Install in = make_install(t / "inst");
    fs::remove(in.artifact);
    ASSERT_EQ(
        run({"sh", "-c",
             "truncate -s 256M " + in.artifact.string() + " && printf 'head%65532s' x | dd of=" + in.artifact.string() +
                 " conv=notrunc status=none && printf 'mid%65533s' y | dd of=" + in.artifact.string() +
                 " bs=1M seek=128 conv=notrunc status=none"})
            .rc,
        0);
    ASSERT_LT(allocated_bytes(in.artifact), 4u << 20);
    std::string sha = file_sha256(in.artifact);
    std::unique_ptr<ScopedMount> m;
    fs::path ov = t / "ov";
    if (other_mount) {
      fs::create_directories(t / "ovreal");
      fs::create_directories(t / "ovmnt");
      m = ScopedMount::bind(t / "ovreal", t / "ovmnt");
      if (!m->ok()) GTEST_SKIP() << m->why();
      ov = t / "ovmnt/ov";
    }
    write_file(t / "patched.cpp", "int kernel() { return 7; }\n");
    Cmd a = run_overlay({"add-native", "--overlay", ov.string(), "--target", in.source.string(), "--patched-file",
                         (t / "patched.cpp").string(), "--artifact", in.artifact.string(), "--build-cwd",
                         in.root.string(), "--build-cmd", "sh -c 'rm lib/libk.so && cp src/kernel.cpp lib/libk.so'"},
                        {}, state);
    ASSERT_EQ(a.rc, 0) << a.err;
    json mj = json::parse(read_file(ov / "_overlay_manifest.json"));
    fs::path backup = ov / mj["natives"][0]["artifacts"][0]["backup"].get<std::string>();
    EXPECT_EQ(fs::file_size(backup), 256u << 20);
    EXPECT_LT(allocated_bytes(backup), 4u << 20) << "the backup filled the holes";
    Cmd r = run_overlay({"revert", "--overlay", ov.string()}, {}, state);
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(file_sha256(in.artifact), sha);
    EXPECT_LT(allocated_bytes(in.artifact), 4u << 20) << "the restored file filled the holes";
  }
}

// Issue 63: an owner in a time namespace (`unshare --time`, a CRIU-restored container) records the
// start time the kernel shows it, shifted by its boottime offset; CI's gc-stale on the host judged
// the live run gone and reverted it. Start times are now the host's wherever they are read.
TEST_F(Field, AnOwnerInATimeNamespaceIsAliveToAGcStaleOutsideIt) {
  if (run({"unshare", "--fork", "--time", "--boottime", "100000", "true"}).rc != 0)
    GTEST_SKIP() << "no time namespaces here (unshare --time needs Linux >= 5.6 and CAP_SYS_ADMIN)";
  Install in = make_install(t / "inst");
  std::string pristine = tree_digest(in.root);
  fs::path ov = t / "runs" / "ov";
  fs::path ready = t / "ready";
  write_file(t / "patched.cpp", "int kernel() { return 9; }\n");
  // The owner: a shell in the time namespace that records itself as the entry's owner, then waits.
  std::string script = std::string(overlay_binary()) + " add-native --overlay " + ov.string() + " --target " +
                       in.source.string() + " --patched-file " + (t / "patched.cpp").string() +
                       " --owner-pid $$ && touch " + ready.string() + " && exec sleep 60";
  std::vector<std::string> env = state;
  pid_t owner = ::fork();
  if (owner == 0) {
    ::setenv("OVERLAY_STATE_DIR", (t / "state").c_str(), 1);
    ::execlp("unshare", "unshare", "--fork", "--kill-child", "--time", "--boottime", "100000", "sh", "-c",
             script.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  for (int i = 0; i < 300 && !fs::exists(ready); ++i) ::usleep(20000);
  ASSERT_TRUE(fs::exists(ready)) << "the owner never recorded its entry";
  Cmd gc = run_overlay({"gc-stale", "--root", (t / "runs").string()}, {}, state);
  EXPECT_EQ(gc.rc, 0) << gc.err;
  EXPECT_EQ(read_file(in.source), "int kernel() { return 9; }\n") << "gc-stale reverted a live run: " << gc.err;
  json st = json::parse(run_overlay({"--json", "status", "--overlay", ov.string()}, {}, state).out);
  EXPECT_EQ(st["natives"][0]["owner"]["alive"], true) << st.dump(2);
  pid_t recorded = st["natives"][0]["owner"]["pid"].get<pid_t>();
  ::kill(owner, SIGKILL);
  wait_rc(owner);
  // unshare --kill-child ends the owner too; wait until it no longer runs (gone, or a zombie).
  for (int i = 0; i < 250; ++i) {
    std::string stat =
        fs::exists("/proc/" + std::to_string(recorded)) ? read_file("/proc/" + std::to_string(recorded) + "/stat") : "";
    if (stat.empty() || stat.substr(stat.rfind(')') + 2, 1) == "Z") break;
    ::usleep(20000);
  }
  // The owner's sleep (it exec'd) is the recorded pid: gone now, so the run is stale.
  Cmd after = run_overlay({"gc-stale", "--root", (t / "runs").string()}, {}, state);
  EXPECT_EQ(after.rc, 0) << after.err;
  ASSERT_TRUE(settle_litter(in.root));
  EXPECT_EQ(tree_digest(in.root), pristine) << after.err;
}
