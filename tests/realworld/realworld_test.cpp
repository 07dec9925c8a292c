// Real third-party builds nobody here wrote, each as the full A/B loop an agent runs:
// reference run -> add-native with the install's own build -> verify-native -> candidate run
// shows the new behaviour -> revert -> source, artifacts and caches byte-exact -> the old
// behaviour again -> the install's next incremental build leaves the artifacts' bytes as they were.
// Builds: a torch cpp_extension JIT extension (its .so inside its own JIT cache dir), a
// setuptools C extension built in place, a plain Makefile project, and googletest's own
// CMake + Ninja build from Debian's /usr/src/googletest. Each prints one "REALWORLD |" line.
#include <sys/stat.h>

#include <iostream>
#include <map>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util.hpp"

using namespace overlay::test;

namespace {

constexpr const char* kSystemPython = "/usr/bin/python3";  // Debian's, with torch and setuptools

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// The install as the loop sees it: how to run it, how it is built, what the build produces.
struct Project {
  std::string kind;
  fs::path source, patched;  // the installed file and its optimised version
  std::vector<fs::path> artifacts, caches;
  std::vector<fs::path> exact;  // trees that must come back byte-exact (source dir, caches…)
  std::string build_cmd;        // the install's own incremental build
  fs::path build_cwd;
  std::vector<std::string> env;
  std::vector<std::string> extra_flags;    // more add-native flags (e.g. --cache-snapshot tar)
  std::vector<std::string> discovered;     // `discover`'s add_native_args: used instead of
                                           // --target/--artifact/--invalidate-cache when set
  std::function<std::string()> run_value;  // what the installed code computes now
  // Outputs the install's next build rewrites only when it compiles (default: the artifacts);
  // setuptools copies its .so in place on every build, so there it is the object file.
  std::vector<fs::path> compiled;
  // Whether a dependency record (Ninja's deps log, depfiles) names the patched source, so that the
  // build store keeps its build and serves it again; without one it builds again, saying why.
};

// (mtime ns, inode) of each file: a rewrite changes one or the other.
std::map<fs::path, std::pair<std::int64_t, std::uint64_t>> stamps(const std::vector<fs::path>& files) {
  std::map<fs::path, std::pair<std::int64_t, std::uint64_t>> out;
  for (const auto& f : files) {
    struct stat st {};
    if (::stat(f.c_str(), &st) == 0) out[f] = {st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec, st.st_ino};
  }
  return out;
}

std::map<fs::path, std::string> digests(const Project& p) {
  std::map<fs::path, std::string> d;
  for (const auto& e : p.exact) d[e] = tree_digest(e);
  for (const auto& a : p.artifacts) d[a] = file_sha256(a);
  return d;
}

std::string short_sha(const fs::path& f) { return fs::exists(f) ? file_sha256(f).substr(0, 12) : "absent"; }

void ab_loop(const Project& p, const std::string& old_value, const std::string& new_value, const fs::path& ov) {
  std::string ref = p.run_value();
  ASSERT_EQ(ref, old_value) << p.kind << ": reference run";
  auto before = digests(p);
  std::string art_before = short_sha(p.artifacts.front());

  std::vector<std::string> add = {"add-native",  "--overlay", ov.string(),   "--patched-file",    p.patched.string(),
                                  "--build-cmd", p.build_cmd, "--build-cwd", p.build_cwd.string()};
  if (!p.discovered.empty()) {
    add.insert(add.end(), p.discovered.begin(), p.discovered.end());
  } else {
    add.insert(add.end(), {"--target", p.source.string()});
    for (const auto& a : p.artifacts) add.insert(add.end(), {"--artifact", a.string()});
    for (const auto& c : p.caches) add.insert(add.end(), {"--invalidate-cache", c.string()});
  }
  add.insert(add.end(), p.extra_flags.begin(), p.extra_flags.end());
  Cmd a = run_overlay(add, {}, p.env);
  ASSERT_EQ(a.rc, 0) << p.kind << ": " << a.err;
  Cmd v = run_overlay({"verify-native", "--overlay", ov.string()}, {}, p.env);
  EXPECT_EQ(v.rc, 0) << v.out << v.err;
  EXPECT_NE(v.out.find("FRESH_BUILD_OK (checked " + std::to_string(p.artifacts.size()) + ")"), std::string::npos)
      << v.out;
  std::string art_during = short_sha(p.artifacts.front());
  std::string cand = p.run_value();
  EXPECT_EQ(cand, new_value) << p.kind << ": candidate run";

  Cmd r = run_overlay({"revert", "--overlay", ov.string()}, {}, p.env);
  ASSERT_EQ(r.rc, 0) << r.err;
  // Every output the candidate's build made from the patched source is restored (tracked, or in a
  // restored cache): revert gives back the original mtimes, and the install's build (the next load
  // of a JIT extension included) has nothing to redo (issue 51).
  EXPECT_NE(r.err.find("original mtimes back"), std::string::npos) << p.kind << ": " << r.err;
  const std::vector<fs::path>& compiled = p.compiled.empty() ? p.artifacts : p.compiled;
  auto after_revert = stamps(compiled);
  bool exact = digests(p) == before;
  EXPECT_TRUE(exact) << p.kind << ": source, artifacts and caches byte-exact after revert";
  EXPECT_EQ(run_overlay({"status", "--overlay", ov.string(), "--check-clean"}).rc, 0);
  std::string after = p.run_value();
  EXPECT_EQ(after, old_value) << p.kind << ": run after revert";

  // The install's next incremental build: the artifacts come out with the bytes they had.
  std::vector<std::string> argv = {"sh", "-c", p.build_cmd};
  Cmd b = run(argv, p.build_cwd, p.env);
  ASSERT_EQ(b.rc, 0) << b.err;
  for (const auto& art : p.artifacts) EXPECT_EQ(file_sha256(art), before.at(art)) << art << " after the next build";
  std::string again = p.run_value();
  EXPECT_EQ(again, old_value);
  bool nothing_redone = stamps(compiled) == after_revert;
  EXPECT_TRUE(nothing_redone) << p.kind << ": the build after revert compiled again";

  // The same candidate again (an ABAB confirmation run): what its build made comes back from the
  // build store, no build command runs, and the install's own build agrees there is nothing to
  // redo; a revert then leaves everything as before, as after a build.
  Cmd a2 = run_overlay(add, {}, p.env);
  ASSERT_EQ(a2.rc, 0) << p.kind << ": " << a2.err;
  // Traced, what the build read is known whatever its rules say (setuptools and a Makefile write no
  // depfiles): the same candidate is served.
  bool served = a2.err.find("store: hit") != std::string::npos;
  EXPECT_TRUE(served) << p.kind << ": " << a2.err;
  EXPECT_EQ(run_overlay({"verify-native", "--overlay", ov.string()}, {}, p.env).rc, 0);
  EXPECT_EQ(file_sha256(p.artifacts.front()).substr(0, 12), art_during)
      << p.kind << ": the served artifact is the candidate's build";
  auto served_stamps = stamps(compiled);
  Cmd b2 = run(argv, p.build_cwd, p.env);
  ASSERT_EQ(b2.rc, 0) << b2.err;
  EXPECT_EQ(p.run_value(), new_value) << p.kind << ": candidate served from the store";
  bool served_clean = stamps(compiled) == served_stamps;
  EXPECT_TRUE(served_clean) << p.kind << ": the install's build compiled again after the second apply";
  Cmd r2 = run_overlay({"revert", "--overlay", ov.string()}, {}, p.env);
  ASSERT_EQ(r2.rc, 0) << r2.err;
  EXPECT_NE(r2.err.find("original mtimes back"), std::string::npos) << p.kind << ": " << r2.err;
  EXPECT_TRUE(digests(p) == before) << p.kind << ": byte-exact after reverting the served apply";
  EXPECT_EQ(p.run_value(), old_value);
  std::cout << "REALWORLD | " << p.kind << " | value " << ref << " -> " << cand << " -> " << after << " -> " << again
            << " (next build) | again: " << (served ? "served from the build store" : "BUILT AGAIN") << ", then "
            << (served_clean ? "nothing to redo" : "COMPILED AGAIN") << " | " << p.artifacts.front().filename().string()
            << " sha256 " << art_before << " -> " << art_during << " -> " << short_sha(p.artifacts.front())
            << " (next build) | source, artifacts, caches after revert: " << (exact ? "equal" : "DIFFERENT")
            << " | build after revert: " << (nothing_redone ? "nothing to redo" : "COMPILED AGAIN") << std::endl;
}

// A plain Makefile project under ROOT/app (kernel.c returns 4, main.c prints it) and the
// candidate ROOT/best/kernel.c (returns 7).
void make_app(const fs::path& root) {
  write_file(root / "app/kernel.c", "int kernel(void) { return 4; }\n");
  write_file(root / "best/kernel.c", "int kernel(void) { return 7; }\n");
  write_file(root / "app/main.c",
             "#include <stdio.h>\nint kernel(void);\nint main(void) { printf(\"%d\\n\", kernel()); return 0; }\n");
  write_file(root / "app/Makefile",
             "app: main.o kernel.o\n\t$(CC) -o $@ main.o kernel.o\n%.o: %.c\n\t$(CC) -O2 -c -o $@ $<\n");
}

}  // namespace

