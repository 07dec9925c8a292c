#include <memory>

#include "overlay/error.hpp"
#include "overlay/python/sitecustomize.hpp"
#include "overlay/python/verbs.hpp"

#include "commands.hpp"
#include "output.hpp"

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

// A verb whose whole answer is print_added's: registers the shared flags, returns the handler.
template <typename Flags, typename Body>
Handler python_verb(CLI::App& sub, const Globals& g, const char* verb, std::shared_ptr<Flags> f, Body body) {
  add_shared(&sub, *f);
  return [f, &g, verb, body] {
    print_added(verb, body(*f, g));
    return int{kOk};
  };
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
  if (!f.patched.empty() && !f.patch.empty())
    err_line("add-module", "--patch ignored: --patched-file is taken as it is");
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

struct TritonProbeFlags : Shared {
  std::string module = "triton.runtime.jit", probe_file;
};

struct InstallerFlags : Shared {
  std::string id, module, callable = "install";
  std::vector<std::string> targets, kernels;
};

}  // namespace

Handler add_module_command(CLI::App& sub, const Globals& g) {
  auto m = std::make_shared<ModuleFlags>();
  add_shared(&sub, *m);
  sub.add_option("--module", m->module, "Dotted module name (a.b.c)");
  sub.add_option("--package", m->package, "Legacy: package name (with --subpath)");
  sub.add_option("--subpath", m->subpath, "Legacy: file inside the package, e.g. ops/attn.py");
  sub.add_option("--patched-file", m->patched, "The patched module source, taken as it is");
  sub.add_option("--patch", m->patch, "Unified diff applied to the copy (never to the install)");
  sub.add_option(
      "--src-file", m->src,
      "The source to copy (and patch, with --patch); default: the installed module, as the interpreter finds it");
  sub.add_option("--python", m->python, "Interpreter that locates installed modules (env OVERLAY_PYTHON)");
  return [m, &g] { return run_add_module(*m, g); };
}

Handler add_rebind_command(CLI::App& sub, const Globals& g) {
  auto r = std::make_shared<RebindFlags>();
  Handler h = python_verb(sub, g, "add-rebind", r, [](const RebindFlags& f, const Globals& gl) {
    AddRebindRequest q{.common = f.common(gl),
                       .target = f.target,
                       .impl_module = f.impl_module,
                       .impl_attr = f.impl_attr,
                       .impl_file = std::nullopt,
                       .impl_dir = std::nullopt,
                       .count_calls = f.count_calls};
    if (!f.impl_file.empty()) q.impl_file = fs::path(f.impl_file);
    if (!f.impl_dir.empty()) q.impl_dir = fs::path(f.impl_dir);
    return add_rebind(cli_disk(), q);
  });
  sub.add_option("--target", r->target, "module:attr to replace")->required();
  sub.add_option("--impl-module", r->impl_module, "Module holding the implementation")->required();
  sub.add_option("--impl-attr", r->impl_attr, "Attribute of --impl-module to bind")->required();
  sub.add_option("--impl-file", r->impl_file, "File copied into the overlay to provide --impl-module");
  sub.add_option(
      "--impl-dir", r->impl_dir,
      "Folder copied flat into the overlay (its entry module and siblings; __pycache__ and dot-files skipped)");
  sub.add_flag("--count-calls", r->count_calls, "Count calls per process (status shows them)");
  return h;
}

Handler add_capture_command(CLI::App& sub, const Globals& g) {
  auto c = std::make_shared<CaptureFlags>();
  add_shared(&sub, *c);
  sub.add_option("--target", c->target, "module:attr to capture")->required();
  sub.add_option("--out", c->out, "Directory receiving meta.json (and tensors when torch is present)")->required();
  sub.add_option("--max", c->max, "Calls to record (default 5)");
  sub.add_option("--capture-file", c->capture_file,
                 "Capture hook module (default: the binary's own share/overlay/capture_shapes.py)");
  return [c, &g] {
    AddCaptureRequest q{c->common(g), c->target, c->out, c->max, {}};
    q.capture_file = c->capture_file;  // empty: the binary's own capture_shapes.py
    print_added("add-capture", add_capture(cli_disk(), q));
    // The caller's hook file, or null: the binary's own copy of share/overlay/capture_shapes.py.
    result()["capture_file"] = q.capture_file.empty() ? json(nullptr) : json(q.capture_file.string());
    return int{kOk};
  };
}

