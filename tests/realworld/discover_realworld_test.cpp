// `discover`, round two (issue 20), on builds nobody here wrote: each case runs discover, then
// add-native with exactly the printed add_native_args, verify-native (FRESH_BUILD_OK, every
// reported artifact rebuilt), revert, and checks that no file the build could have touched holds
// patched bytes (every file of the source tree and the build tree compared, build logs aside).
// Regressions for the three failures the issue opens with: order-only edges on GoogleTest's own
// CMake tree, outputs never named (torch BuildExtension's object and build copy, a Makefile that
// compiles without -o), and the wrong interpreter first on PATH.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <map>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util.hpp"

using namespace overlay::test;
using json = nlohmann::json;

namespace {

constexpr const char* kSystemPython = "/usr/bin/python3";  // Debian's, with torch and setuptools

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// SHA-256 of every regular file below each root, by path; build logs and deps aside (they
// record that a build ran, not what it built).
std::map<std::string, std::string> file_digests(const std::vector<fs::path>& roots) {
  std::map<std::string, std::string> d;
  for (const auto& root : roots) {
    for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
      std::string name = it->path().filename().string();
      if (name == ".ninja_log" || name == ".ninja_deps" || name == "__pycache__") {
        if (it->is_directory()) it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file() && !it->is_symlink()) d[it->path().string()] = file_sha256(it->path());
    }
  }
  return d;
}

std::vector<std::string> differing(const std::map<std::string, std::string>& a,
                                   const std::map<std::string, std::string>& b) {
  std::vector<std::string> out;
  for (const auto& [p, h] : a)
    if (!b.count(p) || b.at(p) != h) out.push_back(p);
  for (const auto& [p, h] : b)
    if (!a.count(p)) out.push_back(p + " (new)");
  return out;
}

std::set<std::string> strings(const json& a) {
  std::set<std::string> s;
  for (const auto& x : a) s.insert(x.get<std::string>());
  return s;
}

// The environment a case runs in: HOME and the torch JIT root inside its temp dir (so no cache
// of the machine's is searched), plus `extra`.
std::vector<std::string> home_env(const TempDir& t, std::vector<std::string> extra = {}) {
  extra.push_back("TORCH_EXTENSIONS_DIR=" + (t / "none").string());
  extra.push_back("HOME=" + t.path().string());
  return extra;
}

struct RoundTrip {
  fs::path ov;
  std::vector<std::string> env;
  std::vector<fs::path> trees;         // every file below these must come back byte-exact
  std::function<std::string()> value;  // what the built code computes (empty: not checked)
  std::string old_value, new_value;

  json discover(const fs::path& target, const fs::path& root) const {
    Cmd c = run_overlay({"--json", "discover", "--target", target.string(), "--root", root.string()}, {}, env);
    EXPECT_EQ(c.rc, 0) << c.out << c.err;
    Cmd text = run_overlay({"discover", "--target", target.string(), "--root", root.string()}, {}, env);
    std::cout << "DISCOVER TEXT " << target.filename().string() << "\n" << text.out;
    return json::parse(c.out.empty() ? "{}" : c.out);
  }

  // add-native with exactly the candidate's flags, verify, revert, compare. Returns the result line.
  std::string run_once(const json& cand, const fs::path& patched) const {
    std::vector<std::string> args = {"add-native", "--overlay", ov.string(), "--patched-file", patched.string()};
    for (const auto& a : cand["add_native_args"]) args.push_back(a.get<std::string>());
    auto before = file_digests(trees);
    if (value) {
      EXPECT_EQ(value(), old_value);
    }
    Cmd a = run_overlay(args, {}, env);
    EXPECT_EQ(a.rc, 0) << a.err;
    Cmd v = run_overlay({"verify-native", "--overlay", ov.string()}, {}, env);
    std::string expect = "FRESH_BUILD_OK (checked " + std::to_string(cand["artifacts"].size()) + ")";
    EXPECT_NE(v.out.find(expect), std::string::npos) << v.out << "\n" << cand.dump(2);
    std::string during = value ? value() : "";
    if (value) {
      EXPECT_EQ(during, new_value);
    }
    Cmd r = run_overlay({"revert", "--overlay", ov.string()}, {}, env);
    EXPECT_EQ(r.rc, 0) << r.err;
    auto diff = differing(before, file_digests(trees));
    EXPECT_TRUE(diff.empty()) << "patched bytes left after revert: " << ::testing::PrintToString(diff);
    // Clean: every output the build derived was named by discover (tracked, so restored) or only
    // relinked against a rebuilt shared library; one the watch names "untracked rebuilt" is an
    // output discover missed.
    Cmd st = run_overlay({"status", "--overlay", ov.string(), "--check-clean"}, {}, env);
    EXPECT_EQ(st.rc, 0) << st.out << st.err << a.err;
    std::size_t at = a.err.find("the build rewrote ");
    std::string clear = at == std::string::npos ? "" : a.err.substr(at + 18, a.err.find(' ', at + 18) - at - 18);
    std::string line = trim(v.out.substr(v.out.rfind("FRESH"))) +
                       " | revert: " + (diff.empty() ? "byte-exact" : "DIFFERENT") +
                       " | status: " + (st.rc == 0 ? "clean" : "NOT clean") +
                       (clear.empty() ? "" : " | " + clear + " untracked output(s) holding no patched code");
    if (value) line += " | value " + old_value + " -> " + during + " -> " + value();
    line += r.err.find("original mtimes back") != std::string::npos ? " | mtimes: original" : " | mtimes: fresh";
    return line;
  }
};

