// Issue 24, the race: another account owns a directory on the install path and swaps the
// directory holding the tracked files for a symlink to a decoy and back, in a tight loop
// (renameat2 RENAME_EXCHANGE: at every instant the name is one or the other), while root runs
// revert and gc-stale. Whatever instant a check or a write lands at, nothing may be written
// into the decoy, and the install must end either restored exactly or with the item refused and
// still recorded (then restored once the flipping stops).
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util.hpp"

using namespace overlay::test;
using json = nlohmann::json;

namespace {

constexpr uid_t kNobody = 65534;

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::atoi(v) : fallback;
}

// What the flipper and the test share (an anonymous shared mapping): the flip count and a pause.
// A pause is numbered, and the flipper says which pause it parked for: a "parked" it wrote for an
// earlier pause, late (it read that pause, then the test resumed), never ends a later one.
struct Shared {
  std::atomic<long> flips{0};
  std::atomic<int> paused{1};  // the pause asked for (0: run); the flipper leaves the real dir in place
  std::atomic<int> parked{0};  // the pause it has parked for, with the real dir at its name
  std::atomic<int> pauses{1};  // the last pause's number
};

class Flipper {
 public:
  Flipper(const fs::path& name, const fs::path& other) {
    void* m = ::mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) throw std::runtime_error("mmap");
    s_ = new (m) Shared;
    pid_ = ::fork();
    if (pid_ == 0) run(name, other);
  }
  ~Flipper() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    ::munmap(s_, sizeof(Shared));
  }
  void resume() { s_->paused = 0; }
  // Lets it flip again and waits until it has flipped at least once (or has died: a failure).
  void resume_until_it_flips() {
    long before = s_->flips;
    resume();
    while (s_->flips == before) {
      if (int st = 0; ::waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error("the flipper ended (status " + std::to_string(st) + ")");
      }
      ::usleep(50);
    }
  }
  // Waits until the flipper stopped, for this pause, with the real directory at its name.
  void pause() {
    int n = ++s_->pauses;
    s_->paused = n;
    while (s_->parked != n) ::usleep(100);
  }
  long flips() const { return s_->flips; }

 private:
  [[noreturn]] void run(const fs::path& name, const fs::path& other) {
    if (::setgid(kNobody) != 0 || ::setuid(kNobody) != 0) ::_exit(3);
    bool swapped = false;  // whether the symlink stands at `name` now
    for (;;) {
      if (int asked = s_->paused; asked != 0) {
        if (swapped && ::renameat2(AT_FDCWD, name.c_str(), AT_FDCWD, other.c_str(), RENAME_EXCHANGE) == 0)
          swapped = false;
        if (!swapped) s_->parked = asked;
        ::usleep(50);
        continue;
      }
      if (::renameat2(AT_FDCWD, name.c_str(), AT_FDCWD, other.c_str(), RENAME_EXCHANGE) == 0) {
        swapped = !swapped;
        s_->flips++;
      }
    }
  }
  Shared* s_ = nullptr;
  pid_t pid_ = -1;
};

struct RedirectRace : ::testing::Test {
  TempDir t;
  fs::path inst = t / "inst", k = t / "inst/k", decoy = t / "decoy";
  std::string ov = (t / "ov").string();

  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (a second account flips the directory)";
    write_file(k / "a.cu", "int a() { return 4; }\n");
    write_file(k / "a.so", "built from 4\n");
    write_file(k / "cache/jit.o", "jit of 4\n");
    write_file(t / "patched.cu", "int a() { return 7; }\n");
    write_file(t / "patched.so", "built from 7\n");
    // The decoy holds files of the same names, so a write through the symlink would replace them.
    write_file(decoy / "a.cu", "decoy source\n");
    write_file(decoy / "a.so", "decoy library\n");
    write_file(decoy / "cache/jit.o", "decoy jit\n");
    fs::permissions(t.path(), fs::perms(0755));
    // The other account owns inst (so it may rename inst/k) and the decoy; root owns the files.
    for (const fs::path& p : {inst, decoy, decoy / "a.cu", decoy / "a.so", decoy / "cache", decoy / "cache/jit.o"})
      ASSERT_EQ(::lchown(p.c_str(), kNobody, kNobody), 0);
    fs::create_directory_symlink(decoy, inst / ".flip");
    ASSERT_EQ(::lchown((inst / ".flip").c_str(), kNobody, kNobody), 0);
  }
  Cmd add(const std::string& build, std::vector<std::string> more = {}) {
    std::vector<std::string> args{"add-native",
                                  "--overlay",
                                  ov,
                                  "--target",
                                  (k / "a.cu").string(),
                                  "--patched-file",
                                  (t / "patched.cu").string(),
                                  "--artifact",
                                  (k / "a.so").string(),
                                  "--build-cmd",
                                  build};
    args.insert(args.end(), more.begin(), more.end());
    return run_overlay(args);
  }
  // With the cache dir inside the flipping directory — moved into the overlay, renamed aside, or
  // tarred (its tree read, and extracted back, through descriptors) — rebuilt by the build.
  Cmd add_with_cache(const char* way) {
    return add("sh -c 'cp " + (t / "patched.so").string() + " " + (k / "a.so").string() + " && mkdir " +
                   (k / "cache").string() + " && echo jit of 7 > " + (k / "cache/jit.o").string() + "'",
               {"--invalidate-cache", (k / "cache").string(), "--cache-snapshot", way});
  }
  std::size_t entries() { return json::parse(read_file(t / "ov/_overlay_manifest.json"))["natives"].size(); }
};

}  // namespace

