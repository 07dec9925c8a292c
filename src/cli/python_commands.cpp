#include <memory>

#include "commands.hpp"
#include "output.hpp"
#include "overlay/error.hpp"
#include "overlay/python/check.hpp"
#include "overlay/python/merge.hpp"
#include "overlay/python/sitecustomize.hpp"
#include "overlay/python/verbs.hpp"

namespace overlay::cli {
namespace {

void print_added(const std::string& verb, const PyAddResult& r) {
  out_line("OVERLAY_DIR=" + r.overlay.string());
  if (!r.summary.empty()) out_line(r.summary);
  if (r.launch_line) out_line("launch with: PYTHONPATH=" + r.overlay.string() + ":$PYTHONPATH");
  if (r.sitecustomize.kept_foreign()) err_line(verb, kept_foreign_note(r.overlay));
  auto& j = result();
  j["overlay"] = r.overlay.string();
  j["summary"] = r.summary;
  j["sitecustomize"] = (r.overlay / "sitecustomize.py").string();
  j["sitecustomize_kept"] = r.sitecustomize.kept_foreign();
  j["pythonpath"] = r.overlay.string();
}

struct Shared {
  std::string overlay, from;
  bool force = false;
  PyCommon common(const Globals& g) const {
    PyCommon c;
    c.overlay = overlay;
    if (!from.empty()) c.from = fs::path(from);
    c.lock_timeout = g.lock_timeout;
    c.replace = force ? Replace::always : Replace::generated_only;
    return c;
  }
};

void add_shared(CLI::App* sub, Shared& s) {
  sub->add_option("--overlay", s.overlay, "Overlay directory (created if missing)")->required();
  sub->add_option("--from", s.from, "Seed a new overlay with BASE's Python entries (natives are not copied)");
  sub->add_flag("--force", s.force, "Replace a sitecustomize.py this tool did not generate (kept otherwise)");
}

// Registers `verb` whose flags live in a shared_ptr<Flags>; `body` runs the library call.
template <typename Flags, typename Body>
void python_verb(CLI::App& app, std::function<int()>& run, const Globals& g, const char* verb, const char* help,
                 std::shared_ptr<Flags> f, CLI::App*& sub, Body body) {
  sub = app.add_subcommand(verb, help);
  add_shared(sub, *f);
  sub->callback([&run, f, &g, verb, body] {
    run = [f, &g, verb, body] { return guarded(verb, [&] { print_added(verb, body(*f, g)); return int{kOk}; }); };
  });
}


struct ModuleFlags : Shared {
  std::string module, package, subpath, patched, patch, src, python;
};

int run_add_module(const ModuleFlags& f, const Globals& g) {
  AddModuleRequest r;
  r.common = f.common(g);
  // As v3: --module wins over the legacy pair; the pair needs both halves.
  if (f.module.empty() && (f.package.empty() || f.subpath.empty()))
    throw Error("add-module requires --module (or legacy --package + --subpath)");
  if (!f.patched.empty() && !f.patch.empty()) err_line("add-module", "--patch ignored: --patched-file is taken as it is");
  r.module = f.module.empty() ? legacy_module_name(f.package, f.subpath) : f.module;
  if (!f.patched.empty()) r.patched_file = fs::path(f.patched);
  if (!f.patch.empty()) r.patch = fs::path(f.patch);
  if (!f.src.empty()) r.src_file = fs::path(f.src);
  r.python = f.python.empty() ? default_python() : f.python;
  print_added("add-module", add_module(cli_disk(), r));
  return kOk;
}

struct RebindFlags : Shared {
  std::string target, impl_module, impl_attr, impl_file, impl_dir;
  bool count_calls = false;
};

struct CaptureFlags : Shared {
  std::string target, out, capture_file;
  long max = 5;
};

struct MarkerFlags : Shared {
  std::string target, marker_file;
};

struct HookFlags : Shared {
  std::string module, impl_module, impl_attr = "install", impl_file;
};

struct InstallerFlags : Shared {
  std::string id, module, callable = "install";
  std::vector<std::string> targets, kernels;
};

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

void add_python_commands(CLI::App& app, const Globals& g, std::function<int()>& run, const Wanted& want) {
  if (want("add-module", "copy-subtree")) {
    auto m = std::make_shared<ModuleFlags>();
    auto* mod = app.add_subcommand("add-module", "Inject a patched Python module through the overlay");
    mod->alias("copy-subtree");
    add_shared(mod, *m);
    mod->add_option("--module", m->module, "Dotted module name (a.b.c)");
    mod->add_option("--package", m->package, "Legacy: package name (with --subpath)");
    mod->add_option("--subpath", m->subpath, "Legacy: file inside the package, e.g. ops/attn.py");
    mod->add_option("--patched-file", m->patched, "The patched module source, taken as it is");
    mod->add_option("--patch", m->patch, "Unified diff applied to the copy (never to the install)");
    mod->add_option("--src-file", m->src, "The source to copy (and patch, with --patch); default: the installed module, as the interpreter finds it");
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
    reb->add_option("--impl-dir", r->impl_dir,
                    "Folder copied flat into the overlay (its entry module and siblings; __pycache__ and dot-files skipped)");
    reb->add_flag("--count-calls", r->count_calls, "Count calls per process (status shows them)");
    reb->callback([&run, r, &g] {
      run = [r, &g] {
        return guarded("add-rebind", [&] {
          AddRebindRequest q{r->common(g), r->target, r->impl_module, r->impl_attr, std::nullopt, std::nullopt};
          if (!r->impl_file.empty()) q.impl_file = fs::path(r->impl_file);
          if (!r->impl_dir.empty()) q.impl_dir = fs::path(r->impl_dir);
          q.count_calls = r->count_calls;
          print_added("add-rebind", add_rebind(cli_disk(), q));
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
    cap->add_option("--capture-file", c->capture_file, "Capture hook module (default: the binary's own share/overlay/capture_shapes.py)");
    cap->callback([&run, c, &g] {
      run = [c, &g] {
        return guarded("add-capture", [&] {
          AddCaptureRequest q{c->common(g), c->target, c->out, c->max, {}};
          q.capture_file = c->capture_file;  // empty: the binary's own capture_shapes.py
          print_added("add-capture", add_capture(cli_disk(), q));
          // The caller's hook file, or null: the binary's own copy of share/overlay/capture_shapes.py.
          result()["capture_file"] = q.capture_file.empty() ? json(nullptr) : json(q.capture_file.string());
          return int{kOk};
        });
      };
    });
  }

  if (want("add-marker")) {
    CLI::App* sub = nullptr;
    auto f = std::make_shared<MarkerFlags>();
    python_verb(app, run, g, "add-marker", "Wrap module:attr in a GEAK_TARGET::<target> profiler range (seam_trace.py)", f, sub,
                [](const MarkerFlags& m, const Globals& gl) {
                  AddMarkerRequest q{m.common(gl), m.target, {}};
                  q.marker_file = m.marker_file;  // empty: the binary's own seam_trace.py
                  return add_marker(cli_disk(), q);
                });
    sub->add_option("--target", f->target, "module:attr to mark (attr may be dotted)")->required();
    sub->add_option("--marker-file", f->marker_file, "Marker hook module, install(target) (default: the binary's own share/overlay/seam_trace.py)");
  }

  if (want("add-hook")) {
    CLI::App* sub = nullptr;
    auto f = std::make_shared<HookFlags>();
    python_verb(app, run, g, "add-hook", "Call impl_module.impl_attr() right after a module finishes importing", f, sub,
                [](const HookFlags& h, const Globals& gl) {
                  AddHookRequest q{h.common(gl), h.module, h.impl_module, h.impl_attr, std::nullopt};
                  if (!h.impl_file.empty()) q.impl_file = fs::path(h.impl_file);
                  return add_hook(cli_disk(), q);
                });
    sub->add_option("--module", f->module, "Module whose import triggers the call")->required();
    sub->add_option("--impl-module", f->impl_module, "Module holding the callable")->required();
    sub->add_option("--impl-attr", f->impl_attr, "Callable of --impl-module, called with no arguments (default install)");
    sub->add_option("--impl-file", f->impl_file, "File copied into the overlay to provide --impl-module");
  }

  if (want("add-installer")) {
    CLI::App* sub = nullptr;
    auto f = std::make_shared<InstallerFlags>();
    python_verb(app, run, g, "add-installer", "Register a package's deferred installer (its files already in the overlay)", f, sub,
                [](const InstallerFlags& i, const Globals& gl) {
                  AddInstallerRequest q{i.common(gl), i.id, i.module, i.callable, i.targets, i.kernels};
                  return add_installer(cli_disk(), q);
                });
    sub->add_option("--id", f->id, "Installer name (one definition per id)")->required();
    sub->add_option("--module", f->module, "Package whose callable installs the hooks")->required();
    sub->add_option("--callable", f->callable, "Callable of --module (default install)");
    sub->add_option("--target", f->targets, "A serving site it owns, module or module:attr (repeatable)");
    sub->add_option("--kernel", f->kernels, "A kernel it provides (repeatable)");
  }

  if (want("merge")) {
    auto f = std::make_shared<MergeFlags>();
    auto* sub = app.add_subcommand("merge", "Compose overlays into a fresh one; conflicting entries or files refuse");
    sub->add_option("--overlay", f->overlay, "The new overlay (absent or empty)")->required();
    sub->add_option("--from", f->from, "The base overlay");
    sub->add_option("--with", f->with, "An incoming overlay (repeatable: merged in order)")->required();
    sub->callback([&run, f] { run = [f] { return guarded("merge", [&] { return run_merge(*f); }); }; });
  }

  // For the overlay_setup.py shim: _ensure_overlay(dir, base) and its SITECUSTOMIZE text.
  if (want("ensure-overlay")) {
    auto f = std::make_shared<Shared>();
    auto* sub = app.add_subcommand("ensure-overlay", "Create the overlay (manifest, sitecustomize.py) if missing; add nothing");
    sub->group("");  // the shim's, not a user's
    add_shared(sub, *f);
    sub->callback([&run, f, &g] {
      run = [f, &g] {
        return guarded("ensure-overlay", [&] {
          PyAddResult r = ensure_overlay(cli_disk(), f->common(g));
          print_added("ensure-overlay", r);
          result()["manifest"] = (r.overlay / "_overlay_manifest.json").string();
          return int{kOk};
        });
      };
    });
  }
  if (want("sitecustomize-text")) {
    auto* sub = app.add_subcommand("sitecustomize-text", "Print the sitecustomize.py this version writes");
    sub->group("");
    auto legacy = std::make_shared<bool>(false);
    sub->add_flag("--legacy", *legacy, "The runtime before installers (the shim's LEGACY_SITECUSTOMIZE)");
    sub->callback([&run, legacy] {
      run = [legacy] {
        const std::string& text = *legacy ? legacy_sitecustomize_text() : sitecustomize_text();
        std::fwrite(text.data(), 1, text.size(), stdout);
        return int{kOk};
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