TEST(RealWorld, TorchCppExtensionJit) {
  if (!have({kSystemPython, "-c", "import torch.utils.cpp_extension"}) ||
      !fs::exists("/usr/include/pybind11/pybind11.h"))
    GTEST_SKIP() << kSystemPython << " lacks torch (python3-torch, libtorch-dev) or pybind11's headers (pybind11-dev)";
  TempDir t;
  fs::path te = t / "torch_extensions";  // TORCH_EXTENSIONS_DIR: the JIT cache root
  std::string body =
      "#include <torch/extension.h>\n"
      "torch::Tensor value() { return torch::full({1}, VALUE); }\n"
      "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"value\", &value); }\n";
  auto with_value = [&](const std::string& v) { return "#define VALUE " + v + "\n" + body; };
  write_file(t / "pkg/csrc/rw_ext.cpp", with_value("4.0"));
  write_file(t / "best/rw_ext.cpp", with_value("7.0"));
  write_file(t / "pkg/load.py",
             "import os, sys\nimport torch.utils.cpp_extension as ce\n"
             "here = os.path.dirname(os.path.abspath(__file__))\n"
             "m = ce.load(name='rw_ext', sources=[os.path.join(here, 'csrc/rw_ext.cpp')])\n"
             "print(float(m.value()[0]))\n");
  Project p;
  p.kind = "torch cpp_extension JIT (artifact inside its cache)";
  p.source = t / "pkg/csrc/rw_ext.cpp";
  p.patched = t / "best/rw_ext.cpp";
  p.env = {"TORCH_EXTENSIONS_DIR=" + te.string()};
  p.build_cmd = std::string(kSystemPython) + " " + (t / "pkg/load.py").string();  // loading builds it
  p.build_cwd = t / "pkg";
  p.run_value = [&] {
    Cmd c = run({kSystemPython, (t / "pkg/load.py").string()}, {}, p.env);
    return c.rc == 0 ? trim(c.out) : "error: " + c.err;
  };
  ASSERT_EQ(p.run_value(), "4.0");  // the install's first load compiles it into the JIT cache
  // `discover` finds the extension's build dir in the JIT cache; its flags drive add-native. The
  // build command is the caller's: loading the extension (discover reports none: built on load).
  Cmd d = run_overlay({"--json", "discover", "--target", p.source.string(), "--root", t.path().string()}, {}, p.env);
  ASSERT_EQ(d.rc, 0) << d.err;
  std::cout << "DISCOVER torch JIT fixture:\n" << nlohmann::json::parse(d.out).dump(2) << std::endl;
  nlohmann::json c = nlohmann::json::parse(d.out)["candidates"];
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0]["kind"], "torch-jit");
  EXPECT_TRUE(c[0]["build_cmd"].is_null());
  EXPECT_EQ(c[0]["artifacts"], nlohmann::json({(te / "rw_ext/rw_ext.so").string()}));
  EXPECT_EQ(c[0]["caches"], nlohmann::json({(te / "rw_ext").string()}));
  for (const auto& a : c[0]["add_native_args"]) p.discovered.push_back(a.get<std::string>());
  p.artifacts = {te / "rw_ext/rw_ext.so"};
  p.caches = {te / "rw_ext"};
  p.exact = {t / "pkg", te};
  ASSERT_TRUE(fs::exists(p.artifacts.front()));
  ab_loop(p, "4.0", "7.0", t / "ov");
}