// The patched version of a source: one more function with external linkage (its object's bytes
// change whatever the optimiser does); in a header, inside its include guard.
std::string patched_text(const fs::path& src) {
  std::string text = read_file(src);
  std::string stem = src.stem().string();
  std::replace_if(
      stem.begin(), stem.end(), [](char ch) { return !std::isalnum(static_cast<unsigned char>(ch)); }, '_');
  std::string linkage = src.extension() == ".c" ? "" : "extern \"C\" ";
  std::string probe = "\n" + linkage + "int overlay_probe_" + stem + "(void) { return 7; }\n";
  if (src.extension() == ".h") {
    auto end = text.rfind("#endif");
    return text.substr(0, end) + probe + text.substr(end);
  }
  return text + probe;
}

}  // namespace

// GoogleTest as Debian ships it (gtest and gmock, CMake + Ninja): every source of libgtest.a and
// libgtest_main.a round-trips with the printed flags. libgtest_main.a, libgmock.a and
// libgmock_main.a list libgtest.a only as an order-only input: never artifacts of gtest-all.cc.
TEST(DiscoverRealWorld, GoogletestEverySourceOnlyEdgesThatRebuild) {
  fs::path upstream = "/usr/src/googletest";
  if (!fs::exists(upstream / "CMakeLists.txt")) GTEST_SKIP() << upstream << " missing (Debian's googletest package)";
  TempDir t;
  fs::copy(upstream, t / "src", fs::copy_options::recursive);
  fs::path build = t / "build";
  ASSERT_EQ(run({"cmake", "-S", (t / "src").string(), "-B", build.string(), "-G", "Ninja"}).rc, 0);
  ASSERT_EQ(run({"cmake", "--build", build.string()}).rc, 0);
  RoundTrip rt{t / "ov", home_env(t), {t / "src", build}, {}, "", ""};

  json d = rt.discover(t / "src/googletest/src/gtest-printers.cc", t.path());
  ASSERT_EQ(d["candidates"].size(), 1u) << d.dump(2);
  EXPECT_EQ(strings(d["candidates"][0]["artifacts"]),
            (std::set<std::string>{(build / "googletest/CMakeFiles/gtest.dir/src/gtest-all.cc.o").string(),
                                   (build / "lib/libgtest.a").string()}));
  std::string ev = d["candidates"][0]["evidence"].dump();
  EXPECT_NE(ev.find("order-only inputs): lib/libgmock.a lib/libgmock_main.a lib/libgtest_main.a"), std::string::npos)
      << ev;

  std::vector<fs::path> sources;
  for (const auto& e : fs::directory_iterator(t / "src/googletest/src")) sources.push_back(e.path());
  std::sort(sources.begin(), sources.end());
  ASSERT_GE(sources.size(), 10u);
  for (const auto& src : sources) {
    SCOPED_TRACE(src.string());
    json c = rt.discover(src, t.path());
    ASSERT_EQ(c["candidates"].size(), 1u) << c.dump(2);
    json cand = c["candidates"][0];
    for (const auto& a : cand["artifacts"]) EXPECT_EQ(a.get<std::string>().find("gmock"), std::string::npos) << a;
    write_file(t / "patched" / src.filename(), patched_text(src));
    std::string line = rt.run_once(cand, t / "patched" / src.filename());
    std::cout << "ROUNDTRIP | googletest " << src.filename().string() << " | artifacts " << cand["artifacts"].size()
              << " | " << line << std::endl;
  }
}

