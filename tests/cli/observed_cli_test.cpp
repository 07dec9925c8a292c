// Clean means observed (issue 74): the shapes where a verdict the pipeline gates on (`store: hit`,
// a complete revert, every original byte back) was read off what the tool recorded rather than
// the install. Each runs the real binary on a real Make build and checks the verdict against what
// the program then prints and what is on disk.
#include <unistd.h>

#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util.hpp"

using namespace overlay::test;
using json = nlohmann::json;

namespace {

const char* kMain = "#include <stdio.h>\nint value(void);\nint main(void) { printf(\"%d\\n\", value()); return 0; }\n";

const std::string kMacros = "#ifndef H\n#define H 0\n#endif\n#ifndef EXTRA\n#define EXTRA 0\n#endif\n";

struct Observed : ::testing::Test {
  TempDir t;
  std::string ov = (t / "ov").string();
  std::vector<std::string> env = {"OVERLAY_STATE_DIR=" + (t / "state").string()};

  void SetUp() override {
    if (!have({"make", "--version"}) || !have({"cc", "--version"})) GTEST_SKIP() << "needs make and cc";
  }
  Cmd overlay(std::vector<std::string> args, const std::vector<std::string>& more_env = {}) {
    std::vector<std::string> e = env;
    e.insert(e.end(), more_env.begin(), more_env.end());
    return run_overlay(args, {}, e);
  }
  // add-native with `args`: its JSON result, stderr under "stderr" (rc checked).
  json add(std::vector<std::string> args, const std::vector<std::string>& more_env = {}) {
    args.insert(args.begin(), {"--json", "add-native", "--overlay", ov});
    Cmd a = overlay(args, more_env);
    EXPECT_EQ(a.rc, 0) << a.err;
    json j = json::parse(a.out.empty() ? "{}" : a.out);
    j["stderr"] = a.err;
    return j;
  }
  static std::string store_of(const json& j) { return j["build"]["store"]["state"].get<std::string>(); }
  static std::string why_of(const json& j) { return j["build"]["store"].value("why", ""); }
  Cmd revert() {
    Cmd r = overlay({"revert", "--overlay", ov});
    EXPECT_EQ(r.rc, 0) << r.err;
    return r;
  }
  static std::string out_of(const fs::path& prog) {
    Cmd c = run({prog.string()});
    return c.rc == 0 ? c.out.substr(0, c.out.find('\n')) : "error: " + c.err;
  }
  // A Make install at `p`: `rule` builds `prog` from k.c (40 + its macros) and main.c; the
  // candidate is 70 + the same macros. Built once with `make`.
  static void make_install(const fs::path& p, const std::string& rule, const std::string& macros = "") {
    write_file(p / "Makefile", "prog: k.c main.c\n\t" + rule + "\n");
    write_file(p / "k.c", macros + "int value(void) { return 40 + H + EXTRA; }\n");
    write_file(p / "main.c", kMain);
    write_file(p.parent_path() / "k7.c", macros + "int value(void) { return 70 + H + EXTRA; }\n");
    Cmd m = run({"make", "-s", "-C", p.string()});
    ASSERT_EQ(m.rc, 0) << m.err;
  }
  // The candidate applied to the install at `p` twice, reverted after each: built (a miss), then
  // served (a hit), printing `prints` both times.
  void miss_then_hit(const fs::path& p, const std::string& prints) {
    json a = add(args_for(p));
    EXPECT_EQ(store_of(a), "miss") << a["stderr"];
    EXPECT_EQ(out_of(p / "prog"), prints);
    revert();
    json b = add(args_for(p));
    EXPECT_EQ(store_of(b), "hit") << b["stderr"];
    EXPECT_EQ(out_of(p / "prog"), prints);
    revert();
  }
  // The same install at `p` built by objects: k.o and main.o compiled, then linked.
  static void objects_install(const fs::path& p) {
    write_file(p / "Makefile",
               "prog: k.o main.o\n\tcc -o prog k.o main.o\nk.o: k.c\n\tcc -c k.c\nmain.o: main.c\n\tcc -c main.c\n");
    write_file(p / "k.c", kMacros + "int value(void) { return 40 + H + EXTRA; }\n");
    write_file(p / "main.c", kMain);
    write_file(p.parent_path() / "k7.c", kMacros + "int value(void) { return 70 + H + EXTRA; }\n");
    Cmd m = run({"make", "-s", "-C", p.string()});
    ASSERT_EQ(m.rc, 0) << m.err;
  }
  static std::vector<std::string> args_for(const fs::path& p) {
    return {"--target",   (p / "k.c").string(),  "--patched-file", (p.parent_path() / "k7.c").string(),
            "--artifact", (p / "prog").string(), "--build-cmd",    "make -C " + p.string()};
  }
};

// A dependency reached through a chain of directory symlinks (`inc -> ../alt/inc`, and
// `alt/inc -> ../pkgs/inc-v1` as update-alternatives makes one) is retargeted: the same candidate
// is a miss that names the link, and builds against the new headers. It was `store: hit` with the
// old version's build: inputs were keyed by the real directory alone.
TEST_F(Observed, ADirectorySymlinkRetargetedOnTheWayIsAMiss) {
  fs::path p = t / "pkg";
  write_file(t / "pkgs/inc-v1/h.h", "#define H 1\n");
  write_file(t / "pkgs/inc-v2/h.h", "#define H 2\n");
  fs::create_directories(t / "alt");
  fs::create_symlink("../pkgs/inc-v1", t / "alt/inc");
  fs::create_directories(p);
  fs::create_symlink("../alt/inc", p / "inc");
  make_install(p, "cc -Iinc -o prog k.c main.c", "#include <h.h>\n#ifndef EXTRA\n#define EXTRA 0\n#endif\n");
  ASSERT_EQ(out_of(p / "prog"), "41");
  auto args = args_for(p);
  miss_then_hit(p, "71");
  // The alternative switched: the link two steps from the path the compiler opened.
  fs::remove(t / "alt/inc");
  fs::create_symlink("../pkgs/inc-v2", t / "alt/inc");
  json b = add(args);
  EXPECT_EQ(store_of(b), "miss") << b["stderr"];
  EXPECT_NE(why_of(b).find((t / "alt/inc").string() + ": it points elsewhere now"), std::string::npos) << why_of(b);
  EXPECT_EQ(out_of(p / "prog"), "72");
  revert();
  EXPECT_EQ(out_of(p / "prog"), "41");  // the stock build's bytes, made against inc-v1
  // The first link retargeted straight at a version dir: a miss again, named by that link.
  fs::remove(p / "inc");
  fs::create_symlink("../pkgs/inc-v1", p / "inc");
  json c = add(args);
  EXPECT_EQ(store_of(c), "miss") << c["stderr"];
  EXPECT_NE(why_of(c).find((p / "inc").string() + ": it points elsewhere now"), std::string::npos) << why_of(c);
  EXPECT_EQ(out_of(p / "prog"), "71");
  revert();
  EXPECT_EQ(out_of(p / "prog"), "41");
}

// What Open MPI's wrapper compiler reads (OMPI_CFLAGS, OMPI_CC) reaches the compile: a candidate
// built under other values is a miss. It was a hit, the variables held out as "reaching no compiler".
TEST_F(Observed, OpenMpisWrapperVariablesAreInTheKey) {
  fs::path p = t / "pkg";
  write_file(t / "mpicc", "#!/bin/sh\nexec ${OMPI_CC:-cc} $OMPI_CFLAGS \"$@\"\n", 0755);
  make_install(p, "../mpicc -o prog k.c main.c", kMacros);
  auto args = args_for(p);
  EXPECT_EQ(store_of(add(args)), "miss");
  EXPECT_EQ(out_of(p / "prog"), "70");
  revert();
  json b = add(args, {"OMPI_CFLAGS=-DEXTRA=5"});
  EXPECT_EQ(store_of(b), "miss") << b["stderr"];
  EXPECT_EQ(out_of(p / "prog"), "75");
  revert();
  // A rank's identity from mpirun reaches no compiler: still a hit.
  json c = add(args, {"OMPI_CFLAGS=-DEXTRA=5", "OMPI_COMM_WORLD_RANK=3"});
  EXPECT_EQ(store_of(c), "hit") << c["stderr"];
  EXPECT_EQ(out_of(p / "prog"), "75");
  revert();
  EXPECT_EQ(out_of(p / "prog"), "40");
}

// A tuning table the build reads through a read-write open (`exec 3<>`, as `open(p, "r+")` and
// numpy's memmap do) gets new bytes of the same size, its mtime kept: a miss, built with the new
// table, which stays as it is. It was a hit with the old table's build, and the serve put the
// record's copy of the old table over the new one.
TEST_F(Observed, AFileTheBuildOpensReadWriteIsAnInput) {
  fs::path p = t / "pkg";
  write_file(p / "table.txt", "1\n");
  make_install(p, "exec 3<>table.txt; read v <&3; cc -DEXTRA=$$v -o prog k.c main.c", kMacros);
  ASSERT_EQ(out_of(p / "prog"), "41");
  auto args = args_for(p);
  miss_then_hit(p, "71");
  auto stamp = fs::last_write_time(p / "table.txt");
  write_file(p / "table.txt", "2\n");
  fs::last_write_time(p / "table.txt", stamp);
  json b = add(args);
  EXPECT_EQ(store_of(b), "miss") << b["stderr"];
  EXPECT_NE(why_of(b).find((p / "table.txt").string() + ": its bytes changed"), std::string::npos) << why_of(b);
  EXPECT_EQ(out_of(p / "prog"), "72");
  EXPECT_EQ(read_file(p / "table.txt"), "2\n");
  revert();
  EXPECT_EQ(read_file(p / "table.txt"), "2\n");
}

// A log the build only appends to (`>> build.log`) gets lines from elsewhere between two applies
// of one candidate: the hit appends the lines the build appended and keeps the others; revert
// gives the log back as it was before the serve. A hit put the record's whole copy in its place,
// and the lines appended since were lost for good.
TEST_F(Observed, AServeAppendsToALogAndKeepsLinesAppendedSince) {
  fs::path p = t / "pkg";
  make_install(p, "echo built >> build.log && cc -o prog k.c main.c", kMacros);
  auto args = args_for(p);
  EXPECT_EQ(store_of(add(args)), "miss");
  revert();
  ASSERT_EQ(read_file(p / "build.log"), "built\n");
  std::ofstream(p / "build.log", std::ios::app) << "a line from elsewhere\n";
  json hit = add(args);
  EXPECT_EQ(store_of(hit), "hit") << hit["stderr"];
  EXPECT_EQ(out_of(p / "prog"), "70");
  EXPECT_EQ(read_file(p / "build.log"), "built\na line from elsewhere\nbuilt\n");
  revert();
  EXPECT_EQ(read_file(p / "build.log"), "built\na line from elsewhere\n");
  EXPECT_EQ(out_of(p / "prog"), "40");
}

// The build rotates its output directory (`mv gen gen.old; mkdir gen; …; rm -rf gen.old`), or
// swaps a new one in with renameat2(RENAME_EXCHANGE) (`mv --exchange`): every name below the
// directory is noted as it was before the rename, so revert puts the old tree back byte for byte
// and says the install is clean because it is. A renamed directory made the trace incomplete and
// revert failed with gen/ left empty, while `--check-clean` said "install clean"; an exchange was
// not even flagged, and the originals were lost.
TEST_F(Observed, ARotatedOrExchangedOutputDirComesBackWhole) {
  const std::vector<std::pair<std::string, std::string>> shapes = {
      {"rotate",
       "rm -rf gen.old && if [ -d gen ]; then mv gen gen.old; fi && mkdir gen && mkdir gen/sub && echo v$$$$ > "
       "gen/data && echo w$$$$ > gen/sub/more && rm -rf gen.old && cc -o prog k.c main.c"},
      {"exchange",
       "mkdir -p gen && rm -rf gen.new && mkdir gen.new gen.new/sub && echo v$$$$ > gen.new/data && echo w$$$$ > "
       "gen.new/sub/more && python3 -c 'import ctypes; l = ctypes.CDLL(None); "
       "assert l.renameat2(-100, b\"gen.new\", -100, b\"gen\", 2) == 0' && rm -rf gen.new && cc -o prog k.c main.c"}};
  for (const auto& [name, rule] : shapes) {
    SCOPED_TRACE(name);
    fs::path p = t / name / "pkg";
    make_install(p, rule, kMacros);
    std::string data = read_file(p / "gen/data"), more = read_file(p / "gen/sub/more");
    auto stamp = fs::last_write_time(p / "gen/data");
    json a = add(args_for(p));
    EXPECT_EQ(store_of(a), "miss") << a["stderr"];
    EXPECT_EQ(out_of(p / "prog"), "70");
    ASSERT_NE(read_file(p / "gen/data"), data) << "the build made a new tree";
    Cmd r = revert();
    EXPECT_EQ(read_file(p / "gen/data"), data);
    EXPECT_EQ(read_file(p / "gen/sub/more"), more);
    EXPECT_EQ(fs::last_write_time(p / "gen/data"), stamp);
    EXPECT_FALSE(fs::exists(p / "gen.old"));
    EXPECT_FALSE(fs::exists(p / "gen.new"));
    EXPECT_EQ(out_of(p / "prog"), "40");
    Cmd s = overlay({"status", "--overlay", ov, "--check-clean"});
    EXPECT_EQ(s.rc, 0) << s.out << s.err;
  }
}

// An out-of-tree build (pkg/src, pkg/build) whose generator prunes and refills a sibling of both,
// pkg/gen: the original it deleted comes back and what it made there goes, though gen/ is none of
// the directories the tool counts as the install's. It was never restored, and called clean.
TEST_F(Observed, AnOriginalDeletedOutsideTheInstallsRootsComesBack) {
  fs::path p = t / "pkg";
  write_file(p / "gen/old.txt", "from the stock build\n");
  write_file(p / "src/k.c", kMacros + "int value(void) { return 40 + H + EXTRA; }\n");
  write_file(p / "src/main.c", kMain);
  write_file(t / "k7.c", kMacros + "int value(void) { return 70 + H + EXTRA; }\n");
  write_file(p / "build/Makefile",
             "prog: ../src/k.c ../src/main.c\n\trm -f ../gen/*.txt && echo made > ../gen/new.txt "
             "&& cc -o prog ../src/k.c ../src/main.c\n");
  ASSERT_EQ(run({"cc", "-o", (p / "build/prog").string(), (p / "src/k.c").string(), (p / "src/main.c").string()}).rc,
            0);
  std::string gen = tree_digest(p / "gen");
  std::vector<std::string> args = {
      "--target",   (p / "src/k.c").string(),    "--patched-file", (t / "k7.c").string(),
      "--artifact", (p / "build/prog").string(), "--build-cmd",    "make -C " + (p / "build").string()};
  add(args);
  EXPECT_EQ(out_of(p / "build/prog"), "70");
  ASSERT_FALSE(fs::exists(p / "gen/old.txt"));
  revert();
  EXPECT_EQ(tree_digest(p / "gen"), gen);
  EXPECT_EQ(read_file(p / "gen/old.txt"), "from the stock build\n");
  EXPECT_FALSE(fs::exists(p / "gen/new.txt"));
  EXPECT_EQ(out_of(p / "build/prog"), "40");
  Cmd s = overlay({"status", "--overlay", ov, "--check-clean"});
  EXPECT_EQ(s.rc, 0) << s.out << s.err;
}

// A candidate's run writes its result into a directory the build made (`gen/bench.json`): every
// original byte is back, so the revert is complete and says so, the directory stays with what the
// build did not make, and exec exits with the candidate's status. It failed "Directory not
// empty", exec exited 121 "REVERT INCOMPLETE", and every later revert the same.
TEST_F(Observed, ARunsOwnFileInADirectoryTheBuildMadeLeavesTheRevertComplete) {
  fs::path p = t / "pkg";
  make_install(p, "cc -o prog k.c main.c", kMacros);
  // From now on the build also makes gen/ (a generator's output dir the stock build never made).
  write_file(p / "Makefile", "prog: k.c main.c\n\tmkdir -p gen && echo 1 > gen/stamp && cc -o prog k.c main.c\n");
  std::string stock = file_sha256(p / "prog");
  std::vector<std::string> a = {"exec", "--overlay", ov};
  for (const auto& x : args_for(p)) a.push_back(x);
  a.insert(a.end(), {"--", "sh", "-c", "./prog > gen/bench.json"});
  Cmd e = run_overlay(a, p, env);
  EXPECT_EQ(e.rc, 0) << e.out << e.err;
  EXPECT_EQ(e.err.find("REVERT INCOMPLETE"), std::string::npos) << e.err;
  EXPECT_EQ(read_file(p / "gen/bench.json"), "70\n");
  EXPECT_FALSE(fs::exists(p / "gen/stamp"));
  EXPECT_EQ(file_sha256(p / "prog"), stock);
  // The same through add-native and revert: exit 0, the kept directory named.
  fs::remove_all(p / "gen");
  add(args_for(p));
  ASSERT_TRUE(fs::exists(p / "gen/stamp"));
  write_file(p / "gen/bench2.json", "{}\n");
  Cmd r = revert();
  EXPECT_NE(r.err.find((p / "gen").string() + ": a directory the build made, kept"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(p / "gen/stamp"));
  EXPECT_TRUE(fs::exists(p / "gen/bench2.json"));
  EXPECT_EQ(file_sha256(p / "prog"), stock);
  Cmd s = overlay({"status", "--overlay", ov, "--check-clean"});
  EXPECT_EQ(s.rc, 0) << s.out << s.err;
}

// A team-shared install: root's files, group-writable, in a setgid directory of the team's
// group; a member (nobody, of nogroup) applies a candidate whose build writes the objects in place
// and relinks the program, then reverts. Every file comes back with its bytes, root as its owner
// and its mode, with no chown or chmod of an inode the member does not own (the kernel refuses
// both), and check-clean agrees with the disk. The revert failed (`chmod` EPERM, exit 1) and
// check-clean said clean while k.o held the candidate's code.
TEST_F(Observed, AMemberOfASharedInstallRevertsItWhole) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (to make root's shared install and run as nobody)";
  if (!have({"setpriv", "--version"})) GTEST_SKIP() << "needs setpriv (util-linux)";
  fs::permissions(t.path(), fs::perms(0755));
  fs::path p = t / "pkg", home = t / "member";
  objects_install(p);
  ASSERT_EQ(run({"chgrp", "-R", "nogroup", p.string()}).rc, 0);
  ASSERT_EQ(run({"chmod", "-R", "g+w", p.string()}).rc, 0);
  ASSERT_EQ(run({"chmod", "g+s", p.string()}).rc, 0);
  fs::create_directories(home);
  ASSERT_EQ(run({"chown", "nobody:nogroup", home.string()}).rc, 0);
  auto listing = [&] {  // each file: its owner, group, mode and bytes
    std::string out;
    for (const char* f : {"k.c", "k.o", "main.o", "prog", "Makefile"})
      out += run({"stat", "-c", "%n %U %G %a", (p / f).string()}).out + file_sha256(p / f) + "\n";
    return out;
  };
  std::string before = listing();
  std::vector<std::string> member = {"setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                                     overlay_binary()};
  std::vector<std::string> menv = {"OVERLAY_STATE_DIR=" + (home / "state").string(), "HOME=" + home.string()};
  auto as_member = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = member;
    argv.insert(argv.end(), args.begin(), args.end());
    return run(argv, home, menv);
  };
  std::string o = (home / "ov").string();
  std::vector<std::string> a = {"add-native", "--overlay", o};
  for (const auto& x : args_for(p)) a.push_back(x);
  Cmd add = as_member(a);
  ASSERT_EQ(add.rc, 0) << add.err;
  EXPECT_EQ(out_of(p / "prog"), "70");
  Cmd r = as_member({"revert", "--overlay", o});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(listing(), before);
  EXPECT_EQ(out_of(p / "prog"), "40");
  Cmd s = as_member({"status", "--overlay", o, "--check-clean"});
  EXPECT_EQ(s.rc, 0) << s.out << s.err;

  // An object the group may not write (0644, root's): the member's build replaces it with one of
  // its own, which only root can give back to root. The revert says so, with the command; the
  // entry stays; check-clean names the object and how it differs; root's revert completes it.
  fs::permissions(p / "k.o", fs::perms(0644));
  before = listing();
  ASSERT_EQ(as_member(a).rc, 0);
  Cmd r2 = as_member({"revert", "--overlay", o});
  EXPECT_EQ(r2.rc, 1) << r2.err;
  EXPECT_NE(r2.err.find("cannot give " + (p / "k.o").string() + " back to its owner 0:65534"), std::string::npos)
      << r2.err;
  EXPECT_NE(r2.err.find("as root: chown 0:65534 " + (p / "k.o").string()), std::string::npos) << r2.err;
  Cmd s2 = as_member({"status", "--overlay", o, "--check-clean"});
  EXPECT_EQ(s2.rc, 1) << s2.out << s2.err;
  EXPECT_NE(s2.out.find("build     not as before: " + (p / "k.o").string() + ": its owner is 65534:65534, was 0:65534"),
            std::string::npos)
      << s2.out;
  Cmd root = run_overlay({"revert", "--overlay", o, "--trust-owner"}, {}, menv);
  EXPECT_EQ(root.rc, 0) << root.err;
  EXPECT_EQ(listing(), before);
  EXPECT_EQ(as_member({"status", "--overlay", o, "--check-clean"}).rc, 0);
}

// A file the build rewrites in place (`cc -E k.c > k.i`) carries a POSIX ACL and a user.
// attribute (an SELinux label is one more of the same): revert gives it back with both, and its
// mode's group bits (the ACL's mask) as they were. It came back with neither, group write widened.
TEST_F(Observed, AFileRewrittenInPlaceComesBackWithItsAclAndAttributes) {
  if (!have({"setfacl", "--version"}) || !have({"setfattr", "--version"}))
    GTEST_SKIP() << "needs setfacl and setfattr (acl, attr)";
  fs::path p = t / "pkg", k_i = p / "k.i";
  make_install(p, "cc -E k.c > k.i && cc -o prog k.c main.c", kMacros);
  fs::permissions(k_i, fs::perms(0640));
  ASSERT_EQ(run({"setfacl", "-m", "u:nobody:rw", k_i.string()}).rc, 0);
  Cmd x = run({"setfattr", "-n", "user.label", "-v", "kept", k_i.string()});
  if (x.rc != 0) GTEST_SKIP() << "no user. attributes here: " << x.err;
  auto meta = [&] {
    return run({"getfattr", "-d", "-m", "-", "--absolute-names", k_i.string()}).out +
           run({"stat", "-c", "%a %U %G", k_i.string()}).out + file_sha256(k_i);
  };
  std::string before = meta();
  ASSERT_NE(before.find("system.posix_acl_access"), std::string::npos) << before;
  ASSERT_NE(before.find("user.label=\"kept\""), std::string::npos) << before;
  json a = add(args_for(p));
  EXPECT_EQ(store_of(a), "miss") << a["stderr"];
  revert();
  EXPECT_EQ(meta(), before);
}

// Where builds cannot be traced (no ptrace: a container's seccomp profile, Yama 2/3; here
// OVERLAY_BUILD_TRACE=0, the same path) the build is watched: a generated file it deleted and a
// depfile it rewrote are what a watch cannot put back, so revert dates the restored files now
// (never "nothing more to redo"), and check-clean names the deleted file until the install's
// build makes it again. It granted original mtimes and said clean over both.
TEST_F(Observed, AWatchedBuildsDeletionAndDepfileAreNeverCalledClean) {
  env.push_back("OVERLAY_BUILD_TRACE=0");
  fs::path p = t / "pkg";
  write_file(p / "instances.txt", "a\nb\n");
  write_file(p / "gen.sh",
             "#!/bin/sh\nset -e\ncd \"$(dirname \"$0\")\"\nmkdir -p gen\nfor f in gen/*.c; do [ -e \"$f\" ] || "
             "continue; n=$(basename \"$f\" .c); grep -qx \"$n\" instances.txt || rm \"$f\"; done\nwhile read -r n; "
             "do [ -f gen/$n.c ] || echo \"int inst_$n(void) { return 1; }\" > gen/$n.c; done < instances.txt\n"
             "cat gen/*.c > all.c\ncc -MD -c all.c -o all.o\n",
             0755);
  ASSERT_EQ(run({"sh", (p / "gen.sh").string()}).rc, 0);
  ASSERT_TRUE(fs::exists(p / "gen/b.c") && fs::exists(p / "all.d"));
  write_file(t / "instances.txt", "a\n");
  json a =
      add({"--target", (p / "instances.txt").string(), "--patched-file", (t / "instances.txt").string(), "--artifact",
           (p / "all.c").string(), "--build-cmd", "sh " + (p / "gen.sh").string(), "--build-cwd", p.string()});
  ASSERT_FALSE(a["build"]["traced"].get<bool>()) << a.dump();
  EXPECT_NE(a["stderr"].get<std::string>().find("warning: the build deleted 1 file(s), which a watched build cannot "
                                                "put back"),
            std::string::npos)
      << a["stderr"];
  ASSERT_FALSE(fs::exists(p / "gen/b.c"));
  Cmd r = overlay({"--json", "revert", "--overlay", ov});
  ASSERT_EQ(r.rc, 0) << r.err;
  json m = json::parse(r.out)["mtimes"];
  ASSERT_EQ(m.size(), 1u) << r.out;
  EXPECT_EQ(m[0]["original"], false) << m;
  EXPECT_NE(m[0]["why_fresh"].get<std::string>().find("the build deleted " + (p / "gen/b.c").string()),
            std::string::npos)
      << m;
  Cmd s = overlay({"status", "--overlay", ov, "--check-clean"});
  EXPECT_EQ(s.rc, 1) << s.out << s.err;
  EXPECT_NE(s.out.find((p / "gen/b.c").string()), std::string::npos) << s.out;
  ASSERT_EQ(run({"sh", (p / "gen.sh").string()}).rc, 0);  // the install's build makes it again
  Cmd again = overlay({"status", "--overlay", ov, "--check-clean"});
  EXPECT_EQ(again.rc, 0) << again.out << again.err;
}

// Whether /dev/shm is a mount of its own that holds files (a tmpfs), as on most hosts.
bool dev_shm_is_tmpfs() {
  std::ifstream in("/proc/self/mountinfo");
  for (std::string line; std::getline(in, line);)
    if (line.find(" /dev/shm ") != std::string::npos && line.find(" - tmpfs ") != std::string::npos) return true;
  return false;
}

// An install under /dev/shm (an ordinary tmpfs) is traced like any other: the object the
// candidate's build replaced comes back, so the next link of the install ships stock code. Below
// /dev only the kernel's own filesystems are left out; everything there was, and the patched
// object stayed while revert said "nothing more to redo".
TEST_F(Observed, AnInstallUnderDevShmIsTracedAndPutBack) {
  if (!dev_shm_is_tmpfs()) GTEST_SKIP() << "/dev/shm is no tmpfs mount here";
  TempDir shm("/dev/shm");
  fs::path p = shm / "pkg";
  objects_install(p);
  std::string object = file_sha256(p / "k.o");
  json a = add(args_for(p));
  EXPECT_EQ(store_of(a), "miss") << a["stderr"];
  EXPECT_EQ(out_of(p / "prog"), "70");
  EXPECT_NE(file_sha256(p / "k.o"), object);
  revert();
  EXPECT_EQ(file_sha256(p / "k.o"), object);
  EXPECT_EQ(out_of(p / "prog"), "40");
  // The install's next link (another source touched) ships the stock object.
  ASSERT_EQ(run({"touch", (p / "main.c").string()}).rc, 0);
  ASSERT_EQ(run({"make", "-s", "-C", p.string()}).rc, 0);
  EXPECT_EQ(out_of(p / "prog"), "40");
  Cmd s = overlay({"status", "--overlay", ov, "--check-clean"});
  EXPECT_EQ(s.rc, 0) << s.out << s.err;
}

}  // namespace
