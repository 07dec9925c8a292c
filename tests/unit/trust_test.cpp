#include "overlay/trust.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include <gtest/gtest.h>

#include "overlay/file_ops.hpp"

#include "test_util.hpp"

using namespace overlay;
using namespace overlay::test;

TEST(Trust, AnOverlayOthersCanWriteOrOwnIsNotTrusted) {
  TempDir t;
  fs::path ov = t / "ov";
  EXPECT_EQ(why_untrusted(real_disk(), ov), "");  // missing: nothing to act on
  write_file(ov / "_overlay_manifest.json", "{}\n", 0644);
  fs::create_directories(ov / "_native_backup/n1-ab");
  ::chmod(ov.c_str(), 0755);
  EXPECT_EQ(why_untrusted(real_disk(), ov), "");
  ::chmod((ov / "_overlay_manifest.json").c_str(), 0666);
  EXPECT_EQ(why_untrusted(real_disk(), ov), "its manifest is group- or world-writable");
  ::chmod((ov / "_overlay_manifest.json").c_str(), 0644);
  ::chmod((ov / "_native_backup/n1-ab").c_str(), 0777);
  EXPECT_NE(why_untrusted(real_disk(), ov).find("its backup entry"), std::string::npos);
  ::chmod((ov / "_native_backup/n1-ab").c_str(), 0700);
  if (::geteuid() == 0) {
    ASSERT_EQ(::chown(ov.c_str(), 65534, 65534), 0);
    EXPECT_EQ(why_untrusted(real_disk(), ov),
              "overlay directory " + ov.string() + " is owned by another user (uid 65534)");
  }
}

TEST(Trust, TrustedRootsAreAbsolutePathsAboveTheOverlay) {
  ::setenv("OVERLAY_TRUSTED_ROOTS", "relative:/srv/overlays:/opt/x", 1);
  EXPECT_TRUE(under_trusted_root("/srv/overlays/a/b"));
  EXPECT_FALSE(under_trusted_root("/srv/overlays2/a"));
  EXPECT_FALSE(under_trusted_root("/srv/overlays/../etc"));
  EXPECT_TRUE(under_trusted_root("/opt/x"));  // the root itself, as git's safe.directory names one
  ::unsetenv("OVERLAY_TRUSTED_ROOTS");
  EXPECT_FALSE(under_trusted_root("/srv/overlays/a"));
}

TEST(FitName, ANameTooLongIsCutAndTaggedDistinctly) {
  EXPECT_EQ(fit_name("short", 10), "short");
  std::string a(300, 'a'), b = std::string(299, 'a') + "b";
  EXPECT_EQ(fit_name(a, 240).size(), 240u);
  EXPECT_NE(fit_name(a, 240), fit_name(b, 240));
  EXPECT_EQ(fit_name(a, 240), fit_name(a, 240));
  EXPECT_LE((hidden_stem(a) + ".overlay-aside-n1796283399-bf12e234").size(), 255u);
}