// A C library whose archive recipe compiles `$^` without -o, as lz4's lib/Makefile does
// (`liblz4.a: $(SRCFILES)` → `$(COMPILE.c) $^` then `$(AR) rcs $@ *.o`): each object lands in the
// recipe's directory and make never names it as a target. Every source round-trips.
TEST(DiscoverRealWorld, MakefileCompilingWithoutDashOEverySource) {
  if (!have({"make", "--version"}) || !have({"cc", "--version"})) GTEST_SKIP() << "make or cc missing";
  TempDir t;
  fs::path lib = t / "lz/lib";
  for (const char* name : {"lz4", "lz4hc", "lz4frame", "xxhash"})
    write_file(lib / (std::string(name) + ".c"), "int " + std::string(name) + "_value(void) { return 4; }\n");
  write_file(lib / "Makefile",
             "# Mirrors lz4 lib/Makefile: the static library compiles its sources in one recipe, without -o.\n"
             "SRCFILES := $(sort $(wildcard *.c))\n.PHONY: default lib\ndefault: lib\nlib: liblz4.a\n"
             "liblz4.a: $(SRCFILES)\n\t$(COMPILE.c) $^\n\t$(AR) rcs $@ *.o\n");
  ASSERT_EQ(run({"make", "-C", lib.string()}).rc, 0);
  ASSERT_TRUE(fs::exists(lib / "lz4.o"));
  RoundTrip rt{t / "ov", home_env(t), {t / "lz"}, {}, "", ""};
  for (const char* name : {"lz4", "lz4hc", "lz4frame", "xxhash"}) {
    fs::path src = lib / (std::string(name) + ".c");
    SCOPED_TRACE(src.string());
    json d = rt.discover(src, t.path());
    ASSERT_EQ(d["candidates"].size(), 1u) << d.dump(2);
    json cand = d["candidates"][0];
    EXPECT_EQ(cand["kind"], "make");
    EXPECT_EQ(strings(cand["artifacts"]),
              (std::set<std::string>{(lib / "liblz4.a").string(), (lib / (std::string(name) + ".o")).string()}));
    write_file(t / "patched" / src.filename(), patched_text(src));
    std::cout << "ROUNDTRIP | make without -o " << src.filename().string() << " | "
              << rt.run_once(cand, t / "patched" / src.filename()) << std::endl;
  }
}

// A PyTorch C++ extension built in place by its own setup.py (BuildExtension: compile-only
// build/temp.*/build.ninja, linked by setuptools into build/lib.*, copied beside the sources),
// with a python3 first on PATH that cannot import torch.
TEST(DiscoverRealWorld, TorchBuildExtensionEveryOutputAndTheRightInterpreter) {
  if (!have({kSystemPython, "-c", "import torch.utils.cpp_extension"}))
    GTEST_SKIP() << kSystemPython << " lacks torch (python3-torch, libtorch-dev)";
  TempDir t;
  fs::path proj = t / "proj";
  std::string body =
      "#include <torch/extension.h>\ntorch::Tensor value() { return torch::full({1}, VALUE); }\n"
      "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"value\", &value); }\n";
  write_file(proj / "csrc/bx.cpp", "#define VALUE 4.0\n" + body);
  write_file(t / "best/bx.cpp", "#define VALUE 7.0\n" + body);
  write_file(proj / "bxpkg/__init__.py", "");
  write_file(proj / "setup.py",
             "from setuptools import setup\nfrom torch.utils.cpp_extension import BuildExtension, CppExtension\n"
             "setup(name='bx', ext_modules=[CppExtension('bxpkg._bx', ['csrc/bx.cpp'])], cmdclass={'build_ext': "
             "BuildExtension})\n");
  Cmd b = run({kSystemPython, "setup.py", "-q", "build_ext", "--inplace"}, proj);
  ASSERT_EQ(b.rc, 0) << b.err;
  // The wrong interpreter first on PATH: a real python3 that cannot see torch (no site dirs).
  write_file(t / "wrongbin/python3", std::string("#!/bin/sh\nexec ") + kSystemPython + " -S \"$@\"\n", 0755);
  std::string path = "PATH=" + (t / "wrongbin").string() + ":" + std::getenv("PATH");
  ASSERT_NE(run({"python3", "-c", "import torch"}, {}, {path}).rc, 0);
  RoundTrip rt{t / "ov", home_env(t, {path}), {proj}, {}, "4.0", "7.0"};
  rt.value = [&] {
    Cmd c = run({kSystemPython, "-c", "import torch, bxpkg._bx as m; print(float(m.value()[0]))"}, proj);
    return c.rc == 0 ? trim(c.out) : "error: " + c.err;
  };
  json d = rt.discover(proj / "csrc/bx.cpp", t.path());
  std::cout << "DISCOVER torch BuildExtension:\n" << d.dump(2) << std::endl;
  ASSERT_EQ(d["candidates"].size(), 1u) << d.dump(2);
  json cand = d["candidates"][0];
  EXPECT_EQ(cand["kind"], "torch-setup");
  std::set<std::string> kinds;
  for (const auto& a : cand["artifacts"]) {
    std::string rel = fs::path(a.get<std::string>()).lexically_relative(proj).string();
    kinds.insert(rel.rfind("build/temp.", 0) == 0  ? "object"
                 : rel.rfind("build/lib.", 0) == 0 ? "build copy"
                 : rel.rfind("bxpkg/_bx.", 0) == 0 ? "in place"
                                                   : rel);
  }
  EXPECT_EQ(kinds, (std::set<std::string>{"object", "build copy", "in place"})) << cand.dump(2);
  std::string py = cand["build_cmd"][0];
  EXPECT_EQ(run({py, "-c", "import torch"}).rc, 0) << py << " cannot import torch";
  EXPECT_NE(cand["evidence"].dump().find("finds setuptools torch"), std::string::npos) << cand["evidence"].dump(2);
  std::cout << "ROUNDTRIP | torch BuildExtension | " << rt.run_once(cand, t / "best/bx.cpp") << std::endl;
}