TEST(RealWorld, SetuptoolsInPlaceExtension) {
  if (!have({kSystemPython, "-c",
             "import setuptools, sysconfig, os, sys; sys.exit(not "
             "os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))"}))
    GTEST_SKIP() << kSystemPython << " lacks setuptools or its headers (python3-setuptools, python3-dev)";
  TempDir t;
  write_file(t / "proj/rwsq.c", c_extension_source("rwsq", 4));
  write_file(t / "best/rwsq.c", c_extension_source("rwsq", 7));
  write_file(
      t / "proj/setup.py",
      "from setuptools import setup, Extension\nsetup(name='rwsq', ext_modules=[Extension('rwsq', ['rwsq.c'])])\n");
  Project p;
  p.kind = "setuptools build_ext --inplace";
  p.source = t / "proj/rwsq.c";
  p.patched = t / "best/rwsq.c";
  p.build_cmd = std::string(kSystemPython) + " setup.py -q build_ext --inplace";
  p.build_cwd = t / "proj";
  Cmd b = run({"sh", "-c", p.build_cmd}, p.build_cwd);
  ASSERT_EQ(b.rc, 0) << b.err;
  Cmd so = run({kSystemPython, "-c", "import sysconfig; print('rwsq' + sysconfig.get_config_var('EXT_SUFFIX'))"});
  p.artifacts = {t / "proj" / trim(so.out)};
  p.caches = {t / "proj/build"};  // setuptools' objects: snapshotted as a tar
  p.extra_flags = {"--cache-snapshot", "tar"};
  for (const auto& e : fs::recursive_directory_iterator(t / "proj/build"))
    if (e.path().extension() == ".o") p.compiled.push_back(e.path());
  ASSERT_FALSE(p.compiled.empty());
  p.exact = {t / "proj"};
  p.run_value = [&] {
    Cmd r = run({kSystemPython, "-c", "import rwsq; print(rwsq.value())"}, t / "proj");
    return r.rc == 0 ? trim(r.out) : "error: " + r.err;
  };
  ab_loop(p, "4", "7", t / "ov");
}

