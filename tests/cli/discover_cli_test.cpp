// `overlay discover` through the real binary, on builds made for real (CMake + Ninja, plain Ninja,
// Make, setuptools in place, a task config). The proof for each: add-native with exactly the
// reported add_native_args round-trips (FRESH_BUILD_OK, new behaviour, revert byte-exact).
// The torch JIT fixture lives in tests/realworld (it compiles against libtorch).
#include <sys/stat.h>

#include <algorithm>
#include <functional>
#include <iostream>
#include <map>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util.hpp"

using namespace overlay::test;
using json = nlohmann::json;

namespace {

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::set<std::string> strings(const json& a) {
  std::set<std::string> s;
  for (const auto& x : a) s.insert(x.get<std::string>());
  return s;
}

std::int64_t mtime_ns(const fs::path& p) {
  struct stat st {};
  if (::lstat(p.c_str(), &st) != 0) return -1;
  return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

struct Discover : ::testing::Test {
  TempDir t;
  fs::path ov = t / "ov";
  std::vector<std::string> env = {"TORCH_EXTENSIONS_DIR=" + (t / "no-jit-cache").string()};

  json discover(const fs::path& target, int expect_rc = 0) {
    Cmd c = run_overlay({"--json", "discover", "--target", target.string(), "--root", t.path().string()}, {}, env);
    EXPECT_EQ(c.rc, expect_rc) << c.out << c.err;
    return json::parse(c.out);
  }

  // add-native --overlay O --patched-file F + the reported flags; verify; run; revert; compare.
  void round_trip(const json& cand, const fs::path& patched, const std::function<std::string()>& value,
                  const std::string& old_value, const std::string& new_value, const std::vector<fs::path>& exact,
                  const std::vector<std::string>& env_add = {}) {
    std::vector<std::string> args = {"add-native", "--overlay", ov.string(), "--patched-file", patched.string()};
    for (const auto& a : cand["add_native_args"]) args.push_back(a.get<std::string>());
    std::map<std::string, std::string> before;
    for (const auto& e : exact) before[e.string()] = fs::is_directory(e) ? tree_digest(e) : file_sha256(e);
    ASSERT_EQ(value(), old_value);
    std::vector<std::string> e2 = env;
    e2.insert(e2.end(), env_add.begin(), env_add.end());
    Cmd a = run_overlay(args, {}, e2);
    ASSERT_EQ(a.rc, 0) << a.err;
    Cmd v = run_overlay({"verify-native", "--overlay", ov.string()});
    EXPECT_EQ(v.rc, 0) << v.out;
    EXPECT_NE(v.out.find("FRESH_BUILD_OK (checked " + std::to_string(cand["artifacts"].size()) + ")"),
              std::string::npos)
        << v.out;
    EXPECT_EQ(value(), new_value);
    Cmd r = run_overlay({"revert", "--overlay", ov.string()});
    ASSERT_EQ(r.rc, 0) << r.err;
    for (const auto& e : exact)
      EXPECT_EQ(fs::is_directory(e) ? tree_digest(e) : file_sha256(e), before[e.string()]) << e << " after revert";
    std::cout << "ROUNDTRIP | " << cand["kind"].get<std::string>() << " | " << a.out.substr(a.out.find('\n') + 1)
              << "           | " << trim(v.out.substr(v.out.rfind("FRESH"))) << " | value " << old_value << " -> "
              << new_value << " -> " << value() << " | " << trim(r.out) << std::endl;
  }
};

// CMake + Ninja: two libraries of which only one links kernel.cpp, an executable linking it.
void make_cmake_project(const fs::path& proj) {
  write_file(proj / "CMakeLists.txt",
             "cmake_minimum_required(VERSION 3.16)\nproject(disc CXX)\n"
             "add_library(fast SHARED kernel.cpp)\nadd_library(other SHARED other.cpp)\n"
             "add_executable(app main.cpp)\ntarget_link_libraries(app fast)\n"
             "if(EXTRA)\n  add_library(fast_static STATIC kernel.cpp)\n  add_executable(app2 main.cpp)\n"
             "  target_link_libraries(app2 fast_static)\nendif()\n");
  write_file(proj / "kernel.cpp", "int kernel() { return 4; }\n");
  write_file(proj / "other.cpp", "int other() { return 1; }\n");
  write_file(proj / "main.cpp", "#include <cstdio>\nint kernel();\nint main() { std::printf(\"%d\\n\", kernel()); }\n");
}

bool configure_and_build(const fs::path& src, const fs::path& build, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> argv = {"cmake", "-S", src.string(), "-B", build.string(), "-G", "Ninja"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return run(argv).rc == 0 && run({"cmake", "--build", build.string()}).rc == 0;
}

}  // namespace

TEST_F(Discover, CMakeNinjaNamesExactlyTheDependentArtifacts) {
  fs::path proj = t / "proj", build = proj / "build";
  make_cmake_project(proj);
  ASSERT_TRUE(configure_and_build(proj, build));
  write_file(t / "best/kernel.cpp", "int kernel() { return 7; }\n");
  json d = discover(proj / "kernel.cpp");
  std::cout << "DISCOVER cmake fixture:\n" << d.dump(2) << std::endl;
  ASSERT_EQ(d["candidates"].size(), 1u) << d.dump(2);
  json c = d["candidates"][0];
  EXPECT_EQ(c["kind"], "cmake");
  EXPECT_EQ(c["build_cmd"], json({"cmake", "--build", build.string()}));
  EXPECT_EQ(c["build_cwd"], build.string());
  // The object and the library that links it; not libother.so, and not `app`, which links
  // libfast.so dynamically (relinked to the same bytes, so nothing to back up or verify).
  EXPECT_EQ(strings(c["artifacts"]), (std::set<std::string>{(build / "CMakeFiles/fast.dir/kernel.cpp.o").string(),
                                                            (build / "libfast.so").string()}));
  EXPECT_TRUE(c["caches"].empty());
  EXPECT_EQ(d["target"], (proj / "kernel.cpp").string());
  round_trip(c, t / "best/kernel.cpp", [&] { return trim(run({(build / "app").string()}).out); }, "4", "7",
             {proj / "kernel.cpp", build / "libfast.so", build / "app", build / "libother.so"});
}

// Issue 74: CMake's default generator on Linux, Unix Makefiles (`make -n -W` never reaches its
// recursive sub-makes, and only build.ninja was looked for: "no build found"). CMake's own rules
// name the objects, the libraries and the executable a static library links into; a header by
// the objects compiled with it. The add-native flags round-trip.
TEST_F(Discover, CMakeUnixMakefilesNamesTheDependentArtifacts) {
  fs::path proj = t / "proj", build = proj / "build";
  make_cmake_project(proj);
  write_file(proj / "k.h", "#define K 4\n");
  write_file(proj / "kernel.cpp", "#include \"k.h\"\nint kernel() { return K; }\n");
  std::vector<std::string> argv = {"cmake",        "-S", proj.string(),    "-B",
                                   build.string(), "-G", "Unix Makefiles", "-DEXTRA=ON"};
  ASSERT_EQ(run(argv).rc, 0);
  ASSERT_EQ(run({"cmake", "--build", build.string()}).rc, 0);
  ASSERT_FALSE(fs::exists(build / "build.ninja"));
  const std::set<std::string> expected = {(build / "CMakeFiles/fast.dir/kernel.cpp.o").string(),
                                          (build / "libfast.so").string(),
                                          (build / "CMakeFiles/fast_static.dir/kernel.cpp.o").string(),
                                          (build / "libfast_static.a").string(), (build / "app2").string()};
  for (const char* target : {"kernel.cpp", "k.h"}) {
    SCOPED_TRACE(target);
    json d = discover(proj / target);
    ASSERT_EQ(d["candidates"].size(), 1u) << d.dump(2);
    json c = d["candidates"][0];
    EXPECT_EQ(c["kind"], "cmake");
    EXPECT_EQ(c["build_cmd"], json({"cmake", "--build", build.string()}));
    EXPECT_EQ(strings(c["artifacts"]), expected) << c.dump(2);
  }
  write_file(t / "best/k.h", "#define K 7\n");
  json c = discover(proj / "k.h")["candidates"][0];
  round_trip(c, t / "best/k.h", [&] { return trim(run({(build / "app2").string()}).out); }, "4", "7",
             {proj / "k.h", build / "libfast.so", build / "app2", build / "libother.so"});
}

TEST_F(Discover, FileInTwoBuildsBothRankedAndSymlinkedPathResolved) {
  fs::path proj = t / "proj";
  make_cmake_project(proj);
  // build-extra built first: `build`, the most recently built, ranks first.
  ASSERT_TRUE(configure_and_build(proj, proj / "build-extra", {"-DEXTRA=ON"}));
  ASSERT_TRUE(configure_and_build(proj, proj / "build"));
  fs::create_directory_symlink(proj, t / "link");
  for (const fs::path& target : {proj / "kernel.cpp", t / "link/kernel.cpp"}) {
    json d = discover(target);
    ASSERT_EQ(d["candidates"].size(), 2u) << d.dump(2);
    EXPECT_EQ(d["candidates"][0]["build_cwd"], (proj / "build").string()) << target;
    EXPECT_EQ(d["candidates"][1]["build_cwd"], (proj / "build-extra").string()) << target;
    EXPECT_EQ(d["candidates"][0]["artifacts"].size(), 2u);
    // There it is also built into a static library that app2 links: 2 objects, 2 libraries and
    // app2 (its bytes change: the code is inside it).
    EXPECT_EQ(strings(d["candidates"][1]["artifacts"]),
              (std::set<std::string>{(proj / "build-extra/CMakeFiles/fast.dir/kernel.cpp.o").string(),
                                     (proj / "build-extra/CMakeFiles/fast_static.dir/kernel.cpp.o").string(),
                                     (proj / "build-extra/libfast.so").string(),
                                     (proj / "build-extra/libfast_static.a").string(),
                                     (proj / "build-extra/app2").string()}));
    std::string why = d["candidates"][1]["evidence"].back();
    EXPECT_NE(why.find("rank 2 of 2: rebuilds 5 artifact(s); built before rank 1's"), std::string::npos) << why;
    EXPECT_EQ(d["candidates"][0]["add_native_args"][1], target.string());  // as the caller named it
  }
}

TEST_F(Discover, WritesNothing) {
  fs::path proj = t / "proj", build = proj / "build";
  make_cmake_project(proj);
  ASSERT_TRUE(configure_and_build(proj, build));
  write_file(t / "mk/k.c", "int k(void) { return 1; }\n");
  write_file(t / "mk/Makefile", "k.o: k.c\n\tcc -c -o k.o k.c\n");
  ASSERT_EQ(run({"make", "-C", (t / "mk").string()}).rc, 0);
  std::string before = tree_digest(t.path());
  std::vector<std::int64_t> times;
  for (const auto& p :
       {build / ".ninja_log", build / ".ninja_deps", build / "build.ninja", t / "mk/k.o", proj.parent_path()})
    times.push_back(mtime_ns(p));
  discover(proj / "kernel.cpp");
  discover(t / "mk/k.c");
  EXPECT_EQ(tree_digest(t.path()), before);
  std::vector<std::int64_t> after;
  for (const auto& p :
       {build / ".ninja_log", build / ".ninja_deps", build / "build.ninja", t / "mk/k.o", proj.parent_path()})
    after.push_back(mtime_ns(p));
  EXPECT_EQ(after, times);
  EXPECT_FALSE(fs::exists(ov));  // no overlay, no lock, no state
}

TEST_F(Discover, PlainNinjaTreeWithRelativeInputs) {
  fs::path nt = t / "nt";
  write_file(nt / "src/k.c", "int k(void) { return 4; }\n");
  write_file(nt / "src/main.c",
             "#include <stdio.h>\nint k(void);\nint main(void) { printf(\"%d\\n\", k()); return 0; }\n");
  write_file(nt / "src/unrelated.c", "int u(void) { return 0; }\n");
  write_file(nt / "out/build.ninja",
             "rule cc\n  command = cc -c $in -o $out\nrule link\n  command = cc $in -o $out\n"
             "build k.o: cc ../src/k.c\nbuild main.o: cc ../src/main.c\nbuild u.o: cc ../src/unrelated.c\n"
             "build app: link k.o main.o\nbuild all: phony app u.o\ndefault all\n");
  ASSERT_EQ(run({"ninja", "-C", (nt / "out").string()}).rc, 0);
  write_file(t / "best/k.c", "int k(void) { return 7; }\n");
  json d = discover(nt / "src/k.c");
  ASSERT_EQ(d["candidates"].size(), 1u) << d.dump(2);
  json c = d["candidates"][0];
  EXPECT_EQ(c["kind"], "ninja");
  EXPECT_EQ(c["build_cmd"], json({"ninja", "-C", (nt / "out").string()}));
  EXPECT_EQ(strings(c["artifacts"]), (std::set<std::string>{(nt / "out/k.o").string(), (nt / "out/app").string()}));
  round_trip(c, t / "best/k.c", [&] { return trim(run({(nt / "out/app").string()}).out); }, "4", "7",
             {nt / "src", nt / "out/app", nt / "out/k.o", nt / "out/u.o"});
}

TEST_F(Discover, MakefileAndTaskConfig) {
  fs::path task = t / "task", app = task / "app";
  write_file(app / "kernel.c", "int kernel(void) { return 4; }\n");
  write_file(app / "other.c", "int other(void) { return 1; }\n");
  write_file(app / "main.c",
             "#include <stdio.h>\nint kernel(void);\nint main(void) { printf(\"%d\\n\", kernel()); return 0; }\n");
  write_file(app / "Makefile",
             "all: app libother.a\napp: main.o kernel.o\n\t$(CC) -o $@ main.o kernel.o\n"
             "libother.a: other.o\n\tar rcs $@ other.o\n%.o: %.c\n\t$(CC) -O2 -c -o $@ $<\n.PHONY: all\n");
  write_file(task / "config.yaml", "name: demo\ncompile_command: |\n  make -C\n  " + app.string() + "\nrepeat: 3\n");
  ASSERT_EQ(run({"make", "-C", app.string()}).rc, 0);
  write_file(t / "best/kernel.c", "int kernel(void) { return 7; }\n");
  json d = discover(app / "kernel.c");
  ASSERT_EQ(d["candidates"].size(), 2u) << d.dump(2);
  json mk = d["candidates"][0], cfg = d["candidates"][1];
  EXPECT_EQ(mk["kind"], "make");
  EXPECT_EQ(strings(mk["artifacts"]), (std::set<std::string>{(app / "kernel.o").string(), (app / "app").string()}));
  EXPECT_EQ(cfg["kind"], "config");
  EXPECT_EQ(cfg["build_cmd"], json({"make", "-C", app.string()}));
  EXPECT_NE(cfg["evidence"][0].get<std::string>().find("config.yaml:2: compile_command"), std::string::npos)
      << cfg.dump();
  auto value = [&] { return trim(run({(app / "app").string()}).out); };
  round_trip(mk, t / "best/kernel.c", value, "4", "7",
             {app / "kernel.c", app / "kernel.o", app / "app", app / "libother.a"});
  // The config's command rebuilds too; with no artifacts to track, only the source is restored.
  fs::remove_all(ov);
  round_trip(cfg, t / "best/kernel.c", value, "4", "7", {app / "kernel.c"});
  ASSERT_EQ(run({"make", "-C", app.string()}).rc, 0);
  EXPECT_EQ(value(), "4");
}

TEST_F(Discover, SetuptoolsInPlace) {
  const char* py = "/usr/bin/python3";
  if (run({py, "-c", "import setuptools"}).rc != 0) GTEST_SKIP() << py << " lacks setuptools (python3-setuptools)";
  fs::path proj = t / "proj";
  write_file(proj / "csrc/dsq.c", c_extension_source("dsq", 4));
  write_file(t / "best/dsq.c", c_extension_source("dsq", 7));
  write_file(
      proj / "setup.py",
      "from setuptools import setup, Extension\nsetup(name='dsq', ext_modules=[Extension('dsq', ['csrc/dsq.c'])])\n");
  Cmd b = run({py, "setup.py", "-q", "build_ext", "--inplace"}, proj);
  ASSERT_EQ(b.rc, 0) << b.err;
  json d = discover(proj / "csrc/dsq.c");
  ASSERT_EQ(d["candidates"].size(), 1u) << d.dump(2);
  json cand = d["candidates"][0];
  EXPECT_EQ(cand["kind"], "setuptools");
  // The interpreter is named by its path: one that builds this ABI and imports setuptools.
  ASSERT_EQ(cand["build_cmd"].size(), 4u);
  EXPECT_EQ(json(std::vector<json>(cand["build_cmd"].begin() + 1, cand["build_cmd"].end())),
            json({"setup.py", "build_ext", "--inplace"}));
  EXPECT_EQ(run({cand["build_cmd"][0].get<std::string>(), "-c", "import setuptools"}).rc, 0);
  EXPECT_EQ(cand["build_cwd"], proj.string());
  // Every output that stays on disk: the object under build/temp.*, the module under build/lib.*
  // and its in-place copy.
  fs::path so;
  std::set<std::string> kinds;
  for (const auto& a : cand["artifacts"]) {
    fs::path p = a.get<std::string>();
    std::string rel = p.lexically_relative(proj).string();
    if (rel.rfind("build/temp.", 0) == 0 && p.filename() == "dsq.o")
      kinds.insert("object");
    else if (rel.rfind("build/lib.", 0) == 0 && p.filename().string().rfind("dsq.", 0) == 0)
      kinds.insert("build copy");
    else if (p.parent_path() == proj && p.filename().string().rfind("dsq.", 0) == 0)
      kinds.insert("in place"), so = p;
  }
  EXPECT_EQ(kinds, (std::set<std::string>{"object", "build copy", "in place"})) << cand.dump(2);
  EXPECT_EQ(cand["artifacts"].size(), 3u);
  // Debian's python3 first on PATH: the one with setuptools that built the extension.
  auto value = [&] { return trim(run({py, "-c", "import dsq; print(dsq.value())"}, proj).out); };
  round_trip(cand, t / "best/dsq.c", value, "4", "7", {proj / "csrc", so}, {"PATH=/usr/bin:/bin"});
}

TEST_F(Discover, UnknownFileExitsOneAndListsPlaces) {
  write_file(t / "lonely/dir/x.cpp", "int x;\n");
  Cmd c =
      run_overlay({"discover", "--target", (t / "lonely/dir/x.cpp").string(), "--root", t.path().string()}, {}, env);
  EXPECT_EQ(c.rc, 1);
  EXPECT_EQ(c.out, "");
  EXPECT_EQ(std::count(c.err.begin(), c.err.end(), '\n'), 1) << c.err;
  EXPECT_NE(c.err.find("discover: no build found that compiles " + (t / "lonely/dir/x.cpp").string() + "; searched: " +
                       (t / "lonely/dir").string() + ", " + (t / "lonely").string() + ", " + t.path().string()),
            std::string::npos)
      << c.err;
  json j = discover(t / "lonely/dir/x.cpp", 1);
  EXPECT_EQ(j["ok"], false);
  EXPECT_EQ(j["exit"], 1);
  EXPECT_TRUE(j["candidates"].empty());
  EXPECT_GE(j["searched"].size(), 3u);
  EXPECT_NE(j["error"].get<std::string>().find("no build found"), std::string::npos);
  // Bad input: one line, exit 1.
  Cmd missing = run_overlay({"discover", "--target", (t / "nope.cpp").string()});
  EXPECT_EQ(missing.rc, 1);
  EXPECT_EQ(missing.err, "discover: target does not exist: " + (t / "nope.cpp").string() + "\n");
}