// An aiter JIT module as aiter/jit/core.py `build_module` leaves it: torch's cpp_extension
// writes and runs <jit>/build/<md>/build/build.ninja, and the module is copied to <jit>/<md>.so,
// the file aiter imports (while it exists a source edit is ignored). The build: ninja there, then
// the copy. Then aiter's rules as ROCm has them, without depfiles: a header edit rebuilds nothing
// by itself, so discover maps the header to the objects that include it and removes them first.
TEST(DiscoverRealWorld, AiterJitModuleSourceAndHeaderWithoutDepfiles) {
  if (!have({kSystemPython, "-c", "import torch.utils.cpp_extension"}))
    GTEST_SKIP() << kSystemPython << " lacks torch (python3-torch, libtorch-dev)";
  TempDir t;
  fs::path csrc = t / "aiter/csrc", jit = t / "aiter/aiter/jit", bdir = jit / "build/module_k/build";
  write_file(csrc / "include/kernel.h", "#ifndef KERNEL_H\n#define KERNEL_H\n#define VALUE 4\n#endif\n");
  write_file(csrc / "kernel.cpp", "#include \"kernel.h\"\nextern \"C\" int kernel() { return VALUE; }\n");
  write_file(t / "best/kernel.cpp", "#include \"kernel.h\"\nextern \"C\" int kernel() { return VALUE + 3; }\n");
  write_file(t / "best/kernel.h", "#ifndef KERNEL_H\n#define KERNEL_H\n#define VALUE 7\n#endif\n");
  write_file(
      t / "build_module.py",
      "import os, shutil, sys\nfrom torch.utils import cpp_extension\n"
      "jit, md, src, inc = sys.argv[1:]\nbd = os.path.join(jit, 'build', md, 'build')\nos.makedirs(bd, exist_ok=True)\n"
      "cpp_extension.load(name=md, sources=[src], extra_include_paths=[inc], build_directory=bd, "
      "is_python_module=False)\n"
      "shutil.copy(os.path.join(bd, md + '.so'), os.path.join(jit, md + '.so'))\n");
  Cmd b = run({kSystemPython, (t / "build_module.py").string(), jit.string(), "module_k",
               (csrc / "kernel.cpp").string(), (csrc / "include").string()});
  ASSERT_EQ(b.rc, 0) << b.err;
  RoundTrip rt{t / "ov", home_env(t, {"AITER_JIT_DIR=" + jit.string()}), {t / "aiter"}, {}, "4", "7"};
  rt.value = [&] {
    Cmd c = run({kSystemPython, "-c", "import ctypes, sys; print(ctypes.CDLL(sys.argv[1]).kernel())",
                 (jit / "module_k.so").string()});
    return c.rc == 0 ? trim(c.out) : "error: " + c.err;
  };
  std::set<std::string> all = {(bdir / "kernel.o").string(), (bdir / "module_k.so").string(),
                               (jit / "module_k.so").string()};
  json d = rt.discover(csrc / "kernel.cpp", t.path());
  std::cout << "DISCOVER aiter JIT module:\n" << d.dump(2) << std::endl;
  ASSERT_EQ(d["candidates"].size(), 1u) << d.dump(2);
  json cand = d["candidates"][0];
  EXPECT_EQ(cand["kind"], "aiter-jit");
  EXPECT_EQ(strings(cand["artifacts"]), all) << cand.dump(2);
  EXPECT_EQ(cand["build_cmds"], json({{"ninja", "-C", bdir.string()},
                                      {"cp", (bdir / "module_k.so").string(), (jit / "module_k.so").string()}}));
  std::cout << "ROUNDTRIP | aiter JIT module, source | " << rt.run_once(cand, t / "best/kernel.cpp") << std::endl;

  // aiter's rules record no depfiles: strip them, as ROCm's build.ninja has none (after the
  // build that follows a revert: the restored source is newer than the restored object).
  ASSERT_EQ(run({"ninja", "-C", bdir.string()}).rc, 0);
  std::string text = read_file(bdir / "build.ninja"), kept;
  for (std::size_t at = 0, nl; at < text.size(); at = nl + 1) {
    nl = text.find('\n', at);
    if (nl == std::string::npos) nl = text.size();
    std::string line = text.substr(at, nl - at);
    if (auto md = line.find("-MMD -MF $out.d "); md != std::string::npos) line.erase(md, 16);
    if (line.find("depfile =") == std::string::npos && line.find("deps = gcc") == std::string::npos)
      kept += line + "\n";
  }
  write_file(bdir / "build.ninja", kept);
  fs::remove(bdir / ".ninja_deps");
  ASSERT_EQ(run({"ninja", "-C", bdir.string()}).rc, 0);  // the changed command compiles once more
  ASSERT_NE(run({"ninja", "-C", bdir.string(), "-n"}).out.find("no work to do"), std::string::npos);
  json dh = rt.discover(csrc / "include/kernel.h", t.path());
  ASSERT_EQ(dh["candidates"].size(), 1u) << dh.dump(2);
  json hc = dh["candidates"][0];
  EXPECT_EQ(strings(hc["artifacts"]), all) << hc.dump(2);
  EXPECT_EQ(hc["build_cmds"][0], json({"rm", "-f", (bdir / "kernel.o").string()})) << hc.dump(2);
  EXPECT_NE(hc["evidence"].dump().find("no depfile records kernel.h"), std::string::npos) << hc["evidence"].dump(2);
  std::cout << "ROUNDTRIP | aiter JIT module, header without depfiles | " << rt.run_once(hc, t / "best/kernel.h")
            << std::endl;
}