TEST(RealWorld, PlainMakefile) {
  if (!have({"make", "--version"}) || !have({"cc", "--version"})) GTEST_SKIP() << "make or cc missing";
  TempDir t;
  make_app(t.path());
  Project p;
  p.kind = "plain Makefile";
  p.source = t / "app/kernel.c";
  p.patched = t / "best/kernel.c";
  p.build_cmd = "make";
  p.build_cwd = t / "app";
  ASSERT_EQ(run({"make"}, p.build_cwd).rc, 0);
  p.artifacts = {t / "app/app", t / "app/kernel.o"};
  p.exact = {t / "app"};
  p.run_value = [&] { return trim(run({(t / "app/app").string()}).out); };
  ab_loop(p, "4", "7", t / "ov");
}

TEST(RealWorld, DebianGoogletestCMakeNinja) {
  fs::path upstream = "/usr/src/googletest";
  if (!fs::exists(upstream / "CMakeLists.txt")) GTEST_SKIP() << upstream << " missing (Debian's googletest package)";
  if (!have({"cmake", "--version"}) || !have({"ninja", "--version"})) GTEST_SKIP() << "cmake or ninja missing";
  TempDir t;
  fs::copy(upstream, t / "googletest", fs::copy_options::recursive);
  fs::path src = t / "googletest/googletest/src/gtest.cc";
  std::string text = read_file(src);
  std::string from = "\"[  PASSED  ] \"", to = "\"[  FASTER  ] \"";
  ASSERT_NE(text.find(from), std::string::npos);
  for (std::size_t at; (at = text.find(from)) != std::string::npos;) text.replace(at, from.size(), to);
  write_file(t / "best/gtest.cc", text);
  fs::path build = t / "build";
  Cmd cfg = run({"cmake", "-S", (t / "googletest").string(), "-B", build.string(), "-G", "Ninja", "-DBUILD_GMOCK=OFF",
                 "-DBUILD_SHARED_LIBS=ON"});
  ASSERT_EQ(cfg.rc, 0) << cfg.err;
  ASSERT_EQ(run({"cmake", "--build", build.string()}).rc, 0);
  // A user of the installed library, built once against it: it sees the rebuilt .so at run time.
  write_file(t / "user/t.cpp", "#include <gtest/gtest.h>\nTEST(User, Works) { EXPECT_EQ(1, 1); }\n");
  Cmd cc = run({"c++", "-o", (t / "user/t").string(), (t / "user/t.cpp").string(), "-I",
                (t / "googletest/googletest/include").string(), "-L", (build / "lib").string(), "-lgtest_main",
                "-lgtest", "-pthread", "-Wl,-rpath," + (build / "lib").string()});
  ASSERT_EQ(cc.rc, 0) << cc.err;
  Project p;
  p.kind = "googletest (Debian /usr/src) CMake + Ninja";
  p.source = src;
  p.patched = t / "best/gtest.cc";
  p.build_cmd = "cmake --build " + build.string();
  p.build_cwd = t.path();
  fs::path so = fs::canonical(build / "lib/libgtest.so");
  p.artifacts = {so, build / "googletest/CMakeFiles/gtest.dir/src/gtest-all.cc.o"};
  p.exact = {t / "googletest"};
  p.run_value = [&] {
    std::string out = run({(t / "user/t").string()}, {}, {"GTEST_COLOR=no"}).out;
    return out.find("[  FASTER  ] 1 test.") != std::string::npos   ? std::string("FASTER")
           : out.find("[  PASSED  ] 1 test.") != std::string::npos ? std::string("PASSED")
                                                                   : "unexpected: " + out;
  };
  ab_loop(p, "PASSED", "FASTER", t / "ov");
}

