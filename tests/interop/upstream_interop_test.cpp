// Python overlays both ways with every upstream overlay_setup.py the pipeline has run (issue 30):
//   upstream -> overlay: an overlay the version made (with its markers or hooks) is extended by the
//     binary, checked by it and run: every entry of both applies;
//   overlay -> upstream: an overlay the binary made is extended by the version, checked by it and
//     run: every entry of both applies (the version keeps our sitecustomize.py, as it keeps any).
// Each case prints one "UPSTREAM |" line: version | direction | outcome.
#include <iostream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util.hpp"

using namespace overlay::test;
using json = nlohmann::json;

namespace {

fs::path upstream_dir() { return shared_reference() / "upstream"; }

struct Version {
  const char* file;
  bool markers;  // mainline (v3) and v7 have add-marker
  bool hooks;    // the fork has add-hook
};

int failed_parts() {
  const auto* r = ::testing::UnitTest::GetInstance()->current_test_info()->result();
  int n = 0;
  for (int i = 0; i < r->total_part_count(); ++i) n += r->GetTestPartResult(i).failed() ? 1 : 0;
  return n;
}

void report(const Version& v, const std::string& direction, const std::string& outcome) {
  std::cout << "UPSTREAM | " << v.file << " | " << direction << " | " << (failed_parts() ? "FAILED" : outcome)
            << std::endl;
}

struct UpstreamInterop : ::testing::TestWithParam<Version> {
  TempDir t;
  std::string site = (t / "site").string(), ov = (t / "ov").string();

  void SetUp() override {
    OVERLAY_REQUIRE_SHARED_REFERENCE(std::string("upstream/") + GetParam().file);
    write_file(t / "site/pkg/__init__.py", "");
    write_file(t / "site/pkg/sub.py", "def value():\n    return 'original'\n");
    write_file(t / "site/pkg/ops.py", "def add(a, b):\n    return a + b\n\ndef scale(x, k):\n    return x * k\n");
    write_file(t / "sub_patched.py", "def value():\n    return 'patched'\n");
    write_file(
        t / "fast_ops.py",
        "def fast_add(a, b):\n    return ('fast', a + b)\n\ndef fast_scale(x, k):\n    return ('fast', x * k)\n");
    write_file(t / "annotate.py",
               "import sys\ndef install():\n    sys.stderr.write('annotate ran after pkg.ops\\n')\n");
  }
  std::vector<std::string> env() { return {"PYTHONPATH=" + site}; }
  Cmd upstream(std::vector<std::string> args) {
    args.insert(args.begin(), {"python3", (upstream_dir() / GetParam().file).string()});
    return run(args, t.path(), env());
  }
  Cmd ours(const std::vector<std::string>& args) { return run_overlay(args, t.path(), env()); }
  Cmd launch() {
    return run(
        {"python3", "-c", "import pkg.sub, pkg.ops\nprint(pkg.sub.value(), pkg.ops.add(1, 2), pkg.ops.scale(2, 3))"},
        t.path(), {"PYTHONPATH=" + ov + ":" + site});
  }
  std::vector<std::string> module_args() {
    return {"add-module", "--overlay", ov, "--module", "pkg.sub", "--patched-file", (t / "sub_patched.py").string()};
  }
  std::vector<std::string> rebind_args(const char* target, const char* attr) {
    return {"add-rebind",
            "--overlay",
            ov,
            "--target",
            target,
            "--impl-module",
            "fast_ops",
            "--impl-attr",
            attr,
            "--impl-file",
            (t / "fast_ops.py").string()};
  }
};

}  // namespace