// A CMake project whose install step copies the library (as vLLM's setup.py does for _C.abi3.so
// with `cmake --install --component`): the installed copy is an artifact, and the build installs.
TEST(DiscoverRealWorld, CMakeInstallStepCopiesAreArtifacts) {
  TempDir t;
  fs::path proj = t / "proj", build = t / "build", prefix = t / "prefix";
  write_file(proj / "CMakeLists.txt",
             "cmake_minimum_required(VERSION 3.16)\nproject(inst CXX)\nadd_library(fast SHARED kernel.cpp)\n"
             "install(TARGETS fast LIBRARY DESTINATION lib)\n");
  write_file(proj / "kernel.cpp", "extern \"C\" int kernel() { return 4; }\n");
  write_file(t / "best/kernel.cpp", "extern \"C\" int kernel() { return 7; }\n");
  ASSERT_EQ(run({"cmake", "-S", proj.string(), "-B", build.string(), "-G", "Ninja",
                 "-DCMAKE_INSTALL_PREFIX=" + prefix.string()})
                .rc,
            0);
  ASSERT_EQ(run({"cmake", "--build", build.string()}).rc, 0);
  ASSERT_EQ(run({"cmake", "--install", build.string()}).rc, 0);
  // What loads the installed copy: a C program that dlopens it.
  write_file(
      t / "use.c",
      "#include <dlfcn.h>\n#include <stdio.h>\nint main(int c, char** v) { (void)c; void* h = dlopen(v[1], RTLD_NOW);"
      " if (!h) return 2; int (*k)(void) = (int (*)(void))dlsym(h, \"kernel\"); printf(\"%d\\n\", k()); return 0; }\n");
  ASSERT_EQ(run({"cc", "-o", (t / "use").string(), (t / "use.c").string(), "-ldl"}).rc, 0);
  RoundTrip rt{t / "ov", home_env(t), {proj, build, prefix}, {}, "4", "7"};
  rt.value = [&] { return trim(run({(t / "use").string(), (prefix / "lib/libfast.so").string()}).out); };
  json d = rt.discover(proj / "kernel.cpp", t.path());
  ASSERT_EQ(d["candidates"].size(), 1u) << d.dump(2);
  json cand = d["candidates"][0];
  EXPECT_EQ(strings(cand["artifacts"]),
            (std::set<std::string>{(build / "CMakeFiles/fast.dir/kernel.cpp.o").string(),
                                   (build / "libfast.so").string(), (prefix / "lib/libfast.so").string()}));
  EXPECT_EQ(cand["build_cmds"], json({{"cmake", "--build", build.string()}, {"cmake", "--install", build.string()}}));
  std::cout << "ROUNDTRIP | cmake with install step | " << rt.run_once(cand, t / "best/kernel.cpp") << std::endl;
}