// Back-to-back cycles (candidate A, revert, candidate B at once, revert …) as an agent runs them:
// the add-native right after a revert does not wait out the second (restored build outputs are
// dated a second back), and both guarantees still hold with setuptools, which compares whole
// seconds, and with make: each candidate's source is rebuilt (strictly newer than the restored
// artifact), and after the last revert the install's next build gives the original again.
TEST(RealWorld, BackToBackCyclesDoNotWaitAndStillRebuild) {
  bool setuptools = have({kSystemPython, "-c",
                          "import setuptools, sysconfig, os, sys; sys.exit(not "
                          "os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))"});
  if (!setuptools || !have({"make", "--version"})) GTEST_SKIP() << "needs setuptools with Python's headers, and make";
  TempDir t;
  struct Tree {
    std::string kind, build_cmd;
    fs::path dir, source;
    std::vector<fs::path> artifacts;
    std::function<std::string(int)> source_text;
    std::function<std::string()> value;
  };
  std::vector<Tree> trees;
  {
    Tree s{"setuptools",
           std::string(kSystemPython) + " setup.py -q build_ext --inplace",
           t / "st",
           t / "st/bb.c",
           {},
           {},
           {}};
    s.source_text = [](int v) { return c_extension_source("bb", v); };
    write_file(s.source, s.source_text(4));
    write_file(s.dir / "setup.py",
               "from setuptools import setup, Extension\nsetup(name='bb', ext_modules=[Extension('bb', ['bb.c'])])\n");
    ASSERT_EQ(run({"sh", "-c", s.build_cmd}, s.dir).rc, 0);
    std::string suffix =
        trim(run({kSystemPython, "-c", "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))"}).out);
    s.artifacts = {s.dir / ("bb" + suffix)};
    for (const auto& e : fs::recursive_directory_iterator(s.dir / "build"))
      if (e.is_regular_file()) s.artifacts.push_back(e.path());  // the object and the build/lib copy
    fs::path d = s.dir;
    s.value = [d] { return trim(run({kSystemPython, "-c", "import bb; print(bb.value())"}, d).out); };
    trees.push_back(s);
  }
  {
    Tree m{"make", "make", t / "mk", t / "mk/kernel.c", {t / "mk/app", t / "mk/kernel.o"}, {}, {}};
    m.source_text = [](int v) { return "int kernel(void) { return " + std::to_string(v) + "; }\n"; };
    write_file(m.source, m.source_text(4));
    write_file(m.dir / "main.c",
               "#include <stdio.h>\nint kernel(void);\nint main(void) { printf(\"%d\\n\", kernel()); return 0; }\n");
    write_file(m.dir / "Makefile",
               "app: main.o kernel.o\n\t$(CC) -o $@ main.o kernel.o\n%.o: %.c\n\t$(CC) -O2 -c -o $@ $<\n");
    ASSERT_EQ(run({"make"}, m.dir).rc, 0);
    fs::path d = m.dir;
    m.value = [d] { return trim(run({(d / "app").string()}).out); };
    trees.push_back(m);
  }
  for (const auto& tr : trees) {
    ASSERT_EQ(tr.value(), "4") << tr.kind;
    std::size_t waits = 0;
    for (int v : {7, 9, 5}) {
      write_file(t / "best" / tr.source.filename(), tr.source_text(v));
      std::vector<std::string> add = {
          "-v",          "add-native",       "--overlay",      (t / ("ov-" + tr.kind)).string(),
          "--target",    tr.source.string(), "--patched-file", (t / "best" / tr.source.filename()).string(),
          "--build-cmd", tr.build_cmd,       "--build-cwd",    tr.dir.string()};
      for (const auto& a : tr.artifacts) add.insert(add.end(), {"--artifact", a.string()});
      Cmd a = run_overlay(add);
      ASSERT_EQ(a.rc, 0) << tr.kind << ": " << a.err;
      if (a.err.find("waiting for the next before swapping sources") != std::string::npos && v != 7) ++waits;
      EXPECT_EQ(tr.value(), std::to_string(v)) << tr.kind << ": the candidate's source was not rebuilt";
      ASSERT_EQ(run_overlay({"revert", "--overlay", (t / ("ov-" + tr.kind)).string()}).rc, 0);
      EXPECT_EQ(tr.value(), "4") << tr.kind << ": after revert";
    }
    EXPECT_EQ(waits, 0u) << tr.kind << ": an add-native right after a revert waited out the second";
    ASSERT_EQ(run({"sh", "-c", tr.build_cmd}, tr.dir).rc, 0);
    EXPECT_EQ(tr.value(), "4") << tr.kind << ": the install's next build after the last revert";
    std::cout << "BACK-TO-BACK | " << tr.kind << " | 3 cycles (7, 9, 5 -> 4 each) | waits after a revert: " << waits
              << std::endl;
  }
}

