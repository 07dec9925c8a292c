// export_bundle on its own (issue 64): what it writes reads back as the overlay's change, each
// refusal leaves nothing behind, and a disk that fails at any step leaves no bundle and no half of
// one. The binary's tests drive export and replay end to end (layers_cli_test.cpp).
#include <gtest/gtest.h>

#include "overlay/bundle.hpp"
#include "overlay/error.hpp"
#include "overlay/hash.hpp"
#include "overlay/native.hpp"

#include "faulty_disk.hpp"
#include "test_util.hpp"

using namespace overlay;
using namespace overlay::test;

namespace {

const std::string kPatched = "int kernel() { return 7; }\n";

// An install with one entry applied and built: src/kernel.cpp patched, lib/libk.so rebuilt.
struct Exported {
  TempDir t;
  Install in = make_install(t / "inst");
  fs::path ov = t / "ov", out = t / "out/bundle";

  explicit Exported(bool name_cwd = true) {
    write_file(t / "patched.cpp", kPatched);
    AddNativeRequest r;
    r.overlay = ov;
    r.targets = {in.source};
    r.patched_files = {t / "patched.cpp"};
    r.artifacts = {in.artifact};
    r.build_cmds = {"sh -c 'echo rebuilt > " + in.artifact.string() + "'"};
    if (name_cwd) r.build_cwd = in.root;
    r.lock_timeout = 5;
    NativePlan plan = plan_add_native(real_disk(), r);
    AppliedEntry e = apply_native(real_disk(), plan);
    EXPECT_TRUE(run_native_build(real_disk(), plan, e).ok);
  }
  ~Exported() { EXPECT_TRUE(revert_natives(real_disk(), ov, {}).ok()); }
  Exported(const Exported&) = delete;
  Exported& operator=(const Exported&) = delete;

  // The Error export_bundle throws ("" when it exported), and that nothing was left beside --out.
  std::string refusal(Disk& disk) {
    try {
      export_bundle(disk, ov, out, in.root);
    } catch (const Error& e) {
      EXPECT_FALSE(fs::exists(out)) << e.what();
      if (fs::exists(out.parent_path())) {
        EXPECT_TRUE(fs::is_empty(out.parent_path())) << e.what();
      }
      return e.what();
    }
    return "";
  }
};

}  // namespace

TEST(Export, ABundleReadsBackAsTheOverlaysChange) {
  Exported x;
  ExportReport r = export_bundle(real_disk(), x.ov, x.out, x.in.root);
  EXPECT_EQ(r.root, x.in.root);
  EXPECT_EQ(r.entries, 1u);
  EXPECT_EQ(r.files, 1u);
  EXPECT_TRUE(r.notes.empty());
  Bundle b = read_bundle(real_disk(), x.out);
  EXPECT_EQ(b.root, x.in.root);
  ASSERT_EQ(b.entries.size(), 1u);
  const BundleEntry& e = b.entries[0];
  ASSERT_EQ(e.files.size(), 1u);
  EXPECT_EQ(e.files[0].path, "src/kernel.cpp");
  EXPECT_EQ(e.files[0].change, SwapKind::modify);
  EXPECT_EQ(e.files[0].pristine_sha256, sha256_hex("int kernel() { return 4; }\n"));
  EXPECT_EQ(e.files[0].patched_sha256, sha256_hex(kPatched));
  EXPECT_EQ(read_file(x.out / e.files[0].file), kPatched);
  EXPECT_EQ(e.artifacts, std::vector<std::string>{"lib/libk.so"});
  ASSERT_EQ(e.build_cmds.size(), 1u);
  EXPECT_EQ(e.build_cmds[0].back(), "echo rebuilt > {root}/lib/libk.so") << "the root is a placeholder in commands";
  EXPECT_EQ(e.build_cwd, std::optional<std::string>(".")) << "the root, relative to itself";
}

TEST(Export, AFileThatChangedSinceIsRefusedByName) {
  Exported x;
  write_file(x.in.source, "int kernel() { return 8; }\n");
  std::string why = x.refusal(real_disk());
  EXPECT_NE(why.find(x.in.source.string() + " holds other bytes than the change of"), std::string::npos) << why;
  write_file(x.in.source, kPatched);
}

TEST(Export, AnExistingOutOrAnOverlayWithNothingNativeIsRefused) {
  Exported x;
  write_file(x.out / "mine.txt", "the user's\n");
  try {
    export_bundle(real_disk(), x.ov, x.out, x.in.root);
    ADD_FAILURE() << "exported over an existing --out";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--out exists"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_file(x.out / "mine.txt"), "the user's\n");
  fs::create_directories(x.t / "empty");
  EXPECT_THROW(export_bundle(real_disk(), x.t / "empty", x.t / "b2", std::nullopt), Error);
  EXPECT_FALSE(fs::exists(x.t / "b2"));
}

// A build directory nobody named (the caller's, outside the root) is not pinned: the bundle names
// none, and the report says why.
TEST(Export, ABuildDirNobodyNamedOutsideTheRootIsLeftOutAndSaid) {
  TempDir elsewhere;
  fs::path was = fs::current_path();
  fs::current_path(elsewhere.path());
  Exported x(false);
  fs::current_path(was);
  ExportReport r = export_bundle(real_disk(), x.ov, x.out, x.in.root);
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_NE(r.notes[0].find("no --build-cwd"), std::string::npos) << r.notes[0];
  EXPECT_EQ(read_bundle(real_disk(), x.out).entries[0].build_cwd, std::nullopt);
}

// Every disk operation of an export fails in turn: each time the Error says so and there is no
// bundle at --out, nor a hidden half of one beside it.
TEST(Export, AFaultAtAnyStepLeavesNoBundleAndNoHalfOfOne) {
  Exported x;
  FaultyDisk counter(real_disk());
  export_bundle(counter, x.ov, x.t / "counted", x.in.root);
  long ops = counter.count();
  EXPECT_GT(ops, 5);
  for (long n = 1; n <= ops; ++n) {
    FaultyDisk disk(real_disk());
    disk.fail_at(n, n % 2 ? ENOSPC : EIO);
    EXPECT_NE(x.refusal(disk), "") << "fault at op " << n;
  }
  ExportReport r = export_bundle(real_disk(), x.ov, x.out, x.in.root);
  EXPECT_EQ(r.files, 1u);
}