// A Meson project, configured and built by Debian's meson: a Meson build dir (meson-private/) is
// read with ninja's own tools like any other.
TEST(DiscoverRealWorld, MesonBuildDir) {
  if (!have({"meson", "--version"})) GTEST_SKIP() << "meson missing (Debian's meson)";
  TempDir t;
  fs::path proj = t / "proj";
  write_file(proj / "meson.build",
             "project('m', 'c')\nlib = static_library('k', 'kernel.c')\n"
             "executable('app', 'main.c', link_with: lib)\nexecutable('other', 'other.c')\n");
  write_file(proj / "kernel.c", "int kernel(void) { return 4; }\n");
  write_file(proj / "other.c", "int main(void) { return 0; }\n");
  write_file(proj / "main.c",
             "#include <stdio.h>\nint kernel(void);\nint main(void) { printf(\"%d\\n\", kernel()); return 0; }\n");
  write_file(t / "best/kernel.c", "int kernel(void) { return 7; }\n");
  ASSERT_EQ(run({"meson", "setup", (proj / "builddir").string(), proj.string()}).rc, 0);
  ASSERT_EQ(run({"ninja", "-C", (proj / "builddir").string()}).rc, 0);
  RoundTrip rt{t / "ov", home_env(t), {proj}, {}, "4", "7"};
  rt.value = [&] { return trim(run({(proj / "builddir/app").string()}).out); };
  json d = rt.discover(proj / "kernel.c", t.path());
  ASSERT_EQ(d["candidates"].size(), 1u) << d.dump(2);
  json cand = d["candidates"][0];
  EXPECT_EQ(cand["kind"], "meson");
  std::set<std::string> names;
  for (const auto& a : cand["artifacts"]) names.insert(fs::path(a.get<std::string>()).filename().string());
  // libk.a is a thin archive (only its members' paths): it does not change, so it is no artifact.
  EXPECT_EQ(names, (std::set<std::string>{"kernel.c.o", "app"})) << cand.dump(2);
  std::string line = rt.run_once(cand, t / "best/kernel.c");
  std::cout << "ROUNDTRIP | meson | " << line << std::endl;
  // Issue 51: every output discover named is restored, so nothing compiles again; the thin
  // archive the candidate's build rewrote (no code in it) is newer than the restored app, which
  // is relinked (revert says so), from the original object.
  EXPECT_NE(line.find("mtimes: original"), std::string::npos) << line;
  fs::path obj = proj / "builddir/libk.a.p/kernel.c.o";
  auto before = fs::last_write_time(obj);
  ASSERT_EQ(run({"ninja", "-C", (proj / "builddir").string()}).rc, 0);
  EXPECT_EQ(fs::last_write_time(obj), before) << "kernel.c was compiled again after the revert";
  EXPECT_EQ(trim(run({(proj / "builddir/app").string()}).out), "4");
}

// A meson-python editable install whose build dir lies outside the project (pip's
// -Cbuild-dir=…): found through the loader module on sys.path, which mirrors what
// mesonpy/__init__.py writes (`_<dist>_editable_loader.py`: mesonpy/_editable.py, then
// `install({names}, '<build dir>', ['ninja'], verbose)`). The build dir is real Meson's (its app
// is not even relinked: Meson relinks only when the library's exported symbols change).
TEST(DiscoverRealWorld, MesonPythonEditableLoaderNamesTheBuildDir) {
  if (!have({"meson", "--version"})) GTEST_SKIP() << "meson missing (Debian's meson)";
  TempDir t;
  fs::path proj = t / "proj", bdir = t / "builds/cp311", site = t / "site";
  write_file(proj / "meson.build",
             "project('m', 'c')\nlib = shared_library('k', 'kernel.c')\n"
             "executable('app', 'main.c', link_with: lib)\n");
  write_file(proj / "kernel.c", "int kernel(void) { return 4; }\n");
  write_file(proj / "main.c",
             "#include <stdio.h>\nint kernel(void);\nint main(void) { printf(\"%d\\n\", kernel()); return 0; }\n");
  write_file(t / "best/kernel.c", "int kernel(void) { return 7; }\n");
  ASSERT_EQ(run({"meson", "setup", bdir.string(), proj.string()}).rc, 0);
  ASSERT_EQ(run({"ninja", "-C", bdir.string()}).rc, 0);
  write_file(site / "m-editable.pth", "import _m_editable_loader\n");
  write_file(site / "_m_editable_loader.py",
             "# mirrors mesonpy/_editable.py + the install() call mesonpy/__init__.py appends\n"
             "import subprocess, sys\n\ndef install(names, path, cmd, verbose):\n"
             "    subprocess.run(cmd, cwd=path, check=True, stdout=subprocess.DEVNULL)\n\n"
             "install(\n    {'m'},\n    '" +
                 bdir.string() + "',\n    ['ninja'],\n    False,\n)\n");
  RoundTrip rt{t / "ov", home_env(t, {"PYTHONPATH=" + site.string()}), {proj, t / "builds", site}, {}, "4", "7"};
  rt.value = [&] { return trim(run({(bdir / "app").string()}).out); };
  json d = rt.discover(proj / "kernel.c", t.path());
  std::cout << "DISCOVER meson-python editable:\n" << d.dump(2) << std::endl;
  ASSERT_EQ(d["candidates"].size(), 1u) << d.dump(2);
  json cand = d["candidates"][0];
  EXPECT_EQ(cand["kind"], "meson-python");
  EXPECT_EQ(cand["build_cmds"], json({{"ninja", "-C", bdir.string()}}));
  std::set<std::string> names;
  for (const auto& a : cand["artifacts"]) names.insert(fs::path(a.get<std::string>()).filename().string());
  EXPECT_EQ(names, (std::set<std::string>{"kernel.c.o", "libk.so"})) << cand.dump(2);
  EXPECT_NE(cand["evidence"].dump().find("_m_editable_loader.py: an editable install"), std::string::npos);
  std::string line = rt.run_once(cand, t / "best/kernel.c");
  std::cout << "ROUNDTRIP | meson-python editable | " << line << std::endl;
  // Issue 51: the editable loader runs ninja in the build dir at every import; after the revert
  // it has nothing to redo (it compiled the stock kernel again before).
  EXPECT_NE(line.find("mtimes: original"), std::string::npos) << line;
  EXPECT_NE(run({"ninja", "-n", "-C", bdir.string()}).out.find("no work to do"), std::string::npos);
}