// Issue 51: the original mtimes come back only where every output the candidate's build made from
// the patched source is restored. Where one is not (an object no flag tracks, or a build run in
// the build's dirs after the candidate's), revert keeps the fresh rule and says why: the restored
// source is then newer than every output that may hold patched code, and the next build redoes
// them (make -q says there is work; the value after it is the original).
// Where no build can be traced (OVERLAY_BUILD_TRACE=0 here), the watch's rule.
TEST(RealWorld, RevertKeepsTheFreshRuleWhereAnOutputIsNotRestored) {
  if (!have({"make", "--version"}) || !have({"cc", "--version"})) GTEST_SKIP() << "make or cc missing";
  TempDir t;
  std::vector<std::string> env = {"OVERLAY_BUILD_TRACE=0", "OVERLAY_STATE_DIR=" + (t / "state").string()};
  make_app(t.path());
  fs::path app = t / "app";
  ASSERT_EQ(run({"make"}, app).rc, 0);
  auto value = [&] { return trim(run({(app / "app").string()}).out); };
  auto add = [&](std::vector<std::string> artifacts) {
    std::vector<std::string> a = {"add-native",
                                  "--overlay",
                                  (t / "ov").string(),
                                  "--target",
                                  (app / "kernel.c").string(),
                                  "--patched-file",
                                  (t / "best/kernel.c").string(),
                                  "--build-cmd",
                                  "make",
                                  "--build-cwd",
                                  app.string()};
    for (const auto& x : artifacts) a.insert(a.end(), {"--artifact", x});
    return run_overlay(a, {}, env);
  };
  auto mtime = [](const fs::path& f) {
    struct stat st {};
    ::stat(f.c_str(), &st);
    return st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
  };
  // kernel.o untracked: it holds the candidate's code after revert.
  ASSERT_EQ(add({(app / "app").string()}).rc, 0);
  ASSERT_EQ(value(), "7");
  Cmd r = run_overlay({"revert", "--overlay", (t / "ov").string()}, {}, env);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("sources dated now, build outputs a second back (untracked output " +
                       (app / "kernel.o").string() + " may hold patched code)"),
            std::string::npos)
      << r.err;
  EXPECT_GT(mtime(app / "kernel.c"), mtime(app / "kernel.o"))
      << "a restored source older than an output holding patched code";
  EXPECT_NE(run({"make", "-q"}, app).rc, 0) << "make -q says nothing to do over a patched kernel.o";
  ASSERT_EQ(run({"make"}, app).rc, 0);
  EXPECT_EQ(value(), "4");
  // Every output tracked, but another build ran in the build's dir after the candidate's.
  ASSERT_EQ(add({(app / "app").string(), (app / "kernel.o").string()}).rc, 0);
  write_file(app / "extra.c", "int extra(void) { return 1; }\n");
  ASSERT_EQ(run({"make", "extra.o"}, app).rc, 0);
  r = run_overlay({"revert", "--overlay", (t / "ov").string()}, {}, env);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("sources dated now"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("changed since its build"), std::string::npos) << r.err;
  EXPECT_GT(mtime(app / "kernel.c"), mtime(app / "kernel.o"));
  // And where everything is restored and nothing ran since: make -q has nothing to do.
  ASSERT_EQ(run({"make"}, app).rc, 0);
  ASSERT_EQ(add({(app / "app").string(), (app / "kernel.o").string()}).rc, 0);
  r = run_overlay({"revert", "--overlay", (t / "ov").string()}, {}, env);
  EXPECT_NE(r.err.find("original mtimes back"), std::string::npos) << r.err;
  EXPECT_EQ(run({"make", "-q"}, app).rc, 0) << "make -q: work to do after a revert that restored every output";
  EXPECT_EQ(value(), "4");
}