Handler add_marker_command(CLI::App& sub, const Globals& g) {
  auto f = std::make_shared<MarkerFlags>();
  Handler h = python_verb(sub, g, "add-marker", f, [](const MarkerFlags& m, const Globals& gl) {
    AddMarkerRequest q{m.common(gl), m.target, {}};
    q.marker_file = m.marker_file;  // empty: the binary's own seam_trace.py
    return add_marker(cli_disk(), q);
  });
  sub.add_option("--target", f->target, "module:attr to mark (attr may be dotted)")->required();
  sub.add_option("--marker-file", f->marker_file,
                 "Marker hook module, install(target) (default: the binary's own share/overlay/seam_trace.py)");
  return h;
}

Handler add_hook_command(CLI::App& sub, const Globals& g) {
  auto f = std::make_shared<HookFlags>();
  Handler h = python_verb(sub, g, "add-hook", f, [](const HookFlags& k, const Globals& gl) {
    AddHookRequest q{k.common(gl), k.module, k.impl_module, k.impl_attr, std::nullopt};
    if (!k.impl_file.empty()) q.impl_file = fs::path(k.impl_file);
    return add_hook(cli_disk(), q);
  });
  sub.add_option("--module", f->module, "Module whose import triggers the call")->required();
  sub.add_option("--impl-module", f->impl_module, "Module holding the callable")->required();
  sub.add_option("--impl-attr", f->impl_attr, "Callable of --impl-module, called with no arguments (default install)");
  sub.add_option("--impl-file", f->impl_file, "File copied into the overlay to provide --impl-module");
  return h;
}

// The fork's tool takes the probe from beside itself: ours from beside the binary (the shim passes
// the one beside the script).
fs::path probe_beside_binary() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return (ec ? fs::current_path() : self.parent_path()) / "triton_launch_probe.py";
}

Handler add_triton_launch_probe_command(CLI::App& sub, const Globals& g) {
  auto f = std::make_shared<TritonProbeFlags>();
  Handler h = python_verb(sub, g, "add-triton-launch-probe", f, [](const TritonProbeFlags& k, const Globals& gl) {
    AddTritonProbeRequest q{k.common(gl), k.module, k.probe_file};
    if (q.probe_file.empty()) q.probe_file = probe_beside_binary();
    return add_triton_launch_probe(cli_disk(), q);
  });
  sub.add_option("--module", f->module, "Module whose import installs the probe (default triton.runtime.jit)");
  sub.add_option("--probe-file", f->probe_file,
                 "The fork's triton_launch_probe.py (default: the one beside this binary)");
  return h;
}

Handler add_installer_command(CLI::App& sub, const Globals& g) {
  auto f = std::make_shared<InstallerFlags>();
  Handler h = python_verb(sub, g, "add-installer", f, [](const InstallerFlags& i, const Globals& gl) {
    AddInstallerRequest q{.common = i.common(gl),
                          .id = i.id,
                          .module = i.module,
                          .callable = i.callable,
                          .targets = i.targets,
                          .kernels = i.kernels};
    return add_installer(cli_disk(), q);
  });
  sub.add_option("--id", f->id, "Installer name (one definition per id)")->required();
  sub.add_option("--module", f->module, "Package whose callable installs the hooks")->required();
  sub.add_option("--callable", f->callable, "Callable of --module (default install)");
  sub.add_option("--target", f->targets, "A serving site it owns, module or module:attr (repeatable)");
  sub.add_option("--kernel", f->kernels, "A kernel it provides (repeatable)");
  return h;
}

Handler add_worker_modules_command(CLI::App& sub, const Globals& g) {
  auto f = std::make_shared<Shared>();
  Handler h = python_verb(sub, g, "add-worker-modules", f, [](const Shared& k, const Globals& gl) {
    return add_worker_modules(cli_disk(), k.common(gl));
  });
  return [h] {
    int rc = h();
    out_line(
        "launch TP workers with: VLLM_WORKER_MULTIPROC_METHOD=spawn ... --worker-extension-cls "
        "_overlay_worker_ext.OverlayWorkerExtension");
    return rc;
  };
}

// For the overlay_setup.py shim: _ensure_overlay(dir, base) and its SITECUSTOMIZE text.
Handler ensure_overlay_command(CLI::App& sub, const Globals& g) {
  auto f = std::make_shared<Shared>();
  add_shared(&sub, *f);
  return [f, &g] {
    PyAddResult r = ensure_overlay(cli_disk(), f->common(g));
    print_added("ensure-overlay", r);
    result()["manifest"] = (r.overlay / "_overlay_manifest.json").string();
    return int{kOk};
  };
}

}  // namespace overlay::cli