// A scikit-build-core editable install in redirect mode: a CMake build dir anywhere, the module
// installed into site-packages by `cmake --install --prefix`, and the loader module mirroring
// scikit_build_core/build/_editable.py (`_<name>_editable.py`: resources/_editable_redirect.py,
// then `install(known_source_files, known_wheel_files, '<build dir>', rebuild, verbose,
// build_options, install_options, '<install dir>')`). The installed copy is an artifact and the
// build installs with that prefix.
TEST(DiscoverRealWorld, ScikitBuildCoreEditableLoaderBuildsAndInstalls) {
  TempDir t;
  fs::path proj = t / "proj", bdir = t / "skb", site = t / "site";
  write_file(proj / "CMakeLists.txt",
             "cmake_minimum_required(VERSION 3.16)\nproject(skb C)\nadd_library(fast SHARED kernel.c)\n"
             "install(TARGETS fast LIBRARY DESTINATION pkg)\n");
  write_file(proj / "kernel.c", "int kernel(void) { return 4; }\n");
  write_file(proj / "pkg/__init__.py", "");
  write_file(t / "best/kernel.c", "int kernel(void) { return 7; }\n");
  ASSERT_EQ(run({"cmake", "-S", proj.string(), "-B", bdir.string(), "-G", "Ninja"}).rc, 0);
  ASSERT_EQ(run({"cmake", "--build", bdir.string()}).rc, 0);
  ASSERT_EQ(run({"cmake", "--install", bdir.string(), "--prefix", site.string()}).rc, 0);
  write_file(site / "_pkg_editable.pth", "import _pkg_editable\n");
  write_file(site / "_pkg_editable.py",
             "# mirrors scikit_build_core/resources/_editable_redirect.py + the install() call _editable.py appends\n"
             "def install(known_source_files, known_wheel_files, path, rebuild, verbose, build_options, "
             "install_options, install_dir):\n"
             "    pass\n\ninstall({'pkg': '" +
                 (proj / "pkg/__init__.py").string() + "'}, {'pkg.libfast': '" + (site / "pkg/libfast.so").string() +
                 "'}, '" + bdir.string() + "', True, False, [], [], '" + site.string() + "')\n");
  RoundTrip rt{t / "ov", home_env(t, {"PYTHONPATH=" + site.string()}), {proj, bdir, site}, {}, "4", "7"};
  rt.value = [&] {
    Cmd c = run({kSystemPython, "-c", "import ctypes, sys; print(ctypes.CDLL(sys.argv[1]).kernel())",
                 (site / "pkg/libfast.so").string()});
    return c.rc == 0 ? trim(c.out) : "error: " + c.err;
  };
  json d = rt.discover(proj / "kernel.c", t.path());
  std::cout << "DISCOVER scikit-build-core editable:\n" << d.dump(2) << std::endl;
  ASSERT_EQ(d["candidates"].size(), 1u) << d.dump(2);
  json cand = d["candidates"][0];
  EXPECT_EQ(cand["kind"], "scikit-build");
  EXPECT_EQ(cand["build_cmds"], json({{"cmake", "--build", bdir.string()},
                                      {"cmake", "--install", bdir.string(), "--prefix", site.string()}}));
  EXPECT_EQ(strings(cand["artifacts"]),
            (std::set<std::string>{(bdir / "CMakeFiles/fast.dir/kernel.c.o").string(), (bdir / "libfast.so").string(),
                                   (site / "pkg/libfast.so").string()}))
      << cand.dump(2);
  std::cout << "ROUNDTRIP | scikit-build-core editable | " << rt.run_once(cand, t / "best/kernel.c") << std::endl;
}