TEST_F(RedirectRace, AFlippingDirectoryNeverSteersRevertOrGcStale) {
  const std::string original = tree_digest(k), decoy_digest = tree_digest(decoy);
  const int rounds = env_int("OVERLAY_RACE_ROUNDS", 40);
  Flipper flipper(k, inst / ".flip");
  int restored = 0, refused = 0, done = 0;
  for (int i = 0; i < rounds; ++i, ++done) {
    flipper.pause();
    const char* ways[] = {"move", "aside", "tar"};
    Cmd a = add_with_cache(ways[(i / 2) % 3]);
    ASSERT_EQ(a.rc, 0) << "round " << i << "\n" << a.err;
    flipper.resume_until_it_flips();  // the first check meets a directory already flipping
    Cmd r =
        i % 2 == 0 ? run_overlay({"revert", "--overlay", ov}) : run_overlay({"gc-stale", "--root", t.path().string()});
    flipper.pause();
    EXPECT_EQ(tree_digest(decoy), decoy_digest) << "round " << i << ": written through the symlink\n" << r.err;
    if (r.rc == 0) {
      ++restored;
      EXPECT_EQ(entries(), 0u) << "round " << i;
      // The rebuilt cache the revert swapped out is litter for its detached deleter, which may
      // have found the path flipped: named on the record, it goes with the next command (here a
      // revert with no entry left to restore).
      EXPECT_EQ(run_overlay({"revert", "--overlay", ov}).rc, 0);
      EXPECT_EQ(tree_digest(k), original) << "round " << i;
      continue;
    }
    // Refused: named as such, the entry kept, and restored exactly once nothing flips.
    ++refused;
    EXPECT_NE(r.err.find("changed since add-native"), std::string::npos) << "round " << i << "\n" << r.err;
    EXPECT_EQ(entries(), 1u) << "round " << i;
    Cmd again = run_overlay({"revert", "--overlay", ov});
    EXPECT_EQ(again.rc, 0) << again.err;
    EXPECT_EQ(tree_digest(k), original) << "round " << i;
  }
  EXPECT_GT(flipper.flips(), 0);
  EXPECT_EQ(tree_digest(decoy), decoy_digest);
  std::printf(
      "RACE | %d runs (revert and gc-stale alternately; a cache moved, renamed aside or tarred), %ld flips: %d "
      "restored at once, "
      "%d refused (the entry kept)\n",
      done, flipper.flips(), restored, refused);
}

// add-native while the directory flips: a path it was given may lead into the decoy at the
// instant it resolves it (a symlink on a tracked path is followed once, at add-native, and
// recorded), but whichever directory that is, the item's backup is read from and its swap made
// in that one directory, held open — never the original read from one and the patch written into
// the other. (The source and the cache are two paths, resolved each once: they may land in
// different directories, each item consistent.) After each round's revert (flipping stopped)
// both trees are as they were.
TEST_F(RedirectRace, AddNativeActsInOneDirectoryPerItemWhateverFlips) {
  const std::string original = tree_digest(k), decoy_digest = tree_digest(decoy);
  const std::string decoy_real = fs::canonical(decoy).string();
  const int rounds = env_int("OVERLAY_RACE_ROUNDS", 40);
  Flipper flipper(k, inst / ".flip");
  int in_install = 0, in_decoy = 0, refused = 0, done = 0;
  for (int i = 0; i < rounds; ++i, ++done) {
    flipper.resume_until_it_flips();
    // A tarred cache beside the source (its tree read through descriptors). The build is the
    // user's: it would follow the flipping path too, so it changes nothing here.
    Cmd a = add("true", {"--invalidate-cache", (k / "cache").string(), "--cache-snapshot", "tar"});
    flipper.pause();
    if (a.rc != 0) {
      ++refused;
      EXPECT_NE(a.err.find("changed while add-native read it"), std::string::npos) << "round " << i << "\n" << a.err;
    } else {
      json m = json::parse(read_file(t / "ov/_overlay_manifest.json"));
      auto in_decoy_of = [&](const char* kind) { return m["natives"][0][kind][0]["parent"]["path"] == decoy_real; };
      bool src_in_decoy = in_decoy_of("sources"), cache_in_decoy = in_decoy_of("caches");
      (src_in_decoy ? in_decoy : in_install)++;
      // Where each item was pinned it was changed, and only there: the source patched, the
      // cache invalidated (its backup the tar of that directory's cache).
      fs::path src_dir = src_in_decoy ? decoy : k, src_other = src_in_decoy ? k : decoy;
      fs::path cache_dir = cache_in_decoy ? decoy : k, cache_other = cache_in_decoy ? k : decoy;
      EXPECT_EQ(read_file(src_dir / "a.cu"), "int a() { return 7; }\n") << "round " << i;
      EXPECT_NE(read_file(src_other / "a.cu"), "int a() { return 7; }\n") << "round " << i;
      EXPECT_FALSE(fs::exists(cache_dir / "cache")) << "round " << i;
      EXPECT_TRUE(fs::exists(cache_other / "cache/jit.o")) << "round " << i;
      Cmd r = run_overlay({"revert", "--overlay", ov});
      EXPECT_EQ(r.rc, 0) << r.err;
    }
    EXPECT_EQ(tree_digest(k), original) << "round " << i;
    EXPECT_EQ(tree_digest(decoy), decoy_digest) << "round " << i;
  }
  EXPECT_GT(flipper.flips(), 0);
  std::printf(
      "RACE | %d add-native runs while flipping, %ld flips: %d acted in the install, %d in the decoy (the path led "
      "there), "
      "%d refused\n",
      done, flipper.flips(), in_install, in_decoy, refused);
}