// Traced, every output of the install goes back, and the fresh rule is for what changed since: an
// output of the candidate's build that another build (or a hand) rewrote after it.
TEST(RealWorld, TracedRevertDatesNowOnlyWhereAnOutputChangedSinceTheBuild) {
  if (!have({"make", "--version"}) || !have({"cc", "--version"})) GTEST_SKIP() << "make or cc missing";
  TempDir t;
  std::vector<std::string> env = {"OVERLAY_STATE_DIR=" + (t / "state").string()};
  make_app(t.path());
  fs::path app = t / "app";
  ASSERT_EQ(run({"make"}, app).rc, 0);
  auto value = [&] { return trim(run({(app / "app").string()}).out); };
  std::vector<std::string> add = {"--json",         "add-native",
                                  "--overlay",      (t / "ov").string(),
                                  "--target",       (app / "kernel.c").string(),
                                  "--patched-file", (t / "best/kernel.c").string(),
                                  "--artifact",     (app / "app").string(),
                                  "--build-cmd",    "make",
                                  "--build-cwd",    app.string()};
  auto mtime = [](const fs::path& f) {
    struct stat st {};
    ::stat(f.c_str(), &st);
    return st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
  };
  Cmd a = run_overlay(add, {}, env);
  ASSERT_EQ(a.rc, 0) << a.err;
  if (!nlohmann::json::parse(a.out)["build"]["traced"].get<bool>()) GTEST_SKIP() << "builds cannot be traced here";
  // Another build in the build's dir after the candidate's, of something else: nothing of ours.
  write_file(app / "extra.c", "int extra(void) { return 1; }\n");
  ASSERT_EQ(run({"make", "extra.o"}, app).rc, 0);
  Cmd r = run_overlay({"revert", "--overlay", (t / "ov").string()}, {}, env);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("original mtimes back"), std::string::npos) << r.err;
  EXPECT_EQ(run({"make", "-q", "app"}, app).rc, 0) << "make -q: work to do after a revert that restored every output";
  EXPECT_EQ(value(), "4");
  // kernel.o, an output of the candidate's build, rewritten since by hand: left as it is, and the
  // restored source is dated after it, so the next build redoes it.
  ASSERT_EQ(run_overlay(add, {}, env).rc, 0);
  write_file(app / "kernel.o.new", read_file(app / "kernel.o"));
  fs::rename(app / "kernel.o.new", app / "kernel.o");
  r = run_overlay({"revert", "--overlay", (t / "ov").string()}, {}, env);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("sources dated now"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find((app / "kernel.o").string() + " changed since the build"), std::string::npos) << r.err;
  EXPECT_GT(mtime(app / "kernel.c"), mtime(app / "kernel.o"));
  EXPECT_NE(run({"make", "-q", "app"}, app).rc, 0) << "make -q says nothing to do over a patched kernel.o";
  ASSERT_EQ(run({"make"}, app).rc, 0);
  EXPECT_EQ(value(), "4");
}
