// merge, check and sitecustomize-text: the Python verbs that add no entry. Each parses its flags,
// asks the library and prints the answer.
#include <cstdio>
#include <memory>

#include "overlay/error.hpp"
#include "overlay/python/check.hpp"
#include "overlay/python/merge.hpp"
#include "overlay/python/sitecustomize.hpp"

#include "commands.hpp"
#include "output.hpp"

namespace overlay::cli {
namespace {

struct MergeFlags {
  std::string overlay, from;
  std::vector<std::string> with;
};

int run_merge(const MergeFlags& f) {
  MergeRequest q;
  q.output = f.overlay;
  if (!f.from.empty()) q.base = fs::path(f.from);
  for (const auto& w : f.with) q.incoming.emplace_back(w);
  MergeResult r = merge_overlays(cli_disk(), q);
  for (const auto& n : r.notes) err_line("merge", n);
  out_line("OVERLAY_DIR=" + r.output.string());
  result()["overlay"] = r.output.string();
  result()["notes"] = r.notes;
  return kOk;
}

struct CheckFlags {
  std::string module, python;
  bool path_only = false;
};

int run_check(const CheckFlags& f) {
  CheckResult r = check_module(cli_disk(), f.module, f.python.empty() ? default_python() : f.python);
  auto& j = result();
  j["module"] = r.module;
  j["file"] = r.file;
  j["source"] = r.source == ModuleSource::injected         ? "injected"
                : r.source == ModuleSource::overlay_active ? "overlay_active"
                                                           : "install";
  j["token"] = check_token(r.source);
  if (f.path_only) {
    out_line(r.file);
    return kOk;
  }
  out_line(r.module + " -> " + r.file);
  out_line(check_token(r.source));
  return kOk;
}

}  // namespace

Handler merge_command(CLI::App& sub, const Globals&) {
  auto f = std::make_shared<MergeFlags>();
  sub.add_option("--overlay", f->overlay, "The new overlay (absent or empty)")->required();
  sub.add_option("--from", f->from, "The base overlay");
  sub.add_option("--with", f->with, "An incoming overlay (repeatable: merged in order)")->required();
  return [f] { return run_merge(*f); };
}

Handler sitecustomize_text_command(CLI::App& sub, const Globals&) {
  auto legacy = std::make_shared<bool>(false);
  sub.add_flag("--legacy", *legacy, "The runtime before installers (the shim's LEGACY_SITECUSTOMIZE)");
  return [legacy] {
    const std::string& text = *legacy ? legacy_sitecustomize_text() : sitecustomize_text();
    std::fwrite(text.data(), 1, text.size(), stdout);
    return int{kOk};
  };
}

Handler check_command(CLI::App& sub, const Globals&) {
  auto k = std::make_shared<CheckFlags>();
  sub.add_option("--module", k->module, "Dotted module name")->required();
  sub.add_flag("--path-only", k->path_only, "Print only the path");
  sub.add_option("--python", k->python, "Interpreter to ask (env OVERLAY_PYTHON)");
  return [k] { return run_check(*k); };
}

}  // namespace overlay::cli