// aiter's cpp_itfs template builds (aiter/jit/utils/... compile_template_op): a folder
// <MD_NAME>_<md5 of args> under $AITER_ROOT_DIR/build holding copies of the template's sources and
// headers, a Makefile and lib.so (built here by real make), rebuilt on the next call only when the
// folder is gone: the folder is the cache to invalidate, and revert brings it back byte-exact.
TEST(DiscoverRealWorld, AiterCppItfsFolderIsACache) {
  TempDir t;
  fs::path tmpl = t / "aiter/csrc/cpp_itfs/pa", folder = t / "aiter-root/build/pa_ragged_0f3a9c";
  write_file(tmpl / "pa_kernels.h", "#define VALUE 4\n");
  write_file(tmpl / "pa_ragged.cpp", "#include \"pa_kernels.h\"\nextern \"C\" int kernel() { return VALUE; }\n");
  write_file(t / "best/pa_kernels.h", "#define VALUE 7\n");
  fs::create_directories(folder);
  for (const char* f : {"pa_kernels.h", "pa_ragged.cpp"}) fs::copy_file(tmpl / f, folder / f);
  write_file(folder / "Makefile", "lib.so: pa_ragged.cpp pa_kernels.h\n\tc++ -shared -fPIC -o lib.so pa_ragged.cpp\n");
  ASSERT_EQ(run({"make", "-C", folder.string()}).rc, 0);
  RoundTrip rt{t / "ov",
               home_env(t, {"AITER_ROOT_DIR=" + (t / "aiter-root").string()}),
               {t / "aiter", t / "aiter-root"},
               {},
               "built",
               "gone"};
  rt.value = [&] { return fs::exists(folder / "lib.so") ? "built" : "gone"; };
  json d = rt.discover(tmpl / "pa_kernels.h", t.path());
  std::cout << "DISCOVER aiter cpp_itfs:\n" << d.dump(2) << std::endl;
  ASSERT_EQ(d["candidates"].size(), 1u) << d.dump(2);
  json cand = d["candidates"][0];
  EXPECT_EQ(cand["kind"], "aiter-cpp-itfs");
  EXPECT_EQ(cand["caches"], json({folder.string()}));
  EXPECT_EQ(cand["build_cmd"], nullptr);
  // While the candidate runs, the folder is gone: the next call builds from the patched header.
  std::string line = rt.run_once(cand, t / "best/pa_kernels.h");
  std::cout << "ROUNDTRIP | aiter cpp_itfs | " << line << std::endl;
}

// A Makefile and a Meson build dir side by side compile one file. The Meson build is the newer,
// so it ranks first — until a real process dlopens the Makefile's library: the build a running
// process uses is the one to patch, so it ranks first then (`live`), and again last once the
// process is gone.
TEST(DiscoverRealWorld, TheBuildARunningProcessMapsRanksFirst) {
  if (!have({"meson", "--version"})) GTEST_SKIP() << "meson missing (Debian's meson)";
  TempDir t;
  fs::path proj = t / "proj";
  write_file(proj / "kernel.c", "int kernel(void) { return 4; }\n");
  write_file(proj / "Makefile", "libk.so: kernel.c\n\tcc -shared -fPIC -o libk.so kernel.c\n");
  write_file(proj / "meson.build", "project('m', 'c')\nshared_library('k', 'kernel.c')\n");
  ASSERT_EQ(run({"make", "-C", proj.string()}).rc, 0);
  ASSERT_EQ(run({"meson", "setup", (proj / "builddir").string(), proj.string()}).rc, 0);
  ASSERT_EQ(run({"ninja", "-C", (proj / "builddir").string()}).rc, 0);
  auto ranked = [&] {
    Cmd c = run_overlay({"--json", "discover", "--target", (proj / "kernel.c").string(), "--root", t.path().string()},
                        {}, home_env(t));
    json d = json::parse(c.out);
    std::vector<std::string> kinds;
    for (const auto& cand : d["candidates"])
      kinds.push_back(cand["kind"].get<std::string>() + (cand["live"].get<bool>() ? " live" : ""));
    return kinds;
  };
  EXPECT_EQ(ranked(), (std::vector<std::string>{"meson", "make"}));
  write_file(t / "hold.c",
             "#include <dlfcn.h>\n#include <stdio.h>\n#include <unistd.h>\nint main(int c, char** v) { (void)c;"
             " if (!dlopen(v[1], RTLD_NOW)) return 2; FILE* f = fopen(v[2], \"w\"); fputs(\"ready\", f); fclose(f);"
             " sleep(120); return 0; }\n");
  ASSERT_EQ(run({"cc", "-o", (t / "hold").string(), (t / "hold.c").string(), "-ldl"}).rc, 0);
  pid_t pid = fork();
  if (pid == 0) {
    execl((t / "hold").c_str(), "hold", (proj / "libk.so").c_str(), (t / "ready").c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  ASSERT_TRUE(until_ready_or_exited(pid, [&] { return fs::exists(t / "ready"); }));
  std::vector<std::string> with_process = ranked();
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  EXPECT_EQ(with_process, (std::vector<std::string>{"make live", "meson"}));
  EXPECT_EQ(ranked(), (std::vector<std::string>{"meson", "make"}));
}
