#include <unistd.h>

#include <climits>
#include <memory>

#include "commands.hpp"
#include "output.hpp"
#include "overlay/error.hpp"
#include "overlay/python_overlay.hpp"

namespace overlay::cli {
namespace {

// The default capture hook: beside the binary's prefix, then the install prefix, then the
// source tree (a build tree run without installing).
fs::path default_capture_file() {
  std::vector<fs::path> candidates;
  char exe[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) candidates.push_back(fs::path(std::string(exe, static_cast<std::size_t>(n))).parent_path().parent_path() / "share/overlay");
  candidates.push_back(OVERLAY_INSTALL_SHARE_DIR);
  candidates.push_back(OVERLAY_SOURCE_SHARE_DIR);
  for (const auto& dir : candidates)
    if (fs::is_regular_file(dir / "capture_shapes.py")) return dir / "capture_shapes.py";
  throw Error("cannot find the default capture hook (share/overlay/capture_shapes.py); pass --capture-file");
}

void print_added(const PyAddResult& r) {
  out_line("OVERLAY_DIR=" + r.overlay.string());
  out_line(r.summary);
  out_line("launch with: PYTHONPATH=" + r.overlay.string() + ":$PYTHONPATH");
  auto& j = result();
  j["overlay"] = r.overlay.string();
  j["summary"] = r.summary;
  j["sitecustomize"] = (r.overlay / "sitecustomize.py").string();
  j["pythonpath"] = r.overlay.string();
}

struct Shared {
  std::string overlay, from;
  PyCommon common(const Globals& g) const {
    PyCommon c;
    c.overlay = overlay;
    if (!from.empty()) c.from = fs::path(from);
    c.lock_timeout = g.lock_timeout;
    return c;
  }
};

void add_shared(CLI::App* sub, Shared& s) {
  sub->add_option("--overlay", s.overlay, "Overlay directory (created if missing)")->required();
  sub->add_option("--from", s.from, "Seed a new overlay with BASE's Python entries (natives are not copied)");
}


struct ModuleFlags : Shared {
  std::string module, package, subpath, patched, patch, src, python;
};

int run_add_module(const ModuleFlags& f, const Globals& g) {
  AddModuleRequest r;
  r.common = f.common(g);
  if (!f.module.empty() && !f.package.empty()) throw Error("give --module or --package/--subpath, not both");
  if (f.module.empty() && (f.package.empty() || f.subpath.empty())) throw Error("give --module (or --package with --subpath)");
  r.module = f.module.empty() ? legacy_module_name(f.package, f.subpath) : f.module;
  if (!f.patched.empty()) r.patched_file = fs::path(f.patched);
  if (!f.patch.empty()) r.patch = fs::path(f.patch);
  if (!f.src.empty()) r.src_file = fs::path(f.src);
  r.python = f.python.empty() ? default_python() : f.python;
  print_added(add_module(cli_disk(), r));
  return kOk;
}

struct RebindFlags : Shared {
  std::string target, impl_module, impl_attr, impl_file;
  bool count_calls = false;
};

struct CaptureFlags : Shared {
  std::string target, out, capture_file;
  long max = 5;
};

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
  if (f.path_only) {
    out_line(r.file);
    return kOk;
  }
  out_line(r.module + " -> " + r.file);
  out_line(r.source == ModuleSource::injected         ? "INJECTED"
           : r.source == ModuleSource::overlay_active ? "OVERLAY_ACTIVE"
                                                      : "INSTALL (overlay not shadowing this module)");
  return kOk;
}

}  // namespace

void add_python_commands(CLI::App& app, const Globals& g, std::function<int()>& run, const Wanted& want) {
  if (want("add-module", "copy-subtree")) {
    auto m = std::make_shared<ModuleFlags>();
    auto* mod = app.add_subcommand("add-module", "Inject a patched Python module through the overlay");
    mod->alias("copy-subtree");
    add_shared(mod, *m);
    mod->add_option("--module", m->module, "Dotted module name (a.b.c)");
    mod->add_option("--package", m->package, "Legacy: package name (with --subpath)");
    mod->add_option("--subpath", m->subpath, "Legacy: file inside the package, e.g. ops/attn.py");
    mod->add_option("--patched-file", m->patched, "The patched module source");
    mod->add_option("--patch", m->patch, "Unified diff applied to a copy of the installed module");
    mod->add_option("--src-file", m->src, "With --patch: the source to patch (default: ask the interpreter)");
    mod->add_option("--python", m->python, "Interpreter that locates installed modules (env OVERLAY_PYTHON)");
    mod->callback([&run, m, &g] { run = [m, &g] { return guarded("add-module", [&] { return run_add_module(*m, g); }); }; });
  }

  if (want("add-rebind", "monkeypatch")) {
    auto r = std::make_shared<RebindFlags>();
    auto* reb = app.add_subcommand("add-rebind", "Rebind one function (module:attr) to an implementation");
    reb->alias("monkeypatch");
    add_shared(reb, *r);
    reb->add_option("--target", r->target, "module:attr to replace")->required();
    reb->add_option("--impl-module", r->impl_module, "Module holding the implementation")->required();
    reb->add_option("--impl-attr", r->impl_attr, "Attribute of --impl-module to bind")->required();
    reb->add_option("--impl-file", r->impl_file, "File copied into the overlay to provide --impl-module");
    reb->add_flag("--count-calls", r->count_calls, "Count calls per process (status shows them)");
    reb->callback([&run, r, &g] {
      run = [r, &g] {
        return guarded("add-rebind", [&] {
          AddRebindRequest q{r->common(g), r->target, r->impl_module, r->impl_attr, std::nullopt};
          if (!r->impl_file.empty()) q.impl_file = fs::path(r->impl_file);
          q.count_calls = r->count_calls;
          print_added(add_rebind(cli_disk(), q));
          return int{kOk};
        });
      };
    });
  }

  if (want("add-capture")) {
    auto c = std::make_shared<CaptureFlags>();
    auto* cap = app.add_subcommand("add-capture", "Record argument/return shapes of the first calls of a function");
    add_shared(cap, *c);
    cap->add_option("--target", c->target, "module:attr to capture")->required();
    cap->add_option("--out", c->out, "Directory receiving meta.json (and tensors when torch is present)")->required();
    cap->add_option("--max", c->max, "Calls to record (default 5)");
    cap->add_option("--capture-file", c->capture_file, "Capture hook module (default: the one installed under share/overlay)");
    cap->callback([&run, c, &g] {
      run = [c, &g] {
        return guarded("add-capture", [&] {
          AddCaptureRequest q{c->common(g), c->target, c->out, c->max, {}};
          q.capture_file = c->capture_file.empty() ? default_capture_file() : fs::path(c->capture_file);
          print_added(add_capture(cli_disk(), q));
          result()["capture_file"] = q.capture_file.string();
          return int{kOk};
        });
      };
    });
  }

  if (want("check")) {
    auto k = std::make_shared<CheckFlags>();
    auto* chk = app.add_subcommand("check", "Show where a module resolves from under the current PYTHONPATH");
    chk->add_option("--module", k->module, "Dotted module name")->required();
    chk->add_flag("--path-only", k->path_only, "Print only the path");
    chk->add_option("--python", k->python, "Interpreter to ask (env OVERLAY_PYTHON)");
    chk->callback([&run, k] { run = [k] { return guarded("check", [&] { return run_check(*k); }); }; });
  }
}

}  // namespace overlay::cli