TEST_P(UpstreamInterop, ItsOverlayExtendedCheckedAndRunByOverlay) {
  const Version& v = GetParam();
  ASSERT_EQ(upstream(module_args()).rc, 0);
  ASSERT_EQ(upstream(rebind_args("pkg.ops:add", "fast_add")).rc, 0);
  if (v.markers) {
    ASSERT_EQ(upstream({"add-marker", "--overlay", ov, "--target", "pkg.ops:add", "--marker-file",
                        (upstream_dir() / "seam_trace.py").string()})
                  .rc,
              0);
  }
  if (v.hooks) {
    ASSERT_EQ(upstream({"add-hook", "--overlay", ov, "--module", "pkg.ops", "--impl-module", "annotate", "--impl-file",
                        (t / "annotate.py").string()})
                  .rc,
              0);
  }
  Cmd ext = ours(rebind_args("pkg.ops:scale", "fast_scale"));
  ASSERT_EQ(ext.rc, 0) << ext.err;
  EXPECT_EQ(ext.err, "");  // its generated sitecustomize.py is regenerated without a word
  Cmd c = run_overlay({"check", "--module", "pkg.sub"}, t.path(), {"PYTHONPATH=" + ov + ":" + site});
  EXPECT_EQ(c.out, "pkg.sub -> " + ov + "/_patched/pkg.sub.py\nOVERLAY_ACTIVE\n") << c.err;
  Cmd r = launch();
  EXPECT_EQ(r.out, "patched ('fast', 3) ('fast', 6)\n") << r.err;
  EXPECT_EQ(r.err.find("FAILED"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("not applied"), std::string::npos) << r.err;
  if (v.markers) {
    EXPECT_NE(r.err.find("[seam_trace] marked pkg.ops:add"), std::string::npos) << r.err;
  }
  if (v.hooks) {
    EXPECT_NE(r.err.find("annotate ran after pkg.ops"), std::string::npos) << r.err;
  }
  report(v, "upstream -> overlay", "extended, OVERLAY_ACTIVE, every entry applied");
}

TEST_P(UpstreamInterop, OurOverlayExtendedCheckedAndRunByIt) {
  const Version& v = GetParam();
  ASSERT_EQ(ours(module_args()).rc, 0);
  ASSERT_EQ(ours(rebind_args("pkg.ops:add", "fast_add")).rc, 0);
  ASSERT_EQ(ours({"add-marker", "--overlay", ov, "--target", "pkg.ops:add"}).rc, 0);
  std::string ours_text = read_file(t / "ov/sitecustomize.py");
  Cmd ext = upstream(rebind_args("pkg.ops:scale", "fast_scale"));
  ASSERT_EQ(ext.rc, 0) << ext.err;
  EXPECT_EQ(read_file(t / "ov/sitecustomize.py"), ours_text);  // it never overwrites an existing one
  Cmd c = run({"python3", (upstream_dir() / v.file).string(), "check", "--module", "pkg.sub"}, t.path(),
              {"PYTHONPATH=" + ov + ":" + site});
  EXPECT_NE(c.out.find("OVERLAY_ACTIVE"), std::string::npos) << c.out << c.err;
  Cmd r = launch();
  EXPECT_EQ(r.out, "patched ('fast', 3) ('fast', 6)\n") << r.err;
  EXPECT_EQ(r.err.find("FAILED"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("[overlay] marked pkg.ops:add"), std::string::npos) << r.err;
  // And the binary extends it again afterwards, keeping what the version added.
  ASSERT_EQ(ours({"add-capture", "--overlay", ov, "--target", "pkg.ops:scale", "--out", (t / "cap").string()}).rc, 0);
  json m = json::parse(read_file(t / "ov/_overlay_manifest.json"));
  EXPECT_EQ(m["rebinds"].size(), 2u);
  EXPECT_EQ(m["markers"].size(), 1u);
  report(v, "overlay -> upstream", "extended, OVERLAY_ACTIVE, every entry applied (our sitecustomize.py kept)");
}

INSTANTIATE_TEST_SUITE_P(Versions, UpstreamInterop,
                         ::testing::Values(Version{"overlay_setup.v2.py", false, false},
                                           Version{"overlay_setup.v3.py", true, false},
                                           Version{"overlay_setup.v7.py", true, false},
                                           Version{"overlay_setup.v8-fork.py", false, true}),
                         [](const ::testing::TestParamInfo<Version>& i) {
                           std::string n = fs::path(i.param.file).stem().string();
                           for (auto& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });
